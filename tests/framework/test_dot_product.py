"""DotProduct: 100 x (1 - dot/2) of the node's free [CPU/128 cores, GPU/8 GPUs] and the pod's request vector."""

from __future__ import annotations

import pytest
from pluginkit import bound, holding, run, scores, snapshot

from gpufleet.framework.plugins.fgd_baselines import DotProduct
from gpufleet.model import PodSpec
from gpufleet.testing import make_node, make_pod

# a: 128 cores, 8 idle GPUs | b: 64 cores, 8 GPUs of which 6 busy
NODES = [make_node("a").cpu(128_000).gpus(8).build(), make_node("b").cpu(64_000).gpus(8).build()]
RUNNING = [holding(f"r{j}", "b", gpus=(j,)) for j in range(6)]

CASES: list[tuple[str, PodSpec, list[float]]] = [
    # a: 1*.5 + 1*.125 = .625 -> 68.75 -> 68 | b: .5*.5 + .25*.125 = .28125 -> 85.9 -> 85
    ("the node whose free vector is least aligned with the request scores highest",
     make_pod("p").cpu(64_000).gpus(1).build(), [68.0, 85.0]),
    # a: .5 dot -> 75 | b: .25 -> 87.5 -> 87
    ("a CPU-only pod is judged on CPU alone",
     make_pod("p").cpu(64_000).build(), [75.0, 87.0]),
    # GPU only, 2 GPUs: a 1*.25 -> 87.5 -> 87 | b .25*.25 = .0625 -> 96.875 -> 96
    ("a GPU-only pod is judged on GPU alone",
     make_pod("p").cpu(0).gpus(2).build(), [87.0, 96.0]),
    ("a pod asking nothing scores 100 everywhere",
     make_pod("p").cpu(0).mem_mib(0).build(), [100.0, 100.0]),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_dot_product_scores(pod: PodSpec, expected: list[float]) -> None:
    assert scores(DotProduct(), snapshot(NODES, RUNNING), pod) == expected


def test_dot_product_places_on_the_less_aligned_node() -> None:
    result = run(NODES, [make_pod("p").cpu(64_000).gpus(1).build()], "DotProduct", running=RUNNING)
    assert bound(result) == {"p": ("b", (6,))}
