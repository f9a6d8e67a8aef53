"""NodeAffinity: nodeSelector and required node affinity (terms ORed, requirements ANDed)."""

from __future__ import annotations

import pytest
from pluginkit import mask, reasons, snapshot, state

from gpufleet.framework.plugins.node_affinity import REASON, NodeAffinity
from gpufleet.model import NodeSelectorRequirement, NodeSelectorTerm, Operator, PodSpec
from gpufleet.testing import make_node, make_pod

# a: zone z1, gen 3 | b: zone z2, gen 5 | c: no labels | d: gen is not a number
NODES = [make_node("a").label("zone", "z1").label("gen", "3").build(),
         make_node("b").label("zone", "z2").label("gen", "5").build(),
         make_node("c").build(),
         make_node("d").label("gen", "x").build()]


CASES: list[tuple[str, PodSpec, list[bool]]] = [
    ("a nodeSelector matches only nodes with that exact label value",
     make_pod("p").selector("zone", "z1").build(), [True, False, False, False]),
    ("In matches nodes whose label is one of the values",
     make_pod("p").affinity("zone", "In", "z1", "z3").build(), [True, False, False, False]),
    ("NotIn matches other values and nodes without the label",
     make_pod("p").affinity("zone", "NotIn", "z1").build(), [False, True, True, True]),
    ("Exists matches nodes that have the label, whatever its value",
     make_pod("p").affinity("gen", "Exists").build(), [True, True, False, True]),
    ("DoesNotExist matches nodes without the label",
     make_pod("p").affinity("zone", "DoesNotExist").build(), [False, False, True, True]),
    ("Gt compares the label as an integer and skips non-numbers and absent labels",
     make_pod("p").affinity("gen", "Gt", "4").build(), [False, True, False, False]),
    ("Lt compares the label as an integer and skips non-numbers and absent labels",
     make_pod("p").affinity("gen", "Lt", "4").build(), [True, False, False, False]),
    ("Gt is strict",
     make_pod("p").affinity("gen", "Gt", "5").build(), [False, False, False, False]),
    ("two terms are ORed",
     make_pod("p").affinity("zone", "In", "z1").affinity("gen", "In", "x").build(), [True, False, False, True]),
    ("a nodeSelector and affinity must both match",
     make_pod("p").selector("zone", "z2").affinity("gen", "Lt", "4").build(), [False, False, False, False]),
    ("a nodeSelector with two keys needs both",
     make_pod("p").selector("zone", "z2").selector("gen", "5").build(), [False, True, False, False]),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_node_affinity(pod: PodSpec, expected: list[bool]) -> None:
    snap = snapshot(NODES)
    plugin = NodeAffinity()
    assert mask(plugin, snap, pod) == expected
    failing = [not x for x in expected]
    assert reasons(plugin, snap, pod) == ({REASON: failing} if any(failing) else {})


def test_requirements_inside_one_term_are_anded() -> None:
    term = NodeSelectorTerm((NodeSelectorRequirement("zone", Operator.EXISTS),
                             NodeSelectorRequirement("gen", Operator.GT, ("4",))))
    pod = PodSpec(make_pod("p").build().uid, "p", affinity=(term,))
    assert mask(NodeAffinity(), snapshot(NODES), pod) == [False, True, False, False]


def test_a_pod_without_constraints_filters_nothing() -> None:
    snap = snapshot(NODES)
    pod = make_pod("p").build()
    assert NodeAffinity().filter(state(), pod, snap) is None
    assert reasons(NodeAffinity(), snap, pod) == {}
    assert REASON == "node(s) didn't match Pod's node affinity/selector"
