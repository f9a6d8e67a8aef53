"""Carving and destroying MIG devices in the NVML backend, against a stand-in for the pynvml
module functions.

The stand-in is written from the published NVML API (nvml.h and nvidia-ml-py's wrappers:
`nvmlDeviceCreateGpuInstanceWithPlacement` takes the profile *id* and a placement struct,
`nvmlGpuInstanceCreateComputeInstance` a compute-profile id, a GPU instance cannot be destroyed
while it has compute instances, a taken placement is NVML_ERROR_INSUFFICIENT_RESOURCES), with
pynvml's real exception classes, constants and placement struct. It checks the order of the
calls and the cleanup of a failed carve; it is not a hardware test: nothing here has run on a
GPU (docs/hardware.md lists what to check when one is lent).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent.backend import BackendError
from gpufleet.agent.nvml import NvmlBackend

GI_PROFILES = {0: (19, 1), 2: (9, 3), 4: (0, 7)}
"""GPU-instance profile index -> (profile id, slices), as an A100 or H100 answers."""
CI_PROFILES = {0: (0, 1), 2: (2, 3), 4: (4, 7), 7: (7, 1)}
"""Compute-instance profile index -> (profile id, slices); index 7 is 1_SLICE_REV1."""


def err(code: int) -> Exception:
    return pynvml.NVMLError(code)  # type: ignore[no-any-return]


class CarveNvml:
    """One GPU, `GPU-0`, in MIG mode. GPU instances are `gi<id>`, compute instances `ci<gi>.<ci>`,
    MIG devices `mig<gi>`; `calls` records every call that changes the layout, in order."""

    NVMLError = pynvml.NVMLError
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t

    def __init__(self) -> None:
        self.mig_mode = pynvml.NVML_DEVICE_MIG_ENABLE
        self.gis: dict[int, tuple[int, int, int]] = {}
        """GPU instance id -> (profile id, start, size)."""
        self.cis: dict[int, int] = {}
        """GPU instance id -> its one compute instance's id."""
        self.uuids: dict[int, str] = {}
        self.running: dict[str, list[Any]] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, int] = {}
        """Call name -> NVML error code it raises."""
        self.serial = 0

    def _maybe_fail(self, name: str) -> None:
        if name in self.fail:
            raise err(self.fail[name])

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-0":
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return "gpu0"

    def nvmlDeviceGetMigMode(self, h: str) -> list[int]:
        return [self.mig_mode, self.mig_mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: str, index: int) -> SimpleNamespace:
        if index not in GI_PROFILES:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, slices = GI_PROFILES[index]
        return SimpleNamespace(id=pid, sliceCount=slices)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: str, profile_id: int, placement: Any) -> str:
        # nvml.h: `const nvmlGpuInstancePlacement_t *placement`, and pynvml passes the argument through as it is.
        # The struct by value crashed the process on a real H200 (docs/hardware.md, run 6).
        assert type(placement).__name__ == "CArgObject", f"a pointer (ctypes.byref) is needed, got {placement!r}"
        placement = placement._obj
        assert isinstance(placement, pynvml.c_nvmlGpuInstancePlacement_t)
        self.calls.append(("create gi", profile_id, placement.start, placement.size))
        self._maybe_fail("nvmlDeviceCreateGpuInstanceWithPlacement")
        start, size = placement.start, placement.size
        if any(s < start + size and start < s + n for _, s, n in self.gis.values()):
            raise err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = min(set(range(1, len(self.gis) + 2)) - set(self.gis))
        self.gis[gi] = (profile_id, start, size)
        return f"gi{gi}"

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi: str, index: int, engine: int) -> SimpleNamespace:
        assert engine == pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        if index not in CI_PROFILES:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, slices = CI_PROFILES[index]
        return SimpleNamespace(id=pid, sliceCount=slices)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: str, profile_id: int) -> str:
        self.calls.append(("create ci", gi, profile_id))
        self._maybe_fail("nvmlGpuInstanceCreateComputeInstance")
        gi_id = int(gi[2:])
        self.cis[gi_id] = 0
        self.serial += 1
        self.uuids[gi_id] = f"MIG-{gi_id}-{self.serial}"
        return f"ci{gi_id}.0"

    def nvmlGpuInstanceGetInfo(self, gi: str) -> SimpleNamespace:
        return SimpleNamespace(id=int(gi[2:]))

    def nvmlComputeInstanceGetInfo(self, ci: str) -> SimpleNamespace:
        return SimpleNamespace(id=int(ci.split(".")[1]))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: str, j: int) -> str:
        self._maybe_fail("nvmlDeviceGetMigDeviceHandleByIndex")
        migs = sorted(self.cis)
        if j >= len(migs):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return f"mig{migs[j]}"

    def nvmlDeviceGetUUID(self, m: str) -> str:
        return self.uuids[int(m[3:])]

    def nvmlDeviceGetGpuInstanceId(self, m: str) -> int:
        return int(m[3:])

    def nvmlDeviceGetComputeInstanceId(self, m: str) -> int:
        return self.cis[int(m[3:])]

    def nvmlDeviceGetComputeRunningProcesses(self, m: str) -> list[Any]:
        return self.running.get(self.nvmlDeviceGetUUID(m), [])

    def nvmlDeviceGetGpuInstanceById(self, h: str, gi: int) -> str:
        if gi not in self.gis:
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return f"gi{gi}"

    def nvmlGpuInstanceGetComputeInstanceById(self, gi: str, ci: int) -> str:
        return f"ci{gi[2:]}.{ci}"

    def nvmlComputeInstanceDestroy(self, ci: str) -> int:
        self.calls.append(("destroy ci", ci))
        self._maybe_fail("nvmlComputeInstanceDestroy")
        del self.cis[int(ci[2:].split(".")[0])]
        return pynvml.NVML_SUCCESS  # type: ignore[no-any-return]

    def nvmlGpuInstanceDestroy(self, gi: str) -> int:
        self.calls.append(("destroy gi", gi))
        self._maybe_fail("nvmlGpuInstanceDestroy")
        if int(gi[2:]) in self.cis:
            raise err(pynvml.NVML_ERROR_IN_USE)  # compute instances first
        del self.gis[int(gi[2:])]
        return pynvml.NVML_SUCCESS  # type: ignore[no-any-return]


@pytest.fixture
def nvml() -> CarveNvml:
    return CarveNvml()


def test_a_carve_creates_the_gpu_instance_at_its_placement_then_one_compute_instance_spanning_it(
        nvml: CarveNvml) -> None:
    carved = NvmlBackend(nvml).create_mig_instance("GPU-0", 9, 4, 4)
    assert nvml.calls == [("create gi", 9, 4, 4), ("create ci", "gi1", 2)]  # 3 slices: compute profile id 2
    assert carved == dev.CarvedInstance("GPU-0", "MIG-1-1", 1, 0, 9, 4, 4)


def test_a_one_slice_instance_gets_the_plain_one_slice_compute_profile_not_rev1(nvml: CarveNvml) -> None:
    NvmlBackend(nvml).create_mig_instance("GPU-0", 19, 6, 1)
    assert nvml.calls[-1] == ("create ci", "gi1", 0)


@pytest.mark.parametrize("failing, undone, hint", [
    ("nvmlGpuInstanceCreateComputeInstance", [("destroy gi", "gi2")], "(placement taken"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", [("destroy ci", "ci2.0"), ("destroy gi", "gi2")],
     "NVML lists no MIG device for GPU instance 2, compute instance 0"),
], ids=["the compute instance cannot be created", "the new MIG device cannot be found"])
def test_a_carve_that_fails_after_the_gpu_instance_destroys_what_it_created(
        nvml: CarveNvml, failing: str, undone: list[tuple[str, str]], hint: str) -> None:
    backend = NvmlBackend(nvml)
    kept = backend.create_mig_instance("GPU-0", 19, 0, 1)
    nvml.calls.clear()
    nvml.fail[failing] = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    with pytest.raises(BackendError, match=r"GPU GPU-0: cannot create a GPU instance of profile 9 at 4:4: ") as caught:
        backend.create_mig_instance("GPU-0", 9, 4, 4)
    assert hint in str(caught.value)
    assert nvml.calls[0] == ("create gi", 9, 4, 4) and nvml.calls[-len(undone):] == undone
    assert nvml.gis == {1: (19, 0, 1)} and nvml.uuids[kept.gi] == kept.uuid  # the old layout, untouched


@pytest.mark.parametrize("setup, asked, message", [
    (lambda n: setattr(n, "mig_mode", pynvml.NVML_DEVICE_MIG_DISABLE), (9, 4, 4), "MIG mode is off"),
    (lambda n: None, (77, 0, 1), "unknown profile (the GPU does not offer it)"),
    (lambda n: n.gis.update({5: (19, 5, 1)}), (9, 4, 4),
     "(placement taken: an instance holds some of these memory slices"),
    (lambda n: n.fail.update({"nvmlDeviceCreateGpuInstanceWithPlacement": pynvml.NVML_ERROR_NO_PERMISSION}),
     (9, 4, 4), "Insufficient Permissions (carving needs root: run the agent privileged)"),
    (lambda n: None, ("GPU-9",), "nvmlDeviceGetHandleByUUID failed: Not Found"),
], ids=["MIG mode off", "an unknown profile", "a placement taken", "no permission (a BackendError, not unavailable)",
        "an unknown GPU"])
def test_a_refused_carve_is_a_backend_error_saying_why_and_leaves_no_instance(
        nvml: CarveNvml, setup: Any, asked: tuple[Any, ...], message: str) -> None:
    setup(nvml)
    before = dict(nvml.gis)
    args = ("GPU-0", *asked) if len(asked) == 3 else (asked[0], 9, 4, 4)
    with pytest.raises(BackendError) as caught:
        NvmlBackend(nvml).create_mig_instance(*args)
    assert type(caught.value) is BackendError and message in str(caught.value)
    assert nvml.gis == before and not [c for c in nvml.calls if c[0] != "create gi"]


def test_destroying_finds_the_mig_device_by_uuid_and_destroys_its_compute_then_its_gpu_instance(
        nvml: CarveNvml) -> None:
    backend = NvmlBackend(nvml)
    first, second = backend.create_mig_instance("GPU-0", 19, 0, 1), backend.create_mig_instance("GPU-0", 9, 4, 4)
    nvml.calls.clear()
    assert backend.destroy_mig_instance("GPU-0", second.uuid) is True
    assert nvml.calls == [("destroy ci", "ci2.0"), ("destroy gi", "gi2")]
    assert set(nvml.gis) == {first.gi}
    nvml.calls.clear()
    assert backend.destroy_mig_instance("GPU-0", second.uuid) is False  # gone: nothing touched
    assert backend.destroy_mig_instance("GPU-0", "MIG-elsewhere") is False and nvml.calls == []


def test_a_busy_mig_device_is_not_destroyed(nvml: CarveNvml) -> None:
    backend = NvmlBackend(nvml)
    mig = backend.create_mig_instance("GPU-0", 19, 0, 1)
    nvml.running[mig.uuid] = [SimpleNamespace(pid=4242)]
    nvml.calls.clear()
    with pytest.raises(BackendError, match=r"cannot destroy MIG device MIG-1-1: device busy \(1 processes running"):
        backend.destroy_mig_instance("GPU-0", mig.uuid)
    assert nvml.calls == [] and set(nvml.gis) == {1}


def test_a_gpu_instance_left_after_its_compute_instance_went_is_named_with_the_command_to_remove_it(
        nvml: CarveNvml) -> None:
    backend = NvmlBackend(nvml)
    mig = backend.create_mig_instance("GPU-0", 19, 0, 1)
    nvml.fail["nvmlGpuInstanceDestroy"] = pynvml.NVML_ERROR_IN_USE
    with pytest.raises(BackendError, match=r"but not its GPU instance 1 \(`nvidia-smi mig -dgi -gi 1` removes it\)"):
        backend.destroy_mig_instance("GPU-0", mig.uuid)
