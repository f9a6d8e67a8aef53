"""BestFit: 100 x (1 - [0.5 leftover CPU / 128 cores + 0.5 leftover GPU / 8 GPUs]), truncated, min-max normalised."""

from __future__ import annotations

import numpy as np
import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.fgd_baselines import BestFit, min_max_normalize
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

# a: 8 idle GPUs | b: 8 GPUs, 4 busy | c: 2 idle GPUs. All 64 cores free.
NODES = [make_node("a").gpus(8).build(), make_node("b").gpus(8).build(), make_node("c").gpus(2).build()]
RUNNING = [holding(f"r{j}", "b", gpus=(j,)) for j in range(4)]

CASES: list[tuple[str, PodSpec, list[float]]] = [
    # leftover: a .25 + .5*7000/8000 = .6875 -> 31; b .25 + .1875 -> 56; c .25 + .0625 -> 68
    ("a one-GPU pod scores the node it leaves fullest highest",
     make_pod("p").cpu(0).gpus(1).build(), [31.0, 56.0, 68.0]),
    # a fraction of 500: a .25 + .5*7500/8000 = .71875 -> 28; b .46875 -> 53; c .34375 -> 65
    ("a fraction counts its milli",
     make_pod("p").cpu(0).fraction(500).build(), [28.0, 53.0, 65.0]),
    # 32 cores: leftover CPU 32000/128000*.5 = .125 on each; GPU term 0.5 on a, .25 on b, .125 on c
    ("a CPU-only pod sees the same leftover CPU everywhere, so GPU leftover decides",
     make_pod("p").cpu(32000).build(), [37.0, 62.0, 75.0]),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_best_fit_raw_scores(pod: PodSpec, expected: list[float]) -> None:
    assert scores(BestFit(), snapshot(NODES, RUNNING), pod) == expected


NORMALIZE: list[tuple[str, list[float], list[float]]] = [
    ("min-max maps the lowest to 0 and the highest to 100, flooring the rest", [31, 56, 68], [0, 67, 100]),
    ("all-equal scores normalise to all zeros", [40, 40], [0, 0]),
    ("a single node scores 0", [73], [0]),
    ("no nodes give no scores", [], []),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in NORMALIZE], ids=[c[0] for c in NORMALIZE])
def test_min_max_normalize(raw: list[float], expected: list[float]) -> None:
    assert BestFit().normalize_score(np.array(raw, dtype=np.float64)).tolist() == expected
    assert min_max_normalize(np.array(raw, dtype=np.float64)).tolist() == expected


def test_best_fit_fills_the_smallest_node_and_the_tightest_device() -> None:
    running = RUNNING + [holding("f", "c", gpus=(1,), milli=400)]
    result = run(NODES, [make_pod("p").cpu(0).fraction(500).build(), make_pod("q").cpu(0).gpus(1).build()],
                 "BestFit", running=running)
    assert bound(result) == {"p": ("c", (1,)), "q": ("c", (0,))}
