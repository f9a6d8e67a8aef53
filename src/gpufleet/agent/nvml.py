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

Carving (Dynamic MIG prepare): a GPU instance is created at an explicit placement
(`nvmlDeviceCreateGpuInstanceWithPlacement`), then one compute instance of the compute profile
with as many slices as the GPU instance; if anything after the GPU instance fails, what was
created is destroyed again, so a failed carve leaves the old layout. Destroying finds the MIG
device by UUID among the GPU's MIG devices, refuses while a process runs on it, and destroys
the compute instance, then the GPU instance. Written from NVML's API and checked against a stub
of the pynvml functions only; not yet run on a GPU (docs/hardware.md).
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
_CARVE_HINTS = {
    "NVMLError_InsufficientResources": " (placement taken: an instance holds some of these memory slices, "
                                       "or the GPU has no room left for this profile)",
    "NVMLError_InUse": " (device busy: a process is running on it)",
    "NVMLError_NoPermission": " (carving needs root: run the agent privileged)",
    "NVMLError_InvalidArgument": " (not a profile or placement this GPU offers)",
    "NVMLError_NotSupported": " (MIG mode is off, or the GPU or driver cannot do this)",
}
"""What an NVML error means when carving or destroying, appended to its message."""


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

    def create_mig_instance(self, gpu_uuid: str, profile_id: int, start: int, size: int) -> dev.CarvedInstance:
        nvml = self._nvml
        where = f"GPU {gpu_uuid}: cannot create a GPU instance of profile {profile_id} at {start}:{size}"
        h = self._carve_call(where, "nvmlDeviceGetHandleByUUID", gpu_uuid)
        if self._carve_call(where, "nvmlDeviceGetMigMode", h)[0] != nvml.NVML_DEVICE_MIG_ENABLE:
            raise BackendError(f"{where}: MIG mode is off")
        slices = self._gi_slices(h, profile_id)
        if slices is None:
            raise BackendError(f"{where}: unknown profile (the GPU does not offer it)")
        placement = nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        # pynvml hands `placement` to the C function unchanged, and nvml.h's parameter is a pointer: the struct
        # itself, passed by value, segfaulted the process on an H200 (docs/hardware.md, run 6).
        gi = self._carve_call(where, "nvmlDeviceCreateGpuInstanceWithPlacement", h, profile_id,
                              ctypes.byref(placement))
        ci = None
        try:
            ci = self._carve_call(where, "nvmlGpuInstanceCreateComputeInstance", gi, self._ci_profile(where, gi, slices))
            gi_id = int(self._carve_call(where, "nvmlGpuInstanceGetInfo", gi).id)
            ci_id = int(self._carve_call(where, "nvmlComputeInstanceGetInfo", ci).id)
            uuid = self._mig_uuid(where, h, gi_id, ci_id)
        except BackendError:
            self._undo(gpu_uuid, gi, ci)
            raise
        return dev.CarvedInstance(gpu_uuid, uuid, gi_id, ci_id, profile_id, start, size)

    def destroy_mig_instance(self, gpu_uuid: str, mig_uuid: str) -> bool:
        where = f"GPU {gpu_uuid}: cannot destroy MIG device {mig_uuid}"
        h = self._carve_call(where, "nvmlDeviceGetHandleByUUID", gpu_uuid)
        m = next((m for m in self._mig_handles(where, h) if str(self._carve_call(where, "nvmlDeviceGetUUID", m))
                  == mig_uuid), None)
        if m is None:
            return False
        running = self._optional("nvmlDeviceGetComputeRunningProcesses", m)
        if running:
            raise BackendError(f"{where}: device busy ({len(running)} processes running on it)")
        gi_id = int(self._carve_call(where, "nvmlDeviceGetGpuInstanceId", m))
        gi = self._carve_call(where, "nvmlDeviceGetGpuInstanceById", h, gi_id)
        ci = self._carve_call(where, "nvmlGpuInstanceGetComputeInstanceById", gi,
                              int(self._carve_call(where, "nvmlDeviceGetComputeInstanceId", m)))
        self._carve_call(where, "nvmlComputeInstanceDestroy", ci)
        self._carve_call(f"GPU {gpu_uuid}: destroyed the compute instance of MIG device {mig_uuid} but not its "
                         f"GPU instance {gi_id} (`nvidia-smi mig -dgi -gi {gi_id}` removes it)",
                         "nvmlGpuInstanceDestroy", gi)
        return True

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

    def _carve_call(self, where: str, name: str, *args: Any) -> Any:
        """A carving call: NVML's error as BackendError saying what it means there."""
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError as exc:
            raise BackendError(f"{where}: {name} failed: {exc}{_CARVE_HINTS.get(type(exc).__name__, '')}") from exc

    def _gi_slices(self, h: Any, profile_id: int) -> int | None:
        """Compute slices of the GPU-instance profile with NVML id `profile_id`; None if the GPU has none such."""
        for index in range(self._nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            p = self._optional("nvmlDeviceGetGpuInstanceProfileInfo", h, index)
            if p is not None and int(p.id) == profile_id:
                return int(p.sliceCount)
        return None

    def _ci_profile(self, where: str, gi: Any, slices: int) -> int:
        """NVML id of the compute-instance profile that spans the whole GPU instance (`slices` slices)."""
        nvml = self._nvml
        for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            p = self._optional("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index,
                               nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            if p is not None and int(p.sliceCount) == slices:
                return int(p.id)
        raise BackendError(f"{where}: the GPU instance offers no compute-instance profile of {slices} slices")

    def _mig_handles(self, where: str, h: Any) -> Iterator[Any]:
        for j in range(int(self._carve_call(where, "nvmlDeviceGetMaxMigDeviceCount", h))):
            m = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", h, j)
            if m is not None:  # else an empty slot
                yield m

    def _mig_uuid(self, where: str, h: Any, gi_id: int, ci_id: int) -> str:
        for m in self._mig_handles(where, h):
            if (int(self._carve_call(where, "nvmlDeviceGetGpuInstanceId", m)) == gi_id
                    and int(self._carve_call(where, "nvmlDeviceGetComputeInstanceId", m)) == ci_id):
                return str(self._carve_call(where, "nvmlDeviceGetUUID", m))
        raise BackendError(f"{where}: NVML lists no MIG device for GPU instance {gi_id}, compute instance {ci_id}")

    def _undo(self, gpu_uuid: str, gi: Any, ci: Any) -> None:
        """Destroy what a failed carve created, compute instance first; a failure here is logged, since
        the carve's own error is the one to report."""
        try:
            if ci is not None:
                self._nvml.nvmlComputeInstanceDestroy(ci)
            self._nvml.nvmlGpuInstanceDestroy(gi)
        except self._nvml.NVMLError as exc:
            log.error("GPU %s: a failed carve left a MIG instance behind (destroying it failed: %s); "
                      "`nvidia-smi mig -lgi` shows it", gpu_uuid, exc)

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
