"""GpuClustering: keep GPU task classes together; bands 75/50/25/0 plus 25 x used share of 8 GPUs."""

from __future__ import annotations

import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.fgd_baselines import GpuClustering
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

# a: one fraction pod | b: a fraction and a 1-GPU pod | c: empty | d: one 1-GPU pod | e: empty, 4 GPUs
NODES = [make_node(n).gpus(k).build() for n, k in (("a", 8), ("b", 8), ("c", 8), ("d", 8), ("e", 4))]
RUNNING = [holding("fa", "a", gpus=(0,), milli=500), holding("fb", "b", gpus=(0,), milli=500),
           holding("wb", "b", gpus=(1,)), holding("wd", "d", gpus=(0,))]
# fill = 25 * (8000 - free milli) // 8000: a 1, b 4, c 0, d 3, e 12

CASES: list[tuple[str, PodSpec, list[float]]] = [
    ("a fraction scores 75+ where only fractions run, 50+ beside other classes, 25+ on empty nodes, "
     "0+ where only other classes run",
     make_pod("p").fraction(200).build(), [76.0, 54.0, 25.0, 3.0, 37.0]),
    ("a one-GPU pod's own class is the one-GPU class",
     make_pod("p").gpus(1).build(), [1.0, 54.0, 25.0, 78.0, 37.0]),
    ("a two-GPU pod is a class of its own",
     make_pod("p").gpus(2).build(), [1.0, 4.0, 25.0, 3.0, 37.0]),
    ("a CPU-only pod scores 0", make_pod("p").build(), [0.0] * 5),
    ("a MIG pod scores 0", make_pod("p").mig("1g.10gb").build(), [0.0] * 5),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gpu_clustering_bands(pod: PodSpec, expected: list[float]) -> None:
    assert scores(GpuClustering(), snapshot(NODES, RUNNING), pod) == expected


def test_three_gpu_pods_share_the_other_whole_gpu_class() -> None:
    snap = snapshot([make_node("a").gpus(8).build()], [holding("r", "a", gpus=(0, 1, 2))])
    # 3 GPUs is class "other whole-GPU count"; a 5-GPU pod shares it, a 4-GPU pod does not.
    assert scores(GpuClustering(), snap, make_pod("p").gpus(5).build()) == [75.0 + 9]
    assert scores(GpuClustering(), snap, make_pod("p").gpus(4).build()) == [0.0 + 9]


def test_gpu_clustering_sends_each_class_to_its_own_nodes() -> None:
    result = run(NODES, [make_pod("p").fraction(200).build(), make_pod("q").gpus(1).build()], "GpuClustering",
                 running=RUNNING)
    assert bound(result) == {"p": ("a", (0,)), "q": ("d", (1,))}
