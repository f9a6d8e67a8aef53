"""Where the dashboard's `Fleet` comes from: a dump, a simulated replay, or the live scheduler.

A `Source` has frames: one for a dump, one per `frame_s` of simulated time for a replay, and
for the live scheduler one that changes; `version()` tells the server when to push again.
"""

from __future__ import annotations

import random
import threading
import time
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol

from gpufleet.core.cycle import schedule
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.registry import BuildContext
from gpufleet.kube import translate
from gpufleet.kube.binder import scheduled_condition
from gpufleet.kube.scheduler import SchedulerService
from gpufleet.kube.snapshot_io import Dump
from gpufleet.model import ClusterSnapshot, PodUid, Queue
from gpufleet.model.queue import DEFAULT_QUEUE, QUEUE_LABEL
from gpufleet.sim.replay import Moment
from gpufleet.sim.workload import Job
from gpufleet.web.fleet import (Fleet, FleetEvent, PodRef, Waiting, out_of_service, queue_rows, request_text,
                                waiting_of)
from gpufleet.web.view import MAX_EVENTS

TRACE_EVENTS = {"preempted": "Preempted", "failed": "Fault", "scaled-down": "ScaledDown"}
"""A replay's trace entries shown as events: a job preempted, stopped by a device or node fault,
or on a node the autoscaler removed."""


class Source(Protocol):
    def frames(self) -> int: ...

    def times(self) -> list[float]: ...

    def fleet(self, frame: int) -> Fleet: ...

    def version(self) -> int:
        """Changes whenever `fleet(frames() - 1)` would."""
        ...


class StaticSource:
    """Fleets fixed in advance: a dump's one, or a replay's frames."""

    def __init__(self, fleets: list[Fleet]) -> None:
        if not fleets:
            raise ValueError("a dashboard needs at least one frame")
        self._fleets = fleets

    def frames(self) -> int:
        return len(self._fleets)

    def times(self) -> list[float]:
        return [f.time for f in self._fleets]

    def fleet(self, frame: int) -> Fleet:
        return self._fleets[frame]

    def version(self) -> int:
        return 0


def from_dump(dump: Dump, settings: ProfileSettings, source: str, now: float, seed: int = 0) -> Fleet:
    """A dump, with the reasons its pending pods wait as one cycle of `settings` gives them now
    (`gpufleet snapshot replay` runs the same cycle)."""
    snap = ClusterSnapshot.build(dump.nodes, dump.running, dump.pod_groups)
    reasons: Mapping[PodUid, str] = {}
    if dump.pending and snap.cluster.n_nodes:
        profile = build_profile(settings, BuildContext(typical_tasks(dump.pending)))
        result = schedule(snap, dump.pending, profile, now=now, rng=random.Random(seed))
        reasons = {uid: s.message or "no reason given" for uid, s in result.unschedulable.items()}
    waiting = waiting_of(dump.pending, reasons) + tuple(
        Waiting(key, key.partition("/")[0], "default", "-", "InvalidRequest", error)
        for key, error in dump.invalid.items())
    return Fleet(source, now, dump.nodes, dump.running, MappingProxyType({}), waiting,
                 queue_rows(dump.queues, snap, dump.pending), ())


class ReplayRecorder:
    """An observer for `sim.replay.replay`: one `Fleet` per moment it is handed."""

    def __init__(self, name: str, queues: tuple[Queue, ...] = ()) -> None:
        self.name = name
        self.queues = queues
        self.fleets: list[Fleet] = []
        self._events: list[FleetEvent] = []

    def __call__(self, m: Moment) -> None:
        for t, what, job in m.trace:
            if what in TRACE_EVENTS:
                self._events.append(FleetEvent(t, TRACE_EVENTS[what], _job_name(m.jobs[job])))
        del self._events[:-MAX_EVENTS]
        pods = {p.uid: PodRef(p.key, p.namespace, p.queue) for job in m.jobs for p in job.pods
                if p.uid in m.snapshot.placements}
        down, sick = out_of_service(m.snapshot)
        self.fleets.append(Fleet(f"replay: {self.name}", m.time_s, tuple(m.snapshot.cluster.nodes),
                                 tuple(m.snapshot.placements.values()), MappingProxyType(pods),
                                 waiting_of(m.waiting, m.reasons), queue_rows(self.queues, m.snapshot, m.waiting),
                                 tuple(self._events), down, sick, simulated=True))


def _job_name(job: Job) -> str:
    return f"{job.group.namespace}/{job.group.name}" if job.group else job.pods[0].key


class LiveSource:
    """The live scheduler's cache, rebuilt at most every `min_interval_s` and only when it changed.

    Why a pod waits is read from its `PodScheduled` condition (what the leader wrote), so a
    standby replica shows the same reasons as the leader and the page agrees with `kubectl`.
    """

    def __init__(self, service: SchedulerService, *, min_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.service = service
        self.min_interval_s = min_interval_s
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._fleet: Fleet | None = None
        self._built_at = -1e18
        self._seen: tuple[int, int] = (-1, -1)
        self._version = 0

    def frames(self) -> int:
        return 1

    def times(self) -> list[float]:
        return [self.fleet(0).time]

    def version(self) -> int:
        self.fleet(0)
        return self._version

    def fleet(self, frame: int) -> Fleet:
        with self._lock:
            now = self._clock()
            seen = (self.service.cache.version, self.service.events.recorded)
            if self._fleet is None or (seen != self._seen and now - self._built_at >= self.min_interval_s):
                self._seen = seen
                self._fleet = self._build()
                self._built_at = now
                self._version += 1
            return self._fleet

    def _build(self) -> Fleet:
        s = self.service
        snap = s.faults.apply(s.cache.snapshot())
        pods: dict[PodUid, PodRef] = {}
        for obj in s.cache.bound_objects():
            m = translate.meta(obj)
            ns = str(m.get("namespace") or "default")
            queue = str((m.get("labels") or {}).get(QUEUE_LABEL, DEFAULT_QUEUE))
            pods[PodUid(str(m.get("uid")))] = PodRef(f"{ns}/{m.get('name')}", ns, queue)
        waiting = []
        specs = []
        for p in s.cache.pending():
            m = translate.meta(p.obj)
            ns = str(m.get("namespace") or "default")
            reason, message = _condition(p.obj)
            if p.gated:
                reason, message = "SchedulingGated", message
            elif p.spec is None:
                reason, message = "InvalidRequest", p.error
            if p.spec is not None:
                specs.append(p.spec)
            waiting.append(Waiting(p.key, ns, p.spec.queue if p.spec else "default",
                                   request_text(p.spec.gpu) if p.spec else "-", reason or "Waiting", message))
        not_ready, sick = out_of_service(snap)
        events = tuple(FleetEvent(t, reason, subject, note) for t, reason, subject, note in s.events.recent())
        return Fleet(f"live: {s.settings.identity}", self._wall(), tuple(snap.cluster.nodes),
                     tuple(snap.placements.values()), MappingProxyType(pods), tuple(waiting),
                     queue_rows(s.cache.queues(), snap, specs), events, not_ready, sick)


def _condition(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The reason and message of a pod's `PodScheduled=False` condition, if it has one."""
    c = scheduled_condition(obj)
    if c is None or c.get("status") != "False":
        return "", ""
    return str(c.get("reason") or ""), str(c.get("message") or "")
