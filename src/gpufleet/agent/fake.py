"""A `GpuBackend` driven by YAML fixtures, with fault injection, for tests and `--fake` runs.

Fixtures ship in `gpufleet/agent/fixtures/` and are named by file stem (`h100-sxm-8`); any
other path to a YAML file of the same shape works too. A fixture holds `system`, a `board`
(the fields every GPU shares), `gpus` (per-GPU fields, which override the board's) and
`nvlink` (groups of GPU indices that reach each other over NVLink).

Carving is a dry run of what NVML does: the backend keeps its devices in memory, and
`create_mig_instance`/`destroy_mig_instance` change the MIG devices `devices()` reports, refusing
what NVML refuses (MIG mode off, a profile or placement the GPU does not offer, memory slices
already held, more instances of a profile than the GPU takes, a busy device).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections import deque
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from gpufleet.agent import devices as dev
from gpufleet.agent.backend import BackendError
from gpufleet.agent.config import yaml_problem
from gpufleet.model import ModelError, documents, read_text

FIXTURE_PACKAGE = "gpufleet.agent.fixtures"


def fixture_names() -> list[str]:
    """The fixtures shipped with gpufleet."""
    root = resources.files(FIXTURE_PACKAGE)
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def load_fixture(name_or_path: str) -> FakeBackend:
    """A fake backend for a shipped fixture name or a YAML file path."""
    if name_or_path in fixture_names():
        text = resources.files(FIXTURE_PACKAGE).joinpath(f"{name_or_path}.yaml").read_text()
    elif Path(name_or_path).suffix in (".yaml", ".yml"):
        text = read_text(Path(name_or_path))
    else:
        raise ModelError(f"fixture {name_or_path!r}",
                         f"no such fixture; shipped ones: {', '.join(fixture_names())} (or give a .yaml path)")
    try:
        data = documents.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelError(f"fixture {name_or_path}", f"is not valid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ModelError(f"fixture {name_or_path}", "expected a mapping with system, board and gpus")
    try:
        system, gpus = _parse(data)
    except KeyError as exc:
        raise ModelError(f"fixture {name_or_path}", f"malformed: missing key {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ModelError(f"fixture {name_or_path}", f"malformed: {exc}") from None
    return FakeBackend(system, gpus)


class FakeBackend:
    """Serves fixed devices and whatever health events a test injects."""

    def __init__(self, system: dev.SystemInfo, gpus: tuple[dev.DeviceInfo, ...]) -> None:
        self._system = system
        self._gpus = gpus
        self._lock = threading.Lock()
        """Guards `_gpus`, which carving replaces."""
        self._serial = itertools.count(1)
        self._events: deque[dev.HealthEvent] = deque()
        self._cond = threading.Condition()
        self.closed = False
        """Set by close(); tests check that the agent released its backend."""
        self.exclusive: dict[str, bool] = {}
        """Compute mode per GPU as the agent last set it (True: EXCLUSIVE_PROCESS)."""
        self.busy: set[str] = set()
        """MIG UUIDs a process runs on, as a test says: destroying them fails as NVML's does."""
        self.fail_compute_instance: str | None = None
        """When set, creating a compute instance fails with this message (the GPU instance is undone)."""

    def system(self) -> dev.SystemInfo:
        return self._system

    def devices(self) -> tuple[dev.DeviceInfo, ...]:
        with self._lock:
            return self._gpus

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> None:
        """Turn MIG mode on or off, as `nvidia-smi -mig` does with the GPU idle (tests)."""
        with self._lock:
            self._replace(self._gpu(gpu_uuid), mig_enabled=enabled)

    def create_mig_instance(self, gpu_uuid: str, profile_id: int, start: int, size: int) -> dev.CarvedInstance:
        where = f"GPU {gpu_uuid}: cannot create a GPU instance of profile {profile_id} at {start}:{size}"
        with self._lock:
            g = self._gpu(gpu_uuid)
            profile = self._check_carve(g, profile_id, start, size, where)
            gi = min(set(range(1, len(g.mig_devices) + 2)) - {m.gi for m in g.mig_devices})
            if self.fail_compute_instance is not None:  # the GPU instance is destroyed again: nothing changes
                raise BackendError(f"{where}: nvmlGpuInstanceCreateComputeInstance failed: "
                                   f"{self.fail_compute_instance}")
            uuid = f"MIG-fake-{g.index}-{gi}-{next(self._serial):04d}"
            mig = dev.MigDeviceInfo(uuid, gi, 0, profile.index, profile.slices, profile.multiprocessors, start)
            self._replace(g, mig_devices=(*g.mig_devices, mig))
        return dev.CarvedInstance(gpu_uuid, uuid, gi, 0, profile_id, start, size)

    def destroy_mig_instance(self, gpu_uuid: str, mig_uuid: str) -> bool:
        with self._lock:
            g = self._gpu(gpu_uuid)
            if all(m.uuid != mig_uuid for m in g.mig_devices):
                return False
            if mig_uuid in self.busy:
                raise BackendError(f"GPU {gpu_uuid}: cannot destroy MIG device {mig_uuid}: device busy "
                                   "(a process is running on it)")
            self._replace(g, mig_devices=tuple(m for m in g.mig_devices if m.uuid != mig_uuid))
        return True

    def wait_event(self, timeout_s: float) -> dev.HealthEvent | None:
        with self._cond:
            if not self._events:
                self._cond.wait(timeout_s)
            return self._events.popleft() if self._events else None

    def set_exclusive_process(self, gpu_uuid: str, exclusive: bool) -> None:
        if all(g.uuid != gpu_uuid for g in self._gpus):
            raise BackendError(f"nvmlDeviceGetHandleByUUID failed: no GPU {gpu_uuid}")
        self.exclusive[gpu_uuid] = exclusive

    def close(self) -> None:
        self.closed = True

    def _gpu(self, uuid: str) -> dev.DeviceInfo:
        found = next((g for g in self._gpus if g.uuid == uuid), None)
        if found is None:
            raise BackendError(f"nvmlDeviceGetHandleByUUID failed: no GPU {uuid}")
        return found

    def _replace(self, g: dev.DeviceInfo, **changes: Any) -> None:
        self._gpus = tuple(dataclasses.replace(d, **changes) if d is g else d for d in self._gpus)

    @staticmethod
    def _check_carve(g: dev.DeviceInfo, profile_id: int, start: int, size: int, where: str) -> dev.MigProfileInfo:
        """The profile, if NVML would carve it there now; else BackendError saying why not."""
        if not g.mig_enabled:
            raise BackendError(f"{where}: MIG mode is off")
        profile = next((p for p in g.mig_profiles if p.profile_id == profile_id), None)
        if profile is None:
            offered = sorted(p.profile_id for p in g.mig_profiles if p.profile_id is not None)
            raise BackendError(f"{where}: unknown profile (the GPU offers {offered})")
        if (start, size) not in profile.placements:
            raise BackendError(f"{where}: not a placement of this profile "
                               f"(allowed: {', '.join(f'{s}:{n}' for s, n in profile.placements)})")
        by_index = {p.index: p for p in g.mig_profiles}
        for m in g.mig_devices:
            held = _held_slices(m, by_index[m.profile_index])
            if held & set(range(start, start + size)):
                raise BackendError(f"{where}: placement taken (MIG device {m.uuid}, GPU instance {m.gi}, "
                                   f"holds memory slices {sorted(held)})")
        if sum(1 for m in g.mig_devices if m.profile_index == profile.index) >= profile.instances:
            raise BackendError(f"{where}: the GPU holds at most {profile.instances} instances of this profile")
        return profile

    def inject(self, event: dev.HealthEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def inject_xid(self, gpu_uuid: str, xid: int, gi: int = dev.WHOLE_GPU,
                   ci: int = dev.WHOLE_GPU) -> None:
        self.inject(dev.HealthEvent(dev.EventKind.XID, gpu_uuid, xid, gi, ci))

    def inject_double_bit_ecc(self, gpu_uuid: str) -> None:
        self.inject(dev.HealthEvent(dev.EventKind.DOUBLE_BIT_ECC, gpu_uuid))

    def inject_row_remap_failure(self, gpu_uuid: str) -> None:
        self.inject(dev.HealthEvent(dev.EventKind.ROW_REMAP_FAILURE, gpu_uuid))

    def inject_lost(self) -> None:
        self.inject(dev.HealthEvent(dev.EventKind.LOST, None))


def _held_slices(m: dev.MigDeviceInfo, p: dev.MigProfileInfo) -> set[int]:
    """The memory slices a MIG device holds; all of them when the fixture does not say where it sits."""
    size = next((n for s, n in p.placements if s == m.placement_start), None)
    if m.placement_start is None or size is None:
        return set(range(max((s + n for s, n in p.placements), default=8)))
    return set(range(m.placement_start, m.placement_start + size))


def _parse(data: Mapping[str, Any]) -> tuple[dev.SystemInfo, tuple[dev.DeviceInfo, ...]]:
    sysd = data["system"]
    system = dev.SystemInfo(str(sysd["driverVersion"]), int(sysd["cudaDriverVersion"]),
                                sysd.get("machine"))
    board: Mapping[str, Any] = data.get("board", {})
    specs = [{**board, **g} for g in data["gpus"]]
    uuids = [str(s["uuid"]) for s in specs]
    peers: dict[int, set[int]] = {i: set() for i in range(len(specs))}
    for group in data.get("nvlink", []):
        if any(i not in peers for i in group):
            raise ValueError(f"nvlink group {group} names a GPU index beyond the {len(specs)} GPUs")
        for i in group:
            peers[i].update(j for j in group if j != i)
    return system, tuple(_device(i, s, tuple(uuids[j] for j in sorted(peers[i])))
                         for i, s in enumerate(specs))


def _device(index: int, s: Mapping[str, Any], nvlink_peers: tuple[str, ...]) -> dev.DeviceInfo:
    profiles = tuple(dev.MigProfileInfo(
        int(p["index"]), int(p["slices"]), int(p["instances"]), int(p["multiprocessors"]),
        int(p["memMiB"]), int(p.get("copyEngines", 0)), int(p.get("decoders", 0)),
        int(p.get("encoders", 0)), int(p.get("jpegs", 0)), int(p.get("ofas", 0)),
        None if p.get("id") is None else int(p["id"]), _placements(p.get("placements")))
        for p in s.get("migProfiles", []))
    by_index = {p.index: p for p in profiles}
    migs = tuple(dev.MigDeviceInfo(
        str(m["uuid"]), int(m["gi"]), int(m["ci"]), int(m["profileIndex"]),
        int(m.get("ciSlices", by_index[int(m["profileIndex"])].slices)),
        int(m.get("multiprocessors", by_index[int(m["profileIndex"])].multiprocessors)),
        None if m.get("placementStart") is None else int(m["placementStart"]))
        for m in s.get("mig", []))
    major, minor = s["compute"]
    return dev.DeviceInfo(
        uuid=str(s["uuid"]), index=index, minor=int(s.get("minor", index)), name=str(s["name"]),
        mem_mib=int(s["memMiB"]), pci_bus_id=str(s["busId"]), pci_device_id=int(s["pciDeviceId"]),
        compute=(int(major), int(minor)), numa_node=s.get("numaNode"), pci_class=s.get("pciClass"),
        mig_capable=bool(s.get("migCapable", False)), mig_enabled=bool(s.get("migEnabled", False)),
        mig_profiles=profiles, mig_devices=migs, nvlink_peers=nvlink_peers)


def _placements(spec: Mapping[str, Any] | None) -> tuple[tuple[int, int], ...]:
    """`{size: 2, starts: [0, 2, 4]}`, as `nvidia-smi mig -lgipp` prints `{0,2,4}:2`."""
    if spec is None:
        return ()
    return tuple((int(start), int(spec["size"])) for start in spec["starts"])
