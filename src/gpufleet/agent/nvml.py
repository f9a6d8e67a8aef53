"""The NVML `GpuBackend` (nvidia-ml-py, imported as `pynvml` only when this backend is built).

A thin shell: it only asks NVML for facts (interfaces.md section 3) and returns them as
`devices.DeviceInfo`; naming and grouping happen in the pure `inventory` module. Every
`NVMLError` is translated here (see `backend`): no library or no driver becomes
`BackendUnavailableError` with a one-line explanation, anything else `BackendError`
naming the call. Optional facts an older driver or a GPU does not support (NUMA node, MIG,
NVLink, row remapping) are left out instead of failing discovery.

Health: one event set registered for XidCritical and DoubleBitEcc on every GPU that
supports them (as NVIDIA's plugin does, single-bit ECC is not acted on), plus a poll of
the row-remapping failure flag every `remap_poll_s`, which NVML reports by query, not event.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterator

from gpufleet.agent import devices as dev
from gpufleet.agent.backend import BackendError, BackendUnavailableError

log = logging.getLogger(__name__)
_MIB = 2**20
_UNAVAILABLE = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_NoPermission")


def _import_pynvml() -> Any:
    try:
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information
    except ImportError:
        raise BackendUnavailableError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    return pynvml


class NvmlBackend:
    def __init__(self, nvml: Any = None, sysfs: Path = Path("/sys"), remap_poll_s: float = 30.0) -> None:
        self._nvml = nvml if nvml is not None else _import_pynvml()
        self._sysfs = sysfs
        self._remap_poll_s = remap_poll_s
        self._next_remap_poll = 0.0
        self._remap_failed: set[str] = set()
        self._pending: deque[dev.HealthEvent] = deque()
        self._event_set: Any = None
        self._closed = False
        with self._errors("nvmlInit"):
            self._nvml.nvmlInit()

    def system(self) -> dev.SystemInfo:
        with self._errors("nvmlSystemGetDriverVersion"):
            driver = str(self._nvml.nvmlSystemGetDriverVersion())
            cuda = int(self._nvml.nvmlSystemGetCudaDriverVersion())
        return dev.SystemInfo(driver, cuda, self._read_sys("class/dmi/id/product_name"))

    def devices(self) -> tuple[dev.DeviceInfo, ...]:
        with self._errors("nvmlDeviceGetCount"):
            handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())]
        uuids = [self._call("nvmlDeviceGetUUID", h) for h in handles]
        peers = self._nvlink_peers(handles, uuids)
        return tuple(self._device(i, h, uuids[i], peers[i]) for i, h in enumerate(handles))

    def wait_event(self, timeout_s: float) -> dev.HealthEvent | None:
        if self._event_set is None:
            self._register_events()
        if time.monotonic() >= self._next_remap_poll:
            self._next_remap_poll = time.monotonic() + self._remap_poll_s
            self._poll_row_remapping()
        if self._pending:
            return self._pending.popleft()
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait(self._event_set, int(timeout_s * 1000))
            uuid = str(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError_Timeout:
            return None
        except nvml.NVMLError as exc:
            log.error("NVML event wait failed, marking every GPU unhealthy: %s", exc)
            return dev.HealthEvent(dev.EventKind.LOST, None)
        if data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return dev.HealthEvent(dev.EventKind.XID, uuid, int(data.eventData), int(data.gpuInstanceId),
                                   int(data.computeInstanceId))
        if data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            return dev.HealthEvent(dev.EventKind.DOUBLE_BIT_ECC, uuid)
        return None

    def set_exclusive_process(self, gpu_uuid: str, exclusive: bool) -> None:
        nvml = self._nvml
        mode = nvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS if exclusive else nvml.NVML_COMPUTEMODE_DEFAULT
        handle = self._call("nvmlDeviceGetHandleByUUID", gpu_uuid)
        self._call("nvmlDeviceSetComputeMode", handle, mode)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(self._nvml.NVMLError):
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
            self._nvml.nvmlShutdown()

    @contextlib.contextmanager
    def _errors(self, call: str) -> Iterator[None]:
        """Translate NVML's exceptions into the backend's, in one place."""
        try:
            yield
        except self._nvml.NVMLError as exc:
            if type(exc).__name__ in _UNAVAILABLE:
                raise BackendUnavailableError(
                    f"NVML is not usable here ({exc}): no NVIDIA driver on this machine, or the agent cannot "
                    "reach it; try `--fake FIXTURE` to run without a GPU") from None
            raise BackendError(f"{call} failed: {exc}") from exc

    def _call(self, name: str, *args: Any) -> Any:
        with self._errors(name):
            return getattr(self._nvml, name)(*args)

    def _optional(self, name: str, *args: Any) -> Any:
        """A query some GPUs or drivers do not support: None instead of an error."""
        try:
            return getattr(self._nvml, name)(*args)
        except (self._nvml.NVMLError, AttributeError):
            return None

    def _device(self, index: int, h: Any, uuid: str, peers: tuple[str, ...]) -> dev.DeviceInfo:
        pci = self._call("nvmlDeviceGetPciInfo", h)
        bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", h)
        mig_mode = self._optional("nvmlDeviceGetMigMode", h)
        mig_enabled = bool(mig_mode) and mig_mode[0] == self._nvml.NVML_DEVICE_MIG_ENABLE
        found = self._mig_profiles(h) if mig_mode is not None else ()
        profiles = tuple(info for _, info in found)
        profile_ids = {profile_id: info.index for profile_id, info in found}
        return dev.DeviceInfo(
            uuid=uuid, index=index, minor=int(self._call("nvmlDeviceGetMinorNumber", h)),
            name=str(self._call("nvmlDeviceGetName", h)),
            mem_mib=int(self._call("nvmlDeviceGetMemoryInfo", h).total) // _MIB,
            pci_bus_id=bus_id, pci_device_id=int(pci.pciDeviceId), compute=(int(major), int(minor)),
            numa_node=self._numa_node(h, bus_id), pci_class=self._pci_class(bus_id),
            mig_capable=mig_mode is not None, mig_enabled=mig_enabled, mig_profiles=profiles,
            mig_devices=self._mig_devices(h, profiles, profile_ids) if mig_enabled else (), nvlink_peers=peers)

    def _mig_profiles(self, h: Any) -> tuple[tuple[int, dev.MigProfileInfo], ...]:
        """(NVML profile id, profile) for each GPU-instance profile the GPU supports."""
        found = []
        for index in range(self._nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            p = self._optional("nvmlDeviceGetGpuInstanceProfileInfo", h, index)
            if p is not None and p.instanceCount > 0:
                found.append((int(p.id), dev.MigProfileInfo(
                    index, int(p.sliceCount), int(p.instanceCount), int(p.multiprocessorCount), int(p.memorySizeMB),
                    int(p.copyEngineCount), int(p.decoderCount), int(p.encoderCount), int(p.jpegCount),
                    int(p.ofaCount), int(p.id), self._placements(h, int(p.id)))))
        return tuple(found)

    def _placements(self, h: Any, profile_id: int) -> tuple[tuple[int, int], ...]:
        """(start, size) of each placement NVML allows for the profile; () where the driver has no answer."""
        count = ctypes.c_uint(0)
        if self._optional("nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, None,
                          ctypes.byref(count)) is None or count.value == 0:
            return ()
        found = (self._nvml.c_nvmlGpuInstancePlacement_t * count.value)()
        if self._optional("nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, found,
                          ctypes.byref(count)) is None:
            return ()
        return tuple((int(p.start), int(p.size)) for p in found[:count.value])

    def _mig_devices(self, h: Any, profiles: tuple[dev.MigProfileInfo, ...],
                     profile_ids: dict[int, int]) -> tuple[dev.MigDeviceInfo, ...]:
        migs = []
        for j in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", h))):
            m = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
            if m is None:
                continue  # an empty slot
            attrs = self._call("nvmlDeviceGetAttributes", m)
            gi = int(self._call("nvmlDeviceGetGpuInstanceId", m))
            migs.append(dev.MigDeviceInfo(
                str(self._call("nvmlDeviceGetUUID", m)), gi, int(self._call("nvmlDeviceGetComputeInstanceId", m)),
                self._profile_index(h, gi, attrs, profiles, profile_ids), int(attrs.computeInstanceSliceCount),
                int(attrs.multiprocessorCount), self._placement_start(h, gi)))
        return tuple(migs)

    def _placement_start(self, h: Any, gi: int) -> int | None:
        instance = self._optional("nvmlDeviceGetGpuInstanceById", h, gi)
        info = self._optional("nvmlGpuInstanceGetInfo", instance) if instance is not None else None
        return int(info.placement.start) if info is not None else None

    def _profile_index(self, h: Any, gi: int, attrs: Any, profiles: tuple[dev.MigProfileInfo, ...],
                       profile_ids: dict[int, int]) -> int:
        """The GPU instance's profile; by its id where NVML allows, else by slices and memory."""
        instance = self._optional("nvmlDeviceGetGpuInstanceById", h, gi)
        info = self._optional("nvmlGpuInstanceGetInfo", instance) if instance is not None else None
        if info is not None and int(info.profileId) in profile_ids:
            return profile_ids[int(info.profileId)]
        same = [p for p in profiles if p.slices == attrs.gpuInstanceSliceCount and p.mem_mib == attrs.memorySizeMB]
        if not same:
            raise BackendError(f"MIG instance {gi}: no GPU-instance profile has {attrs.gpuInstanceSliceCount} "
                               f"slices and {attrs.memorySizeMB} MiB")
        return min(same, key=lambda p: p.index).index

    def _nvlink_peers(self, handles: list[Any], uuids: list[str]) -> list[tuple[str, ...]]:
        """Pairs with NVLink P2P status OK; covers direct links and NVSwitch alike."""
        peers: list[list[str]] = [[] for _ in handles]
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                status = self._optional("nvmlDeviceGetP2PStatus", handles[a], handles[b],
                                        self._nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if status == self._nvml.NVML_P2P_STATUS_OK:
                    peers[a].append(uuids[b])
                    peers[b].append(uuids[a])
        return [tuple(p) for p in peers]

    def _numa_node(self, h: Any, bus_id: str) -> int | None:
        node = self._optional("nvmlDeviceGetNumaNodeId", h)
        if node is None:
            text = self._read_sys(f"bus/pci/devices/{_sysfs_pci_id(bus_id)}/numa_node")
            node = int(text) if text and text.lstrip("-").isdigit() else None
        return int(node) if node is not None and int(node) >= 0 else None

    def _pci_class(self, bus_id: str) -> int | None:
        text = self._read_sys(f"bus/pci/devices/{_sysfs_pci_id(bus_id)}/class")
        try:
            return int(text, 16) if text else None
        except ValueError:
            return None

    def _read_sys(self, relative: str) -> str | None:
        try:
            return (self._sysfs / relative).read_text().strip() or None
        except OSError:
            return None

    def _register_events(self) -> None:
        nvml = self._nvml
        with self._errors("nvmlEventSetCreate"):
            self._event_set = nvml.nvmlEventSetCreate()
        wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        for i in range(self._call("nvmlDeviceGetCount")):
            h = self._call("nvmlDeviceGetHandleByIndex", i)
            supported = self._optional("nvmlDeviceGetSupportedEventTypes", h) or 0
            try:
                nvml.nvmlDeviceRegisterEvents(h, wanted & supported, self._event_set)
            except nvml.NVMLError as exc:
                log.warning("GPU %d: health events not available (%s); it is not checked", i, exc)

    def _poll_row_remapping(self) -> None:
        for i in range(self._call("nvmlDeviceGetCount")):
            h = self._call("nvmlDeviceGetHandleByIndex", i)
            rows = self._optional("nvmlDeviceGetRemappedRows", h)
            uuid = str(self._call("nvmlDeviceGetUUID", h))
            if rows is not None and rows[3] and uuid not in self._remap_failed:
                self._remap_failed.add(uuid)
                self._pending.append(dev.HealthEvent(dev.EventKind.ROW_REMAP_FAILURE, uuid))


def _sysfs_pci_id(bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` as sysfs names it: `0000:3b:00.0` (NVIDIA's fallback rule)."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"
