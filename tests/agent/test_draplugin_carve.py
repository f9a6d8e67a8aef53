"""Dynamic MIG at prepare: the DRA plugin carves a partitionable placement through the fake backend,
hands out the new MIG device, destroys it at unprepare, refuses overlapping placements, leaves the
old layout when a carve fails, and after a restart still destroys exactly what it carved. Through
the kubelet-side peer (`drakubelet.py`) over real unix sockets, as test_draplugin.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.draplugin import DraPlugin, recorded_carvings
from gpufleet.agent.fake import FakeBackend
from gpufleet.agent.resourceslices import MigMode, SliceOptions

from .drakubelet import DraEndpoint, register
from .test_draplugin import NODE, Claims, claim, ref
from .test_draplugin import claims, dirs, kubelet  # noqa: F401 (the same fixtures: a claim store, socket dirs, the peer)

DYNAMIC = SliceOptions(mig=MigMode.DYNAMIC)
THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"
"""An H100's 3g.40gb (profile id 9) at memory slices 4-7."""


@pytest.fixture
def backend() -> FakeBackend:
    """Eight H100s, GPU 0 and GPU 2 in MIG mode with nothing carved, the others not in MIG mode."""
    b = fake.load_fixture("h100-sxm-8")
    for i in (0, 2):
        b.set_mig_mode(b.devices()[i].uuid, True)
    return b


def make_plugin(backend: FakeBackend, claims: Claims, dirs: dict[str, Path]) -> DraPlugin:
    """As the runtime builds it: discovery less what prepared.json says this agent carved."""
    carved = frozenset(c.uuid for c in recorded_carvings(dirs["plugins"], rs.DRIVER))
    inv = inventory.without_mig(inventory.inventory(backend.system(), backend.devices()), carved)
    return DraPlugin(rs.DRIVER, NODE, claims.read, rs.device_targets(inv, DYNAMIC), dirs["plugins"], dirs["registry"],
                     dirs["cdi"], dev_exists=lambda p: p == "/dev/nvidiactl", backend=backend)


@pytest.fixture
def plugin(backend: FakeBackend, claims: Claims, dirs: dict[str, Path]) -> Iterator[DraPlugin]:
    p = make_plugin(backend, claims, dirs)
    p.start()
    yield p
    p.stop()


def migs(backend: FakeBackend, gpu: int = 0) -> list[tuple[str, int, int | None]]:
    """GPU `gpu`'s MIG devices as (UUID, GI id, first memory slice)."""
    return [(m.uuid, m.gi, m.placement_start) for m in backend.devices()[gpu].mig_devices]


def test_a_placement_is_carved_at_prepare_and_handed_out_as_the_new_mig_device(
        backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims, dirs: dict[str, Path]) -> None:
    c = claims.add(claim("mig", THREE_G_AT_4))
    answer = kubelet.prepare(ref(c)).claims["uid-mig"]
    assert answer.error == ""
    assert [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [
        (THREE_G_AT_4, [f"k8s.gpu.gpufleet.io/claim=uid-mig-{THREE_G_AT_4}"])]
    ((uuid, gi, start),) = migs(backend)
    assert start == 4 and uuid.startswith("MIG-")
    gpu0 = backend.devices()[0].uuid
    spec = json.loads((dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-mig.json").read_text())
    assert spec["devices"] == [{"name": f"uid-mig-{THREE_G_AT_4}",
                                "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]
    assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={uuid}"]
    (recorded,) = json.loads(plugin.checkpoint_path.read_text())["claims"]["uid-mig"]["devices"]
    assert recorded["carved"] == {"gpu_uuid": gpu0, "uuid": uuid, "gi": gi, "ci": 0, "profile_id": 9,
                                  "start": 4, "size": 4}
    # discovery now sees the instance, named as the placement was
    carved = inventory.inventory(backend.system(), backend.devices())
    assert [n for n in rs.device_targets(carved, SliceOptions()) if n.startswith("gpu-0")] == [THREE_G_AT_4]
    # the kubelet retries: the same answer, nothing carved twice
    assert kubelet.prepare(ref(c)).claims["uid-mig"].devices == answer.devices and len(migs(backend)) == 1


def test_unprepare_destroys_what_prepare_carved_and_is_idempotent(
        backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims, dirs: dict[str, Path]) -> None:
    c = claims.add(claim("mig", THREE_G_AT_4, "gpu-2-mig-1g10gb-19-0"))
    assert kubelet.prepare(ref(c)).claims["uid-mig"].error == ""
    assert len(migs(backend, 0)) == len(migs(backend, 2)) == 1
    for _ in range(2):
        assert kubelet.unprepare(ref(c)).claims["uid-mig"].error == ""
    assert migs(backend, 0) == migs(backend, 2) == [] and plugin.prepared == {} and not list(dirs["cdi"].iterdir())


@pytest.mark.parametrize("first, second, overlapped", [
    ((THREE_G_AT_4,), ("gpu-0-mig-1g10gb-19-5",), THREE_G_AT_4),
    ((THREE_G_AT_4,), ("gpu-0",), THREE_G_AT_4),
    (("gpu-0",), ("gpu-0-mig-1g10gb-19-0",), "gpu-0"),
    ((), ("gpu-0-mig-4g40gb-5-0", "gpu-0-mig-2g20gb-14-2"), "gpu-0-mig-4g40gb-5-0"),
], ids=["a placement inside a prepared one", "the whole GPU while a placement is prepared",
        "a placement while the whole GPU is prepared", "two overlapping placements in one claim"])
def test_a_placement_that_overlaps_one_prepared_is_refused_and_nothing_is_carved(
        backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims,
        first: tuple[str, ...], second: tuple[str, ...], overlapped: str) -> None:
    if first:
        assert kubelet.prepare(ref(claims.add(claim("first", *first)))).claims["uid-first"].error == ""
    before = migs(backend)
    answer = kubelet.prepare(ref(claims.add(claim("second", *second)))).claims["uid-second"]
    whose = "prepared for ResourceClaim team/first" if first else "earlier in this claim"
    assert f"overlaps {overlapped!r} ({whose})" in answer.error and "refusing to hand out its memory slices twice" \
        in answer.error
    assert answer.error.startswith("ResourceClaim team/second: status.allocation.devices.results[")
    assert migs(backend) == before and "uid-second" not in plugin.prepared


def test_placements_apart_are_carved_side_by_side(backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint,
                                                  claims: Claims) -> None:
    for name, device in (("low", "gpu-0-mig-3g40gb-9-0"), ("high", THREE_G_AT_4)):
        assert kubelet.prepare(ref(claims.add(claim(name, device)))).claims[f"uid-{name}"].error == ""
    assert sorted(start for _, _, start in migs(backend)) == [0, 4]


@pytest.mark.parametrize("setup, devices, message", [
    (lambda b: None, (THREE_G_AT_4, "gpu-1-mig-1g10gb-19-0"),
     "device 'gpu-1-mig-1g10gb-19-0': cannot carve its 1g.10gb MIG instance: GPU GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d02: "
     "cannot create a GPU instance of profile 19 at 0:1: MIG mode is off"),
    (lambda b: b.create_mig_instance(b.devices()[0].uuid, 19, 6, 1), (THREE_G_AT_4,),
     "cannot carve its 3g.40gb MIG instance: GPU GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01: cannot create a GPU instance "
     "of profile 9 at 4:4: placement taken (MIG device MIG-fake-0-1-0001, GPU instance 1, holds memory slices [6])"),
    (lambda b: setattr(b, "fail_compute_instance", "Insufficient Resources"), (THREE_G_AT_4,),
     "nvmlGpuInstanceCreateComputeInstance failed: Insufficient Resources"),
], ids=["a GPU not in MIG mode, after one carve of the claim succeeded", "a placement carved by hand since",
        "a compute instance that cannot be created"])
def test_a_failed_carve_refuses_the_claim_naming_it_and_leaves_the_old_layout(
        backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims, dirs: dict[str, Path],
        setup: Callable[[FakeBackend], object], devices: tuple[str, ...], message: str) -> None:
    setup(backend)
    before = [d.mig_devices for d in backend.devices()]
    answer = kubelet.prepare(ref(claims.add(claim("x", *devices)))).claims["uid-x"]
    assert answer.error.startswith("ResourceClaim team/x: device ") and message in answer.error
    assert not answer.devices and plugin.prepared == {}
    assert [d.mig_devices for d in backend.devices()] == before
    assert not (dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-x.json").exists()


def test_a_busy_device_is_not_destroyed_and_the_claim_stays_for_the_kubelets_retry(
        backend: FakeBackend, plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims, dirs: dict[str, Path]) -> None:
    c = claims.add(claim("mig", THREE_G_AT_4))
    kubelet.prepare(ref(c))
    ((uuid, _, _),) = migs(backend)
    backend.busy.add(uuid)
    assert "device busy (a process is running on it)" in kubelet.unprepare(ref(c)).claims["uid-mig"].error
    assert migs(backend) != [] and "uid-mig" in plugin.prepared
    assert "uid-mig" in json.loads(plugin.checkpoint_path.read_text())["claims"]
    assert (dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-mig.json").exists()
    backend.busy.clear()
    assert kubelet.unprepare(ref(c)).claims["uid-mig"].error == "" and migs(backend) == []


def restart(plugin: DraPlugin, backend: FakeBackend, claims: Claims, dirs: dict[str, Path]) -> DraPlugin:
    """Stop the agent and start a new one on the same GPUs, which keep what was carved."""
    plugin.stop()
    again = make_plugin(backend, claims, dirs)
    again.start()
    return again


def test_after_a_restart_the_pool_stays_partitionable_and_unprepare_destroys_what_was_carved(
        backend: FakeBackend, claims: Claims, dirs: dict[str, Path]) -> None:
    first = make_plugin(backend, claims, dirs)
    published = dict(first._targets)
    first.start()
    mig = claims.add(claim("mig", THREE_G_AT_4))
    kubelet = register(first.registration_path)
    assert kubelet.prepare(ref(mig)).claims["uid-mig"].error == ""
    kubelet.close()
    ((uuid, _, _),) = migs(backend)

    plugin = restart(first, backend, claims, dirs)
    try:
        assert dict(plugin._targets) == published  # the carved instance is the claim's, not a free device
        kubelet = register(plugin.registration_path)
        refused = kubelet.prepare(ref(claims.add(claim("late", "gpu-0-mig-1g10gb-19-4")))).claims["uid-late"]
        assert f"overlaps {THREE_G_AT_4!r} (prepared for ResourceClaim team/mig)" in refused.error
        assert kubelet.unprepare(ref(mig)).claims["uid-mig"].error == ""
        assert migs(backend) == [] and uuid not in json.dumps(json.loads(plugin.checkpoint_path.read_text()))
        kubelet.close()
    finally:
        plugin.stop()


def test_unprepare_never_destroys_an_instance_it_did_not_carve(backend: FakeBackend, plugin: DraPlugin,
                                                               kubelet: DraEndpoint, claims: Claims) -> None:
    """The recorded instance went (a reboot, or by hand) and another took its GPU instance id and
    placement: unpreparing looks for the recorded MIG UUID only, and leaves the other alone."""
    c = claims.add(claim("mig", THREE_G_AT_4))
    kubelet.prepare(ref(c))
    ((uuid, gi, _),) = migs(backend)
    gpu0 = backend.devices()[0].uuid
    assert backend.destroy_mig_instance(gpu0, uuid)
    other = backend.create_mig_instance(gpu0, 9, 4, 4)
    assert (other.gi, other.start) == (gi, 4) and other.uuid != uuid
    assert kubelet.unprepare(ref(c)).claims["uid-mig"].error == ""
    assert migs(backend) == [(other.uuid, gi, 4)]


def test_a_plugin_without_a_backend_refuses_a_placement_and_still_prepares_whole_gpus(
        claims: Claims, dirs: dict[str, Path], backend: FakeBackend) -> None:
    inv = inventory.inventory(backend.system(), backend.devices())
    plugin = DraPlugin(rs.DRIVER, NODE, claims.read, rs.device_targets(inv, DYNAMIC), dirs["plugins"],
                       dirs["registry"], dirs["cdi"], dev_exists=lambda p: False)
    plugin.start()
    try:
        kubelet = register(plugin.registration_path)
        error = kubelet.prepare(ref(claims.add(claim("mig", THREE_G_AT_4)))).claims["uid-mig"].error
        assert error == (f"ResourceClaim team/mig: device {THREE_G_AT_4!r}: cannot carve its 3g.40gb MIG instance: "
                         "this agent has no GPU backend to carve with")
        assert kubelet.prepare(ref(claims.add(claim("whole", "gpu-1")))).claims["uid-whole"].error == ""
        kubelet.close()
    finally:
        plugin.stop()


def test_the_checkpoint_of_an_older_agent_without_carvings_still_loads(claims: Claims, dirs: dict[str, Path],
                                                                        backend: FakeBackend) -> None:
    plugin = make_plugin(backend, claims, dirs)
    plugin.data_dir.mkdir(parents=True)
    plugin.checkpoint_path.write_text(json.dumps({"claims": {"u": {"namespace": "team", "name": "old", "devices": [
        {"requests": ["gpus"], "pool": NODE, "device": "gpu-1", "cdi_ids": ["k8s.gpu.gpufleet.io/claim=u-gpu-1"]}]}}}))
    plugin.start()
    try:
        assert plugin.prepared["u"].devices[0].carved is None and recorded_carvings(dirs["plugins"], rs.DRIVER) == ()
    finally:
        plugin.stop()

