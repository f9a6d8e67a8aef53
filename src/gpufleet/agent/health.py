"""Device health: which devices are faulty, why, and when a recoverable one comes back.

Three pieces, so that the decisions are testable without threads or sleeping:

* `HealthTracker` - pure given the times it is passed: records events (resolving MIG events
  to the MIG device by GPU- and compute-instance id) and expires recoverable faults after
  the quiet period. Time comes from an injectable clock, so tests advance it virtually.
* `HealthBoard` - the current unhealthy set, shared with every plugin's ListAndWatch
  stream; a change wakes the streams at once.
* `HealthMonitor` - the thread that feeds backend events into the tracker and the board.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from gpufleet.agent import xids
from gpufleet.agent.backend import BackendError, GpuBackend
from gpufleet.agent.config import HealthSettings
from gpufleet.agent.devices import WHOLE_GPU, EventKind, HealthEvent
from gpufleet.agent.inventory import NodeGpuInventory

log = logging.getLogger(__name__)
Clock = Callable[[], float]
_SEVERITY = {xids.FaultClass.RECOVERABLE: 1, xids.FaultClass.RESET: 2, xids.FaultClass.NODE: 3}


@dataclass(frozen=True, slots=True)
class Fault:
    device: str
    """GPU or MIG UUID."""
    fault_class: xids.FaultClass
    reason: str
    """Short and label-safe: `xid-79`, `double-bit-ecc`, `row-remap-failure`, `lost`."""
    last_s: float
    """Clock time of the latest fault event on this device."""


class HealthTracker:
    def __init__(self, settings: HealthSettings, inv: NodeGpuInventory) -> None:
        self._settings = settings
        self._inv = inv
        self._faults: dict[str, Fault] = {}

    @property
    def faults(self) -> Mapping[str, Fault]:
        return MappingProxyType(dict(self._faults))

    def set_inventory(self, inv: NodeGpuInventory) -> None:
        """The node's GPUs after a MIG layout change (new MIG devices to attribute events to)."""
        self._inv = inv

    def reconfigure(self, settings: HealthSettings) -> None:
        """New XID sets and quiet period apply to later events (one attribute swap, thread-safe)."""
        self._settings = settings

    def record(self, event: HealthEvent, now: float) -> bool:
        """Apply one event; True if the set of unhealthy devices changed."""
        if not self._settings.enabled:
            return False
        cls = xids.classify(event.kind, event.xid, self._settings.ignored_xids, self._settings.recoverable_xids)
        if cls is xids.FaultClass.APPLICATION:
            return False
        reason = f"xid-{event.xid}" if event.kind is EventKind.XID else event.kind.value
        before = set(self._faults)
        for device in self._devices(event):
            old = self._faults.get(device)
            if old and _SEVERITY[old.fault_class] > _SEVERITY[cls]:
                self._faults[device] = Fault(device, old.fault_class, old.reason, now)
            else:
                self._faults[device] = Fault(device, cls, reason, now)
        return set(self._faults) != before

    def expire(self, now: float) -> bool:
        """Drop recoverable faults quiet for the quiet period; True if any came back."""
        quiet = [d for d, f in self._faults.items() if f.fault_class is xids.FaultClass.RECOVERABLE
                 and now - f.last_s >= self._settings.quiet_period_s]
        for device in quiet:
            log.info("device %s is healthy again after %.0f s without faults", device, self._settings.quiet_period_s)
            del self._faults[device]
        return bool(quiet)

    def _devices(self, event: HealthEvent) -> list[str]:
        if event.kind is EventKind.LOST:
            return [g.uuid for g in self._inv.gpus]
        gpu = self._inv.gpu(event.gpu_uuid or "")
        if gpu is None:
            return []  # not one of ours (NVIDIA's plugin ignores unknown UUIDs too)
        if event.gi != WHOLE_GPU and gpu.mig_slices:
            hit = [s.uuid for s in gpu.mig_slices if s.gi == event.gi and event.ci in (WHOLE_GPU, s.ci)]
            if hit:
                return hit
        return [gpu.uuid]


class HealthBoard:
    """The latest faults, versioned; ListAndWatch streams wait on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._faults: Mapping[str, Fault] = MappingProxyType({})
        self._held: Mapping[str, str] = MappingProxyType({})
        self.version = 0

    def publish(self, faults: Mapping[str, Fault]) -> None:
        with self._cond:
            self._faults = faults
            self.version += 1
            self._cond.notify_all()

    def faults(self) -> Mapping[str, Fault]:
        with self._cond:
            return self._faults

    def unhealthy(self) -> frozenset[str]:
        return frozenset(self.faults())

    def hold(self, resource: str, reason: str) -> None:
        """Advertise every device of `resource` unhealthy, e.g. while its MPS daemon is down."""
        with self._cond:  # an RLock: _set_held takes it again
            self._set_held({**self._held, resource: reason})

    def release(self, resource: str) -> None:
        with self._cond:
            self._set_held({k: v for k, v in self._held.items() if k != resource})

    def held(self) -> Mapping[str, str]:
        """Held resources and why."""
        with self._cond:
            return self._held

    def _set_held(self, held: dict[str, str]) -> None:
        with self._cond:
            if held != self._held:
                self._held = MappingProxyType(held)
                self.version += 1
                self._cond.notify_all()

    def wait_change(self, seen: int, timeout_s: float) -> int:
        """Block until the version differs from `seen` or the timeout passes; the current version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen, timeout_s)
            return self.version


class HealthMonitor:
    """Feeds backend events into the tracker and publishes changes; one daemon thread."""

    def __init__(self, backend: GpuBackend, tracker: HealthTracker, board: HealthBoard, clock: Clock,
                 poll_s: float = 1.0, on_event: Callable[[HealthEvent], None] = lambda e: None) -> None:
        self._backend, self._tracker, self._board, self._clock = backend, tracker, board, clock
        self._poll_s = poll_s
        self._on_event = on_event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufleet-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._backend.wait_event(self._poll_s)
            except BackendError as exc:  # e.g. the event set cannot be created: retry, do not die
                log.error("cannot watch GPU health: %s", exc)
                self._stop.wait(self._poll_s)
                continue
            now = self._clock()
            changed = False
            if event is not None:
                log.warning("GPU health event: %s", event)
                self._on_event(event)
                changed = self._tracker.record(event, now)
            changed = self._tracker.expire(now) or changed
            if changed:
                self._board.publish(self._tracker.faults)
