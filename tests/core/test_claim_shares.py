"""Shares of a device several claims may hold: each allocation result carries its own share ID."""

from __future__ import annotations

import random

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot
from tests.core.dra_builders import claim, claim_pod, exactly, gpu_device, gpu_node, node_slice, nvidia_classes


def test_each_share_of_a_shared_device_gets_its_own_stable_share_id_and_exclusive_devices_none() -> None:
    devices = [gpu_device("a", 0, shared=True), gpu_device("a", 1)]
    share = {"capacity": {"requests": {"memory": "20Gi"}},
             "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}]}
    claims = [claim("s1", [exactly(**share)]), claim("s2", [exactly(**share)]),
              claim("x", [exactly(selectors=[{"cel": {"expression": "!device.allowMultipleAllocations"}}])])]
    snap = ClusterSnapshot.build([gpu_node("a", gpus=2)], device_classes=nvidia_classes(),
                                 slices=[node_slice("a", devices)], claims=claims)
    pods = [claim_pod("p1", "s1"), claim_pod("p2", "s2"), claim_pod("q", "x")]

    def results() -> dict[str, tuple[str, str | None]]:
        out = schedule(snap, pods, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
        return {a.claim: (d.device, d.share_id) for p in out.binds for a in p.claims for d in a.devices}
    got = results()
    assert got["default/s1"][0] == got["default/s2"][0] == "gpu-0"
    ids = {got["default/s1"][1], got["default/s2"][1]}
    assert None not in ids and len(ids) == 2, got
    assert got["default/x"] == ("gpu-1", None)
    assert results() == got, "the same decision gives the same share IDs"
