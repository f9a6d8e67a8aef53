"""The fixture-driven backend: shipped fixtures, bad fixtures, injected events, carving MIG devices."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.backend import BackendError
from gpufleet.model import ModelError


def test_the_shipped_fixtures_cover_the_boards_the_agent_is_tested_on() -> None:
    assert fake.fixture_names() == ["a100-mig", "h100-nvl-pairs", "h100-sxm-8", "h200-sxm-8"]


@pytest.mark.parametrize("fixture, count, name", [
    ("h100-sxm-8", 8, "NVIDIA H100 80GB HBM3"), ("h200-sxm-8", 8, "NVIDIA H200"),
    ("h100-nvl-pairs", 4, "NVIDIA H100 NVL"), ("a100-mig", 4, "NVIDIA A100-SXM4-40GB"),
], ids=["eight H100 SXM", "eight H200 SXM", "four H100 NVL cards", "four A100 40GB"])
def test_fixture_loads_its_gpus(fixture: str, count: int, name: str) -> None:
    gpus = fake.load_fixture(fixture).devices()
    assert len(gpus) == count and {g.name for g in gpus} == {name}
    assert [g.index for g in gpus] == list(range(count))


def test_unknown_fixture_names_the_shipped_ones() -> None:
    with pytest.raises(ModelError, match="shipped ones: a100-mig"):
        fake.load_fixture("b200")


@pytest.mark.parametrize("text, problem", [
    ("system: [", "is not valid YAML"),
    ("system: {driverVersion: '1.2'}\ngpus: []", "malformed"),
    ("system: {driverVersion: '1', cudaDriverVersion: 1}\nboard: {name: x, memMiB: 1, pciDeviceId: 1, "
     "compute: [9, 0]}\ngpus: [{uuid: GPU-1, busId: b}]\nnvlink: [[0, 1]]", "beyond the 1 GPUs"),
], ids=["broken YAML", "a missing field", "an NVLink group naming a missing GPU"])
def test_bad_fixture_file_is_a_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ModelError, match=problem):
        fake.load_fixture(str(path))


def test_injected_events_come_out_in_order_and_then_the_wait_times_out() -> None:
    backend = fake.load_fixture("h100-sxm-8")
    backend.inject_xid("GPU-a", 79)
    backend.inject_double_bit_ecc("GPU-b")
    backend.inject_row_remap_failure("GPU-c")
    backend.inject_lost()
    kinds = [backend.wait_event(0.01) for _ in range(4)]
    assert [(e.kind, e.gpu_uuid) for e in kinds if e] == [
        (dev.EventKind.XID, "GPU-a"), (dev.EventKind.DOUBLE_BIT_ECC, "GPU-b"),
        (dev.EventKind.ROW_REMAP_FAILURE, "GPU-c"), (dev.EventKind.LOST, None)]
    assert backend.wait_event(0.01) is None


def h100_in_mig_mode() -> tuple[fake.FakeBackend, str]:
    backend = fake.load_fixture("h100-sxm-8")
    gpu = backend.devices()[0].uuid
    backend.set_mig_mode(gpu, True)
    return backend, gpu


def test_carving_changes_the_devices_and_so_the_inventory_and_slices() -> None:
    backend, gpu = h100_in_mig_mode()
    big = backend.create_mig_instance(gpu, 9, 4, 4)  # 3g.40gb at 4-7
    small = backend.create_mig_instance(gpu, 19, 0, 1)  # 1g.10gb at 0
    assert (big.gi, small.gi, big.start, big.size) == (1, 2, 4, 4) and big.uuid != small.uuid
    inv = inventory.inventory(backend.system(), backend.devices())
    assert [(s.uuid, s.profile, s.placement_start) for s in inv.gpus[0].mig_slices] == [
        (big.uuid, "3g.40gb", 4), (small.uuid, "1g.10gb", 0)]
    assert [n for n in rs.device_targets(inv) if n.startswith("gpu-0")] == ["gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-0"]
    assert backend.destroy_mig_instance(gpu, big.uuid) is True
    assert [m.uuid for m in backend.devices()[0].mig_devices] == [small.uuid]
    assert backend.destroy_mig_instance(gpu, big.uuid) is False  # gone: nothing to do
    assert backend.create_mig_instance(gpu, 9, 4, 4).gi == 1  # NVML reuses GPU instance ids


@pytest.mark.parametrize("carved, profile_id, start, size, problem", [
    ((), 99, 0, 1, "unknown profile (the GPU offers [0, 5, 9, 14, 15, 19, 20])"),
    ((), 9, 2, 4, "not a placement of this profile (allowed: 0:4, 4:4)"),
    (((19, 5, 1),), 9, 4, 4, "placement taken (MIG device MIG-fake-0-1-0001, GPU instance 1, holds memory slices [5])"),
    (((20, 0, 1),), 20, 1, 1, "the GPU holds at most 1 instances of this profile"),
], ids=["an unknown profile", "a start the profile does not allow", "memory slices already held",
        "one instance too many of a profile"])
def test_a_carve_nvml_would_refuse_is_refused_and_changes_nothing(
        carved: tuple[tuple[int, int, int], ...], profile_id: int, start: int, size: int, problem: str) -> None:
    backend, gpu = h100_in_mig_mode()
    for pid, s, n in carved:
        backend.create_mig_instance(gpu, pid, s, n)
    before = backend.devices()
    with pytest.raises(BackendError, match=re.escape(f"cannot create a GPU instance of profile {profile_id} at "
                                                     f"{start}:{size}: {problem}")):
        backend.create_mig_instance(gpu, profile_id, start, size)
    assert backend.devices() == before


def test_carving_needs_mig_mode_and_destroying_refuses_a_busy_device() -> None:
    backend = fake.load_fixture("h100-sxm-8")
    gpu = backend.devices()[0].uuid
    with pytest.raises(BackendError, match="MIG mode is off"):
        backend.create_mig_instance(gpu, 19, 0, 1)
    backend.set_mig_mode(gpu, True)
    mig = backend.create_mig_instance(gpu, 19, 0, 1)
    backend.busy.add(mig.uuid)
    with pytest.raises(BackendError, match="device busy"):
        backend.destroy_mig_instance(gpu, mig.uuid)
    assert len(backend.devices()[0].mig_devices) == 1
    with pytest.raises(BackendError, match="no GPU GPU-x"):
        backend.create_mig_instance("GPU-x", 19, 0, 1)
