"""MostAllocated (bin-packing): mean of the CPU, memory and GPU-milli allocated fractions after placing, x100."""

from __future__ import annotations

import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.resource_alloc import MostAllocated
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

# a: a quarter used (2 of 8 cores, 2 of 8 GiB, 1 of 4 GPUs) | b: idle, same size | c: idle, no GPUs
NODES = [make_node("a").cpu(8000).mem_mib(8192).gpus(4).build(),
         make_node("b").cpu(8000).mem_mib(8192).gpus(4).build(),
         make_node("c").cpu(8000).mem_mib(8192).build()]
RUNNING = [holding("r", "a", cpu=2000, mem=2048, gpus=(0,), gpu_mem_mib=80 * 1024)]

CASES: list[tuple[str, PodSpec, list[int], list[float]]] = [
    ("a GPU pod scores each node's allocated share after placing it",
     make_pod("p").cpu(2000).mem_mib(2048).gpus(1).build(), [0, 1], [50.0, 25.0]),
    ("a CPU-only pod still counts the GPU term on GPU nodes, and skips it on CPU-only nodes",
     make_pod("p").cpu(2000).mem_mib(2048).build(), [0, 1, 2], [125 / 3, 50 / 3, 25.0]),
    ("a fraction counts its milli against the node's GPU capacity",
     make_pod("p").cpu(0).mem_mib(0).fraction(500).build(), [1], [12.5 / 3]),
    ("MIG slices do not count as GPU milli",
     make_pod("p").cpu(0).mem_mib(0).mig("1g.10gb").build(), [0], [(0.25 + 0.25 + 0.25) / 3 * 100]),
]


@pytest.mark.parametrize(("pod", "nodes", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_most_allocated_scores(pod: PodSpec, nodes: list[int], expected: list[float]) -> None:
    assert scores(MostAllocated(), snapshot(NODES, RUNNING), pod, nodes) == pytest.approx(expected)


def test_most_allocated_packs_onto_the_busier_node() -> None:
    result = run(NODES, [make_pod("p").cpu(2000).gpus(1).build()], "MostAllocated", running=RUNNING)
    assert bound(result) == {"p": ("a", (1,))}
