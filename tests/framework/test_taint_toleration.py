"""TaintToleration: NoSchedule and NoExecute taints need a matching toleration; PreferNoSchedule never filters."""

from __future__ import annotations

from typing import Sequence

import pytest
from pluginkit import mask, reasons, snapshot, state

from gpufleet.framework.plugins.taint_toleration import TaintTolerationFilter
from gpufleet.model import NodeInfo, PodSpec
from gpufleet.testing import PodBuilder, make_node, make_pod

GPU_TAINT = [make_node("a").build(), make_node("b").taint("gpu", "true").build()]
TAINTED = "node(s) had untolerated taint {gpu: true}"


def _pod() -> PodBuilder:
    return make_pod("p")


CASES: list[tuple[str, Sequence[NodeInfo], PodSpec, list[bool], dict[str, list[bool]]]] = [
    ("a NoSchedule taint without a toleration filters the node",
     GPU_TAINT, _pod().build(), [True, False], {TAINTED: [False, True]}),
    ("a NoExecute taint filters as NoSchedule does",
     [make_node("a").taint("maint", "now", "NoExecute").build()], _pod().build(), [False],
     {"node(s) had untolerated taint {maint: now}": [True]}),
    ("a PreferNoSchedule taint never filters",
     [make_node("a").taint("spot", "yes", "PreferNoSchedule").build()], _pod().build(), [True], {}),
    ("an Equal toleration with the same key and value tolerates",
     GPU_TAINT, _pod().tolerate("gpu", "true").build(), [True, True], {}),
    ("an Equal toleration with another value does not tolerate",
     GPU_TAINT, _pod().tolerate("gpu", "false").build(), [True, False], {TAINTED: [False, True]}),
    ("an Exists toleration tolerates any value of its key",
     GPU_TAINT, _pod().tolerate("gpu", op="Exists").build(), [True, True], {}),
    ("an Exists toleration with an empty key tolerates every taint",
     [make_node("a").taint("x", "1").taint("y", "2", "NoExecute").build()], _pod().tolerate(op="Exists").build(),
     [True], {}),
    ("a toleration for NoSchedule does not cover NoExecute",
     [make_node("a").taint("gpu", "true", "NoExecute").build()],
     _pod().tolerate("gpu", "true", effect="NoSchedule").build(), [False],
     {TAINTED: [True]}),
    ("a toleration with the taint's effect covers it",
     [make_node("a").taint("gpu", "true", "NoExecute").build()],
     _pod().tolerate("gpu", "true", effect="NoExecute").build(), [True], {}),
    ("tolerating one of two taints is not enough; the reason names the other",
     [make_node("a").taint("gpu", "true").taint("team", "ml").build()], _pod().tolerate("gpu", "true").build(),
     [False], {"node(s) had untolerated taint {team: ml}": [True]}),
    ("nodes with different taints get separate reasons",
     [make_node("a").taint("gpu", "true").build(), make_node("b").taint("team", "ml").build(),
      make_node("c").taint("gpu", "true").build()], _pod().build(), [False, False, False],
     {TAINTED: [True, False, True], "node(s) had untolerated taint {team: ml}": [False, True, False]}),
]


@pytest.mark.parametrize(("nodes", "pod", "expected", "why"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_taint_toleration(nodes: Sequence[NodeInfo], pod: PodSpec, expected: list[bool],
                          why: dict[str, list[bool]]) -> None:
    snap = snapshot(nodes)
    plugin = TaintTolerationFilter()
    assert mask(plugin, snap, pod) == expected
    assert reasons(plugin, snap, pod) == why


def test_an_untainted_cluster_filters_nothing_and_says_so_with_none() -> None:
    snap = snapshot([make_node("a").build(), make_node("b").build()])
    assert TaintTolerationFilter().filter(state(), make_pod("p").build(), snap) is None


def test_the_mask_is_cached_per_toleration_set_within_a_cycle() -> None:
    snap = snapshot(GPU_TAINT)
    plugin, st = TaintTolerationFilter(), state()
    first = plugin.filter(st, make_pod("p").build(), snap)
    second = plugin.filter(st, make_pod("q").cpu(5).build(), snap)
    tolerant = plugin.filter(st, make_pod("r").tolerate("gpu", "true").build(), snap)
    assert first is second
    assert first is not None and tolerant is not None
    assert (first.tolist(), tolerant.tolist()) == ([True, False], [True, True])
