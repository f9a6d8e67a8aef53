"""NodeResourcesFit: CPU, memory and pod-count fit, with kube-scheduler's reasons."""

from __future__ import annotations

from typing import Sequence

import pytest
from pluginkit import holding, mask, reasons, snapshot

from gpufleet.framework.plugins.node_resources import NodeResourcesFit
from gpufleet.model import NodeInfo, Placement, PodSpec
from gpufleet.testing import make_node, make_pod

SMALL = make_node("a").cpu(4000).mem_mib(4096).max_pods(2)

CASES: list[tuple[str, Sequence[NodeInfo], Sequence[Placement], PodSpec, list[bool], dict[str, list[bool]]]] = [
    ("a pod fits where CPU, memory and a pod slot are free",
     [SMALL.build()], [], make_pod("p").cpu(1000).mem_mib(1024).build(), [True], {}),
    ("a pod that needs exactly the free CPU and memory fits",
     [SMALL.build()], [holding("r", "a", cpu=3000, mem=3072)], make_pod("p").cpu(1000).mem_mib(1024).build(),
     [True], {}),
    ("one milli-core too many is Insufficient cpu",
     [SMALL.build()], [holding("r", "a", cpu=3000)], make_pod("p").cpu(1001).mem_mib(0).build(),
     [False], {"Insufficient cpu": [True]}),
    ("one MiB too many is Insufficient memory",
     [SMALL.build()], [holding("r", "a", mem=3072)], make_pod("p").cpu(0).mem_mib(1025).build(),
     [False], {"Insufficient memory": [True]}),
    ("a node at its pod limit is full even for a pod asking nothing",
     [SMALL.build()], [holding("r1", "a"), holding("r2", "a")], make_pod("p").cpu(0).mem_mib(0).build(),
     [False], {"Too many pods": [True]}),
    ("a pod too big for everything gets every reason",
     [SMALL.build()], [holding("r1", "a"), holding("r2", "a")], make_pod("p").cpu(5000).mem_mib(5000).build(),
     [False], {"Too many pods": [True], "Insufficient cpu": [True], "Insufficient memory": [True]}),
    ("each node is judged on its own resources",
     [make_node("a").cpu(1000).build(), make_node("b").cpu(4000).mem_mib(512).build(),
      make_node("c").cpu(4000).build()], [], make_pod("p").cpu(2000).mem_mib(1024).build(),
     [False, False, True], {"Insufficient cpu": [True, False, False], "Insufficient memory": [False, True, False]}),
]


@pytest.mark.parametrize(("nodes", "running", "pod", "expected", "why"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_node_resources_fit(nodes: Sequence[NodeInfo], running: Sequence[Placement], pod: PodSpec,
                            expected: list[bool], why: dict[str, list[bool]]) -> None:
    snap = snapshot(nodes, running)
    plugin = NodeResourcesFit()
    assert mask(plugin, snap, pod) == expected
    assert reasons(plugin, snap, pod) == why
