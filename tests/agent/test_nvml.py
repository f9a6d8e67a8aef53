"""The NVML backend against a stub of the pynvml module written from the API facts.

This checks the calls, the translation of NVML's types and errors, and the fallbacks; it
is not a hardware test (see docs/hardware.md). The stub uses pynvml's real exception
classes and constants, and any object as a handle, as pynvml allows.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent import inventory
from gpufleet.agent.backend import BackendError, BackendUnavailableError
from gpufleet.agent.nvml import NvmlBackend

GIB = 2**30


def err(code: int) -> Exception:
    return pynvml.NVMLError(code)  # type: ignore[no-any-return]


def gi_profile(pid: int, slices: int, count: int, sms: int, mem_mib: int) -> SimpleNamespace:
    return SimpleNamespace(id=pid, sliceCount=slices, instanceCount=count, multiprocessorCount=sms,
                           memorySizeMB=mem_mib, copyEngineCount=slices, decoderCount=1, encoderCount=0,
                           jpegCount=0, ofaCount=0)


class StubNvml:
    """Two A100 40GB: GPU 0 in MIG mode (3g.20gb + 1g.5gb), GPU 1 not; NVLink between them."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeDoubleBitEccError = pynvml.nvmlEventTypeDoubleBitEccError
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    PLACEMENTS = {19: [(i, 1) for i in range(7)], 9: [(0, 4), (4, 4)], 0: [(0, 8)]}
    """By profile id, as an A100 40GB answers `nvmlDeviceGetGpuInstancePossiblePlacements_v2`."""

    def __init__(self, init_error: int | None = None) -> None:
        self.init_error = init_error
        self.gpus = ["gpu0", "gpu1"]
        self.migs = {"mig-a": ("gpu0", 1, 0, 3, 19968), "mig-b": ("gpu0", 5, 0, 1, 4864)}
        self.events: deque[Any] = deque()
        self.registered: list[tuple[str, int]] = []
        self.remap_failure: set[str] = set()
        self.shut = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise err(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.161.08"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return f"MIG-{h}" if h in self.migs else f"GPU-{h}"

    def nvmlDeviceGetName(self, h: str) -> str:
        return "NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetMinorNumber(self, h: str) -> int:
        return self.gpus.index(h)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> SimpleNamespace:
        return SimpleNamespace(total=40 * GIB)

    def nvmlDeviceGetPciInfo(self, h: str) -> SimpleNamespace:
        bus = {"gpu0": b"00000000:07:00.0", "gpu1": b"00000000:3B:00.0"}[h]
        return SimpleNamespace(busId=bus, pciDeviceId=0x20B010DE)

    def nvmlDeviceGetCudaComputeCapability(self, h: str) -> tuple[int, int]:
        return (8, 0)

    def nvmlDeviceGetNumaNodeId(self, h: str) -> int:
        if h == "gpu1":
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)  # an older driver: sysfs fallback
        return 0

    def nvmlDeviceGetMigMode(self, h: str) -> list[int]:
        return [1, 1] if h == "gpu0" else [0, 0]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: str, index: int) -> SimpleNamespace:
        table = {0: gi_profile(19, 1, 7, 14, 4864), 2: gi_profile(9, 3, 2, 42, 19968), 4: gi_profile(0, 7, 1, 98, 40192)}
        if index not in table:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return table[index]

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h: str, profile_id: int, found: Any, count_ref: Any) -> int:
        """As NVML's _v2: NULL placements asks for the count; else fills at most `count` entries."""
        table = self.PLACEMENTS[profile_id]
        count = count_ref._obj
        if found is None:
            count.value = len(table)
            return pynvml.NVML_SUCCESS  # type: ignore[no-any-return]
        if count.value < len(table):
            raise err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for slot, (start, size) in zip(found, table):
            slot.start, slot.size = start, size
        count.value = len(table)
        return pynvml.NVML_SUCCESS  # type: ignore[no-any-return]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: str, j: int) -> str:
        mine = [m for m, v in self.migs.items() if v[0] == h]
        if j >= len(mine):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return mine[j]

    def nvmlDeviceGetAttributes(self, m: str) -> SimpleNamespace:
        _, _, _, slices, mem = self.migs[m]
        return SimpleNamespace(gpuInstanceSliceCount=slices, computeInstanceSliceCount=slices,
                               multiprocessorCount=14 * slices, memorySizeMB=mem)

    def nvmlDeviceGetGpuInstanceId(self, m: str) -> int:
        return self.migs[m][1]

    def nvmlDeviceGetComputeInstanceId(self, m: str) -> int:
        return self.migs[m][2]

    def nvmlDeviceGetGpuInstanceById(self, h: str, gi: int) -> str:
        if gi == 5:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)  # falls back to matching slices and memory
        return f"gi{gi}"

    def nvmlGpuInstanceGetInfo(self, instance: str) -> SimpleNamespace:
        return SimpleNamespace(profileId=9, placement=SimpleNamespace(start=4, size=4))

    def nvmlDeviceGetP2PStatus(self, a: str, b: str, index: int) -> int:
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        return pynvml.NVML_P2P_STATUS_OK

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlEventSetFree(self, es: str) -> None:
        pass

    def nvmlDeviceGetSupportedEventTypes(self, h: str) -> int:
        return 0xF

    def nvmlDeviceRegisterEvents(self, h: str, mask: int, es: str) -> None:
        self.registered.append((h, mask))

    def nvmlEventSetWait(self, es: str, ms: int) -> Any:
        if not self.events:
            raise err(pynvml.NVML_ERROR_TIMEOUT)
        event = self.events.popleft()
        if isinstance(event, Exception):
            raise event
        return event

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        return (0, 1, 0, 1 if h in self.remap_failure else 0)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    pci = tmp_path / "bus/pci/devices/0000:3b:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("1\n")
    (pci / "class").write_text("0x030200\n")
    (tmp_path / "class/dmi/id").mkdir(parents=True)
    (tmp_path / "class/dmi/id/product_name").write_text("DGXA100\n")
    return tmp_path


def test_discovery_reads_identity_memory_topology_and_mig(sysfs: Path) -> None:
    backend = NvmlBackend(StubNvml(), sysfs)
    system = backend.system()
    gpus = backend.devices()
    assert system == dev.SystemInfo("535.161.08", 12020, "DGXA100")
    assert [(g.uuid, g.pci_bus_id, g.mem_mib, g.numa_node) for g in gpus] == [
        ("GPU-gpu0", "00000000:07:00.0", 40960, 0), ("GPU-gpu1", "00000000:3B:00.0", 40960, 1)]
    assert gpus[1].pci_class == 0x030200 and gpus[0].pci_class is None
    assert gpus[0].nvlink_peers == ("GPU-gpu1",) and gpus[1].nvlink_peers == ("GPU-gpu0",)
    assert gpus[0].mig_enabled and not gpus[1].mig_enabled and gpus[1].mig_capable
    assert [(m.uuid, m.gi, m.profile_index) for m in gpus[0].mig_devices] == [("MIG-mig-a", 1, 2), ("MIG-mig-b", 5, 0)]


def test_discovery_reads_profile_ids_and_placements(sysfs: Path) -> None:
    gpus = NvmlBackend(StubNvml(), sysfs).devices()
    profiles = {p.profile_id: p.placements for p in gpus[1].mig_profiles}
    assert profiles == {19: tuple((i, 1) for i in range(7)), 9: ((0, 4), (4, 4)), 0: ((0, 8),)}
    # mig-a's GPU instance answers with its placement; mig-b's refuses (no permission): unknown, not 0
    assert [m.placement_start for m in gpus[0].mig_devices] == [4, None]


def test_nvml_facts_become_the_same_inventory_as_fixtures_give(sysfs: Path) -> None:
    backend = NvmlBackend(StubNvml(), sysfs)
    inv = inventory.inventory(backend.system(), backend.devices())
    assert [s.profile for s in inv.gpus[0].mig_slices] == ["3g.20gb", "1g.5gb"]
    assert dict(inv.gpus[0].mig_profiles) == {"1g.5gb": 7, "3g.20gb": 2, "7g.40gb": 1}
    assert {g.nvlink_domain for g in inv.gpus} == {"nvl0"}


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED],
                         ids=["no libnvidia-ml", "no driver loaded"])
def test_no_driver_is_a_clear_unavailable_error(code: int) -> None:
    with pytest.raises(BackendUnavailableError, match="no NVIDIA driver on this machine"):
        NvmlBackend(StubNvml(init_error=code))


def test_other_nvml_failures_name_the_call(sysfs: Path) -> None:
    stub = StubNvml()
    stub.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(err(pynvml.NVML_ERROR_UNKNOWN))  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="nvmlDeviceGetCount failed"):
        NvmlBackend(stub, sysfs).devices()


def test_events_are_registered_for_critical_xids_and_double_bit_ecc(sysfs: Path) -> None:
    stub = StubNvml()
    backend = NvmlBackend(stub, sysfs)
    assert backend.wait_event(0.01) is None
    assert stub.registered == [("gpu0", 0xA), ("gpu1", 0xA)]


def test_events_translate_to_health_events(sysfs: Path) -> None:
    stub = StubNvml()
    stub.events.extend([
        SimpleNamespace(device="gpu0", eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=48,
                        gpuInstanceId=5, computeInstanceId=0),
        SimpleNamespace(device="gpu1", eventType=pynvml.nvmlEventTypeDoubleBitEccError, eventData=0,
                        gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF),
        err(pynvml.NVML_ERROR_GPU_IS_LOST),
    ])
    backend = NvmlBackend(stub, sysfs)
    assert backend.wait_event(0.01) == dev.HealthEvent(dev.EventKind.XID, "GPU-gpu0", 48, 5, 0)
    assert backend.wait_event(0.01) == dev.HealthEvent(dev.EventKind.DOUBLE_BIT_ECC, "GPU-gpu1")
    assert backend.wait_event(0.01) == dev.HealthEvent(dev.EventKind.LOST, None)


def test_a_row_remapping_failure_is_reported_once(sysfs: Path) -> None:
    stub = StubNvml()
    stub.remap_failure.add("gpu1")
    backend = NvmlBackend(stub, sysfs, remap_poll_s=0.0)
    assert backend.wait_event(0.01) == dev.HealthEvent(dev.EventKind.ROW_REMAP_FAILURE, "GPU-gpu1")
    assert backend.wait_event(0.01) is None


def test_close_shuts_nvml_down_once(sysfs: Path) -> None:
    stub = StubNvml()
    backend = NvmlBackend(stub, sysfs)
    backend.close()
    backend.close()
    assert stub.shut
