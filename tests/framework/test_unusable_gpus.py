"""Broken and MIG-mode GPUs are absent capacity, not allocated capacity; device choice keeps
NVLink domains whole; running pods cannot hold MIG-mode GPUs as whole devices."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gpufleet.core.cycle import schedule
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.plugins.resource_alloc import MostAllocated
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.model import ClusterSnapshot, ModelError, NodeName, Placement, PodUid
from gpufleet.testing import make_node, make_pod


def test_unhealthy_gpus_count_as_absent_not_as_allocated_for_most_allocated() -> None:
    broken = make_node("a").cpu(64_000).mem_gib(256).gpus(4).unhealthy(0).unhealthy(1).build()
    small = make_node("b").cpu(64_000).mem_gib(256).gpus(2).build()
    snap = ClusterSnapshot.build([broken, small])
    view = type("V", (), {"cluster": snap.cluster, "usage": snap.usage})()
    pod = make_pod("p").gpus(1).build()
    scores = MostAllocated().score(CycleState(random.Random(0), 0.0), pod, view, np.array([0, 1]))
    assert scores[0] == pytest.approx(scores[1]), "a node with 2 broken of 4 GPUs scores like a 2-GPU node"


def test_one_gpu_comes_from_the_nvlink_domain_with_fewest_free_gpus() -> None:
    node = make_node("n").gpus(8, nvlink_domains=2).build()  # domain 0: GPUs 0-3, domain 1: GPUs 4-7
    running = [Placement(PodUid("x"), NodeName("n"), 0, 0, (4, 5, 6), 1000, 81920)]
    snap = ClusterSnapshot.build([node], running)
    profile = build_profile(ProfileSettings(scores=(ScoreRef("MostAllocated"),)))
    result = schedule(snap, [make_pod("one").gpus(1).build()], profile, now=0.0, rng=random.Random(0))
    assert result.binds[0].gpus == (7,), "domain 0 stays whole for a 4-GPU job"


def test_a_running_pod_cannot_hold_a_mig_mode_gpu_as_a_whole_device() -> None:
    node = make_node("n").gpus(2, model="A100-80GB").mig(0, "3g.40gb", "3g.40gb").build()
    with pytest.raises(ModelError, match="GPU 0 on node n is in MIG mode"):
        ClusterSnapshot.build([node], [Placement(PodUid("x"), NodeName("n"), 0, 0, (0,), 1000, 81920)])
