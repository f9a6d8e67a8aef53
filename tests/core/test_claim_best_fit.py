"""The best-fit term for claims not placed as GPUs spans 0 to 100 between the feasible nodes, as
the profile's own scores do, so it weighs against them as documented (docs/dra.md)."""

from __future__ import annotations

import random

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodSpec, PodUid
from tests.core.dra_builders import claim, exactly, gpu_device, node_slice, nvidia_classes, plain_node


def test_the_node_left_tightest_gets_the_full_best_fit_term_against_least_allocated() -> None:
    """After the pod, node a keeps 1 free device and b 2: best fit gives a 100 and b 0. Least
    allocated gives b 100 and a 25 (a runs a pod holding three quarters of its CPU and memory):
    a wins by 125 to 100. With the term scaled by the most free (a: 50), b would win."""
    nodes = [plain_node("a"), plain_node("b")]
    slices = [node_slice("a", [gpu_device("a", m) for m in range(2)]),
              node_slice("b", [gpu_device("b", m) for m in range(3)])]
    busy = Placement(PodUid("default/busy"), NodeName("a"), cpu_milli=48_000, mem_mib=384 * 1024)
    snap = ClusterSnapshot.build(nodes, [busy], device_classes=nvidia_classes(), slices=slices,
                                 claims=[claim("c", [exactly()])])
    pod = PodSpec(PodUid("default/p"), "p", cpu_milli=1, mem_mib=1, claims=("default/c",))
    profile = build_profile(ProfileSettings(scores=(ScoreRef("LeastAllocated"),)))
    (bind,) = schedule(snap, [pod], profile, now=0.0, rng=random.Random(0)).binds
    assert bind.node == "a"
