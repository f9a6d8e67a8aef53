"""LeastAllocated (spreading): 100 minus MostAllocated's score."""

from __future__ import annotations

import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.resource_alloc import LeastAllocated
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

NODES = [make_node("a").cpu(8000).mem_mib(8192).gpus(4).build(),
         make_node("b").cpu(8000).mem_mib(8192).gpus(4).build(),
         make_node("c").cpu(8000).mem_mib(8192).build()]
RUNNING = [holding("r", "a", cpu=2000, mem=2048, gpus=(0,), gpu_mem_mib=80 * 1024)]

CASES: list[tuple[str, PodSpec, list[int], list[float]]] = [
    ("a GPU pod prefers the node left with the most free share",
     make_pod("p").cpu(2000).mem_mib(2048).gpus(1).build(), [0, 1], [50.0, 75.0]),
    ("a CPU-only pod ignores the GPU term only on nodes without GPUs",
     make_pod("p").cpu(2000).mem_mib(2048).build(), [0, 1, 2], [100 - 125 / 3, 100 - 50 / 3, 75.0]),
    ("a pod asking nothing on an idle GPU node scores 100",
     make_pod("p").cpu(0).mem_mib(0).build(), [1], [100.0]),
]


@pytest.mark.parametrize(("pod", "nodes", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_least_allocated_scores(pod: PodSpec, nodes: list[int], expected: list[float]) -> None:
    assert scores(LeastAllocated(), snapshot(NODES, RUNNING), pod, nodes) == pytest.approx(expected)


def test_least_allocated_spreads_pods_over_nodes() -> None:
    pods = [make_pod(f"p{i}").cpu(1000).gpus(1).build() for i in range(3)]
    result = run(NODES[:2], pods, "LeastAllocated", running=RUNNING)
    assert bound(result) == {"p0": ("b", (0,)), "p1": ("b", (1,)), "p2": ("a", (1,))}
