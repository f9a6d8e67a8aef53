"""Each pod's unschedulable reason names its own claims, also when pods alike fail together."""

from __future__ import annotations

import random

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot, PodUid
from tests.core.dra_builders import claim, claim_pod, exactly, gpu_node, gpu_slice, nvidia_classes


def test_pods_alike_that_fit_nowhere_each_name_their_own_claim() -> None:
    """The cycle remembers why a pod fits nowhere and answers the same for pods alike; the claim
    part of the reason must still name the pod's own claim, not the first one that failed."""
    claims = [claim(f"c{i}", [exactly(count=4)]) for i in range(3)]
    snap = ClusterSnapshot.build([gpu_node("a", gpus=2)], device_classes=nvidia_classes(),
                                 slices=[gpu_slice("a", gpus=2)], claims=claims)
    pods = [claim_pod(f"p{i}", f"c{i}") for i in range(3)]
    result = schedule(snap, pods, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
    assert not result.binds
    for i in range(3):
        message = result.unschedulable[PodUid(f"default/p{i}")].message
        assert f"resourceclaim default/c{i}: request gpu: no node has 4 device(s) of class gpu.nvidia.com" in message
        assert all(f"default/c{j}:" not in message for j in range(3) if j != i)
