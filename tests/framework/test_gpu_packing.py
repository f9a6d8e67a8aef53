"""GpuPacking: shared devices first (50..100), then free GPUs of used nodes (33..50), idle nodes last."""

from __future__ import annotations

import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.fgd_baselines import GpuPacking
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

# a: GPU 0 has 600 milli free | b: 350 free | c: 100 free | d: 8 idle GPUs | e: 2 idle | f: 20 idle | g: 599 free
NODES = [make_node(n).gpus(k).build() for n, k in (("a", 8), ("b", 8), ("c", 8), ("d", 8), ("e", 2), ("f", 20),
                                                    ("g", 8))]
RUNNING = [holding("ra", "a", gpus=(0,), milli=400), holding("rb", "b", gpus=(0,), milli=650),
           holding("rc", "c", gpus=(0,), milli=900), holding("rg", "g", gpus=(0,), milli=401)]

CASES: list[tuple[str, PodSpec, list[float]]] = [
    ("a fraction that fits a used device scores 100 minus a tenth of that device's free percent; "
     "one needing a free device on a used node scores 49; idle nodes score 33 minus their GPUs, at least their GPUs",
     make_pod("p").fraction(300).build(), [94.0, 97.0, 49.0, 25.0, 31.0, 20.0, 95.0]),
    ("a whole-GPU pod on a used node scores 50 minus its GPU count; idle nodes are the last tier",
     make_pod("p").gpus(2).build(), [48.0, 48.0, 48.0, 25.0, 31.0, 20.0, 48.0]),
    ("a CPU-only pod scores 0 everywhere",
     make_pod("p").build(), [0.0] * 7),
    ("a MIG pod scores 0 everywhere",
     make_pod("p").mig("1g.10gb").build(), [0.0] * 7),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gpu_packing_tiers(pod: PodSpec, expected: list[float]) -> None:
    assert scores(GpuPacking(), snapshot(NODES, RUNNING), pod) == expected


def test_whole_gpus_on_a_used_node_score_at_least_33() -> None:
    snap = snapshot([make_node("a").gpus(20).build()], [holding("r", "a", gpus=(0,), milli=10)])
    assert scores(GpuPacking(), snap, make_pod("p").gpus(18).build()) == [33.0]


def test_gpu_packing_fills_the_fullest_shared_device_first() -> None:
    result = run(NODES, [make_pod("p").fraction(300).build(), make_pod("q").gpus(1).build()], "GpuPacking",
                 running=RUNNING)
    # p: b's GPU 0 (350 free) scores 97. q: every used node scores 49, the lowest name wins.
    assert bound(result) == {"p": ("b", (0,)), "q": ("a", (1,))}
