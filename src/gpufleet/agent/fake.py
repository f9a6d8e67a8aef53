"""A `GpuBackend` driven by YAML fixtures, with fault injection, for tests and `--fake` runs.

Fixtures ship in `gpufleet/agent/fixtures/` and are named by file stem (`h100-sxm-8`); any
other path to a YAML file of the same shape works too. A fixture holds `system`, a `board`
(the fields every GPU shares), `gpus` (per-GPU fields, which override the board's) and
`nvlink` (groups of GPU indices that reach each other over NVLink).
"""

from __future__ import annotations

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
        self._events: deque[dev.HealthEvent] = deque()
        self._cond = threading.Condition()
        self.closed = False
        """Set by close(); tests check that the agent released its backend."""
        self.exclusive: dict[str, bool] = {}
        """Compute mode per GPU as the agent last set it (True: EXCLUSIVE_PROCESS)."""

    def system(self) -> dev.SystemInfo:
        return self._system

    def devices(self) -> tuple[dev.DeviceInfo, ...]:
        return self._gpus

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
