"""Devices with bindingConditions (KEP-5007) are left out, with a line saying so: gpufleet binds
without waiting for conditions, so handing such a device out would start a pod on a device that
is not ready."""

from __future__ import annotations

import random

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot
from tests.core.dra_builders import claim, claim_pod, exactly, gpu_device, gpu_node, node_slice, nvidia_classes


def test_a_device_with_binding_conditions_is_never_allocated_and_the_snapshot_says_why() -> None:
    waiting = {**gpu_device("a", 0), "bindingConditions": ["dra.example.com/attached"],
               "bindingFailureConditions": ["dra.example.com/failed"]}
    snap = ClusterSnapshot.build([gpu_node("a", gpus=2)], device_classes=nvidia_classes(),
                                 slices=[node_slice("a", [waiting, gpu_device("a", 1)])],
                                 claims=[claim("c1", [exactly()]), claim("c2", [exactly()])])
    assert snap.dra.problems == ("pool gpu.nvidia.com/a generation 1: device gpu-0 has bindingConditions "
                                 "['dra.example.com/attached'], which gpufleet does not wait for yet; left out",)
    pods = [claim_pod(f"p{i}", f"c{i}") for i in (1, 2)]
    result = schedule(snap, pods, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
    assert [d.device for b in result.binds for a in b.claims for d in a.devices] == ["gpu-1"]
    assert len(result.unschedulable) == 1
