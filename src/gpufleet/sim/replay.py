"""Time-driven replay: jobs arrive, wait, run for their duration and leave, or are preempted.

After every batch of simultaneous events the simulator runs one scheduling cycle over all
waiting pods and carries out its result: evictions first (a preempted job loses the work
since it started and waits again, keeping its place by age), then binds and nominated
placements. A gang's job starts when its group is bound (the core binds a group all or
nothing, at least minMember pods; an elastic gang runs with the members that fit and drops
the rest; losing an extra member does not stop it). Device failures and node changes are
event kinds the loop accepts as hooks for later work.

With queues (the workload's, or a profile whose `queueing` section is not the default) the
driver also tells the core what it remembers across cycles: usage decayed with the
profile's half-life, each job's attained GPU-seconds (las) and past evictions.

Conservation holds at every moment: arrived = waiting + running + finished.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.core.queued import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import Profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, PodSpec, PodUid, QueueTree
from gpufleet.sim.environment import Environment, Kind
from gpufleet.sim.queue_kpis import QueueMeter, QueueSample
from gpufleet.sim.workload import Job, Workload


@dataclass(slots=True)
class JobRecord:
    job: int
    arrival_s: float
    start_s: float | None = None
    """Start of the latest run (the one that finished, for a finished job)."""
    end_s: float | None = None
    preempted: int = 0


@dataclass(slots=True)
class ReplayResult:
    records: list[JobRecord]
    trace: list[tuple[float, str, int]]
    """(time, event, job index) for every arrival, start, preemption and finish, in order."""
    utilisation: list[tuple[float, float]]
    """(time, allocated GPU fraction) after each cycle."""
    gpus: int
    gpu_seconds: float
    longest_s: float
    unscheduled_reasons: dict[int, str] = field(default_factory=dict)
    preemptions: int = 0
    """Pods evicted to make room for others."""
    gpu_seconds_lost: float = 0.0
    """GPU-seconds of work thrown away by preemption (a preempted job restarts from zero)."""
    queue_samples: list[QueueSample] = field(default_factory=list)
    """Queue shares over time (empty without queues)."""
    jain_fairness: float = float("nan")
    priority_inversions: int = 0

    def summary(self) -> dict[str, float]:
        done = [r for r in self.records if r.end_s is not None and r.start_s is not None]
        jct = np.array([r.end_s - r.arrival_s for r in done if r.end_s is not None])
        wait = np.array([r.start_s - r.arrival_s for r in self.records if r.start_s is not None])
        first = min((r.arrival_s for r in self.records), default=0.0)
        last = max((r.end_s for r in done if r.end_s is not None), default=first)
        makespan = last - first
        bound = max(self.gpu_seconds / self.gpus if self.gpus else 0.0, self.longest_s)
        times = np.array([t for t, _ in self.utilisation])
        util = np.array([u for _, u in self.utilisation])
        mean_util = _time_mean(times, util, times[0] if len(times) else 0.0, times[-1] if len(times) else 0.0)
        span = float(times[-1] - times[0]) if len(times) > 1 else 0.0
        wasted = self.gpu_seconds_lost / (self.gpus * span) if self.gpus and span > 0 else 0.0
        last_arrival = max((r.arrival_s for r in self.records), default=first)

        def pct(a: np.ndarray, q: float) -> float:
            return float(np.percentile(a, q)) if len(a) else float("nan")
        return {"jobs": float(len(self.records)), "finished": float(len(done)),
                "waiting_at_end": float(sum(1 for r in self.records if r.start_s is None)),
                "jct_mean_s": float(jct.mean()) if len(jct) else float("nan"),
                "jct_p50_s": pct(jct, 50), "jct_p99_s": pct(jct, 99),
                "wait_mean_s": float(wait.mean()) if len(wait) else float("nan"),
                "wait_p99_s": pct(wait, 99), "wait_max_s": float(wait.max()) if len(wait) else float("nan"),
                "makespan_s": makespan, "makespan_lower_bound_s": bound,
                "makespan_over_bound": makespan / bound if bound else float("nan"),
                "gpu_allocation": mean_util,
                "gpu_utilisation": mean_util - wasted,
                "gpu_utilisation_while_arriving": _time_mean(times, util, first, last_arrival),
                "jain_fairness": self.jain_fairness,
                "priority_inversions": float(self.priority_inversions),
                "preemptions": float(self.preemptions),
                "gpu_hours_lost": self.gpu_seconds_lost / 3600}


def _time_mean(times: np.ndarray, values: np.ndarray, start: float, end: float) -> float:
    """Time-weighted mean of a step function (value holds until the next sample) over [start, end]."""
    if len(times) < 2 or end <= start:
        return float(values[-1]) if len(values) else 0.0
    edges = np.clip(np.append(times, end), start, end)
    return float(np.sum(values * np.diff(edges)) / (end - start))


def replay(workload: Workload, profile: Profile, seed: int = 0, *, until_s: float | None = None,
           sample_s: float = 600.0) -> ReplayResult:
    """Replay `workload` (jobs need `duration_s`; None means it never finishes)."""
    return _Replay(workload, profile, seed, sample_s).run(until_s)


class _Replay:
    def __init__(self, workload: Workload, profile: Profile, seed: int, sample_s: float) -> None:
        self.jobs = workload.jobs
        self.profile = profile
        self.cfg = profile.queueing
        self.tree = QueueTree.build(workload.queues)
        self.queued = bool(workload.queues) or self.cfg != QueueingConfig()
        self.env = Environment()
        self.snap = ClusterSnapshot.build(workload.nodes, pod_groups=[j.group for j in self.jobs if j.group]).owned()
        self.records = [JobRecord(i, j.arrival_s) for i, j in enumerate(self.jobs)]
        self.waiting: dict[int, Job] = {}
        self.pod_job: dict[PodUid, int] = {}
        self.running: dict[int, list[PodUid]] = {}
        self.ends: dict[int, float] = {}
        self.trace: list[tuple[float, str, int]] = []
        self.utilisation: list[tuple[float, float]] = []
        self.rng = random.Random(seed)
        self.capacity = self.snap.gpu_capacity_milli() or 1
        self.reasons: dict[int, str] = {}
        self.attained: dict[int, float] = {}
        self.evicted_at: dict[PodUid, tuple[float, ...]] = {}
        self.decayed: dict[str, float] = {}
        self.last_t = 0.0
        self.preemptions = 0
        self.lost = 0.0
        self.meter = QueueMeter(self.tree, sample_s) if self.queued else None

    def run(self, until_s: float | None) -> ReplayResult:
        for i, job in enumerate(self.jobs):
            self.env.schedule(job.arrival_s, Kind.ARRIVAL, i)
            for pod in job.pods:
                self.pod_job[pod.uid] = i
        env = self.env
        while len(env):
            batch = env.pop_batch()
            if until_s is not None and env.now > until_s:
                break
            self._decay(env.now)
            releases: list[PodUid] = []
            for event in batch:
                i = int(event.payload)
                if event.kind is Kind.ARRIVAL:
                    self.waiting[i] = self.jobs[i]
                    self.trace.append((env.now, "arrive", i))
                elif event.kind is Kind.COMPLETION and self.ends.get(i) == env.now:
                    releases.extend(self._stop(i))
                    self.records[i].end_s = env.now
                    self.trace.append((env.now, "finish", i))
            if releases:
                self.snap = self.snap.advance(releases=releases)
            pending = [p for job in self.waiting.values() for p in job.pods]
            if pending:
                self._cycle(pending)
            if self.meter is not None:
                self.meter.observe(env.now, self.snap, [p for job in self.waiting.values() for p in job.pods])
            self.utilisation.append((env.now, self.snap.gpu_allocated_milli() / self.capacity))
        return self._result()

    # -- one cycle ------------------------------------------------------------------------
    def _cycle(self, pending: list[PodSpec]) -> None:
        now = self.env.now
        ctx = self._context(pending) if self.queued else None
        result = schedule(self.snap, pending, self.profile, now=now, rng=self.rng, queues=ctx)
        released = self._evict(result)
        self.snap = self.snap.advance([*result.binds, *result.nominated], releases=released)
        started: dict[int, list[PodUid]] = {}
        for bind in [*result.binds, *result.nominated]:
            started.setdefault(self.pod_job[bind.pod], []).append(bind.pod)
        for i, uids in sorted(started.items()):
            self._start(i, uids)
        for uid, status in result.unschedulable.items():
            self.reasons[self.pod_job[uid]] = status.message

    def _start(self, i: int, uids: list[PodUid]) -> None:
        job = self.jobs[i]
        need = job.group.min_member if job.group else len(job.pods)
        if len(uids) < need:
            raise AssertionError(f"core bound {len(uids)} of job {i}'s pods, below its minimum {need}")
        now = self.env.now
        del self.waiting[i]
        self.running[i] = uids
        self.records[i].start_s = now
        self.trace.append((now, "start", i))
        if job.duration_s is not None:
            self.ends[i] = now + job.duration_s
            self.env.schedule(now + job.duration_s, Kind.COMPLETION, i)

    def _stop(self, i: int) -> list[PodUid]:
        """End job i's current run; credit its attained service; return its pods to release."""
        uids = self.running.pop(i)
        self.ends.pop(i, None)
        self.attained[i] = self.attained.get(i, 0.0) + self._gpus(i, uids) * (self.env.now - self._started(i))
        return uids

    def _started(self, i: int) -> float:
        start = self.records[i].start_s
        assert start is not None, f"job {i} runs without a start time"
        return start

    def _gpus(self, i: int, uids: list[PodUid]) -> float:
        mine = set(uids)
        return sum(p.gpu.total_milli for p in self.jobs[i].pods if p.uid in mine) / 1000

    def _evict(self, result: CycleResult) -> list[PodUid]:
        now = self.env.now
        released: list[PodUid] = []
        by_job: dict[int, set[PodUid]] = {}
        for e in result.evictions:
            by_job.setdefault(self.pod_job[e.pod], set()).add(e.pod)
            self.evicted_at[e.pod] = (*[t for t in self.evicted_at.get(e.pod, ()) if now - t < 3600.0], now)
        self.preemptions += len(result.evictions)
        for i, gone in sorted(by_job.items()):
            job = self.jobs[i]
            still = [u for u in self.running[i] if u not in gone]
            if job.group is not None and len(still) >= job.group.min_member:
                self.running[i] = still  # extras of an elastic gang: the job goes on smaller
                released.extend(gone)
                continue
            self.lost += self._gpus(i, self.running[i]) * (now - self._started(i))
            released.extend(self._stop(i))
            self.waiting[i] = job
            self.records[i].preempted += 1
            self.trace.append((now, "preempted", i))
        return released

    # -- what the core is told across cycles -------------------------------------------------
    def _context(self, pending: list[PodSpec]) -> QueueContext:
        now = self.env.now
        attained: dict[PodUid, float] = {}
        if self.cfg.order == "las":
            for i in {self.pod_job[p.uid] for p in pending} | set(self.running):
                total = self.attained.get(i, 0.0)
                if i in self.running:
                    total += self._gpus(i, self.running[i]) * (now - self._started(i))
                for pod in self.jobs[i].pods:
                    attained[pod.uid] = total
        return QueueContext(self.tree, MappingProxyType(dict(self.decayed)), MappingProxyType(attained),
                            MappingProxyType(self.evicted_at))

    def _decay(self, now: float) -> None:
        """Exponentially decayed GPU share per queue (half-life from the profile)."""
        half = self.cfg.usage_half_life_seconds
        if not half or not self.queued:
            return
        keep = math.pow(0.5, (now - self.last_t) / half)
        held: dict[str, float] = {}
        for p in self.snap.placements.values():
            held[p.queue] = held.get(p.queue, 0.0) + len(p.gpus) * p.milli
        for q in set(self.decayed) | set(held):
            self.decayed[q] = self.decayed.get(q, 0.0) * keep + (1 - keep) * held.get(q, 0.0) / self.capacity
        self.last_t = now

    def _result(self) -> ReplayResult:
        jobs = self.jobs
        gpu_seconds = sum((j.duration_s or 0.0) * j.gpu_milli / 1000 for j in jobs)
        longest = max((j.duration_s or 0.0 for j in jobs), default=0.0)
        meter = self.meter
        return ReplayResult(self.records, self.trace, self.utilisation, int(self.snap.cluster.gpu_count.sum()),
                            gpu_seconds, longest,
                            {i: self.reasons[i] for i in self.waiting if i in self.reasons},
                            self.preemptions, self.lost,
                            meter.samples if meter else [],
                            meter.jain(self.env.now) if meter else float("nan"),
                            len(meter.inverted) if meter else 0)
