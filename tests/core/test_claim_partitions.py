"""A GPU carved into MIG placements through DRA claims is not also handed out whole or shared
through `nvidia.com/gpu`, and a GPU in use that way offers no placements (the agent runs its
device plugin beside its DRA driver, so both kinds of pod can ask for the same GPUs)."""

from __future__ import annotations

import random
from typing import Sequence

from gpufleet.agent.resourceslices import MigMode
from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot, Placement, PodSpec, PodUid, whole_gpus
from gpufleet.model.dra import parse_slice
from gpufleet.model.dra_table import DeviceRef
from gpufleet.testing import dra_objects as dra
from tests.core.dra_builders import claim, claim_pod, gpu_node, nvidia_classes, uuid

MIG_1G = dra.mig_device("1g.10gb")


def _snap(running: Sequence[Placement] = (), claims: int = 1) -> ClusterSnapshot:
    """Node a, its 8 GPUs published as Dynamic MIG; claims m (or m0, m1, ...) for a 1g.10gb device each."""
    slices = [parse_slice(s) for s in dra.node_slices("a", [uuid("a", m) for m in range(8)], mig=MigMode.DYNAMIC)]
    names = ["m"] if claims == 1 else [f"m{i}" for i in range(claims)]
    return ClusterSnapshot.build([gpu_node("a")], running, device_classes=nvidia_classes(), slices=slices,
                                 claims=[claim(name, [MIG_1G]) for name in names])


def _extended(name: str, gpus: int) -> PodSpec:
    return PodSpec(PodUid(f"default/{name}"), name, cpu_milli=1000, mem_mib=1024, gpu=whole_gpus(gpus))


def _run(snap: ClusterSnapshot, pods: Sequence[PodSpec]) -> CycleResult:
    return schedule(snap, pods, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))


def _parent(snap: ClusterSnapshot, p: Placement) -> int:
    """The GPU the placement's one MIG device is carved from, by its `parentUUID`."""
    (d,) = [d for a in p.claims for d in a.devices]
    t = snap.cluster.devices
    parent = t.devices[t.index[DeviceRef(d.driver, d.pool, d.device)]].attributes["gpu.nvidia.com/parentUUID"]
    return next(m for m in range(8) if uuid("a", m) == parent)


def test_a_gpu_carved_by_a_claim_is_not_handed_out_whole_until_the_claim_goes() -> None:
    snap = _snap()
    first = _run(snap, [claim_pod("mig", "m")])
    (mig,) = first.binds
    carved = _parent(snap, mig)
    after = snap.apply([mig])
    assert int(after.usage.gpu_used_milli[0, carved]) == 1000
    second = _run(after, [_extended("all", 8), _extended("seven", 7)])
    assert [b.pod for b in second.binds] == ["default/seven"]
    (seven,) = second.binds
    assert carved not in seven.gpus
    released = after.apply(releases=[mig.pod])
    assert int(released.usage.gpu_used_milli[0, carved]) == 0
    assert [b.pod for b in _run(released, [_extended("all", 8)]).binds] == ["default/all"]


def test_a_gpu_in_use_through_nvidia_com_gpu_offers_no_placements() -> None:
    busy = Placement(PodUid("default/busy"), gpu_node("a").name, gpus=tuple(range(7)), milli=1000)
    snap = _snap([busy])
    (mig,) = _run(snap, [claim_pod("mig", "m")]).binds
    assert _parent(snap, mig) == 7
    full = Placement(PodUid("default/busy"), gpu_node("a").name, gpus=tuple(range(8)), milli=1000)
    result = _run(_snap([full]), [claim_pod("mig", "m")])
    assert not result.binds and PodUid("default/mig") in result.unschedulable


def test_placements_of_one_gpu_still_pack_onto_it() -> None:
    snap = _snap(claims=3)
    pods = [claim_pod(f"p{i}", f"m{i}") for i in range(3)]
    result = _run(snap, pods)
    assert len(result.binds) == 3
    assert len({_parent(snap, b) for b in result.binds}) == 1
