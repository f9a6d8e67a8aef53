"""Time-driven replay: jobs arrive, wait, run for their duration and leave, or are preempted.

After every batch of simultaneous events the simulator runs one scheduling cycle over all
waiting pods and carries out its result: evictions first (a preempted job loses the work
since it started and waits again, keeping its place by age), then binds and nominated
placements. A gang's job starts when its group is bound (the core binds a group all or
nothing, at least minMember pods; an elastic gang runs with the members that fit and drops
the rest; losing an extra member does not stop it).

An interrupted job (preempted, hit by a fault, on a node scaled away) restarts from its last
checkpoint (`checkpoint_s`; None = from zero): the work since then, and any time its GPUs
were held while it hung, counts as GPU-seconds lost. With `faults` (sim/faults.py) devices
and nodes fail at the model's rates and the policy decides what goes out of service, for
how long, and when the hit jobs give their pods back. With a `scaler` (sim/scaling.py)
nodes are requested, billed, join after their start delay and are removed.

With queues (the workload's, or a profile whose `queueing` section is not the default) the
driver also tells the core what it remembers across cycles: usage decayed with the
profile's half-life, each job's attained GPU-seconds (las) and past evictions.

With `Workload.claims` the pods ask for their whole GPUs and GPU shares through DRA
ResourceClaims (`sim.claims`: each node's GPUs published as a ResourceSlice): a bound pod's
claim allocation holds its devices until the pod finishes, is preempted or is hit by a fault,
and the core places such claims exactly as the extended resources they stand for. Accounting
(GPU-seconds, attained service, the makespan bound) reads the jobs as the workload gives them.
Queues count a claim pod as the GPUs its claims amount to (`core.claim_gpus`), so queued
workloads replay through claims as through extended resources too. A scaler cannot be
combined with claims yet (`replay` refuses it): the nodes it adds would need their own
ResourceSlices and the scalers read pods' extended resources only.

With `slowdown` (sim/comm_cost.py) a job runs slower where it is placed: the function gets the
job and the placements it starts with and returns a factor >= 1 that stretches the rest of its
duration for that run (an interrupted run's progress is counted at the same rate).

With `mig` (sim/mig_reconfig.py) the MIG GPUs' layouts can change: after every cycle the
reconfigurer meters the MIG slices and may plan changes of idle instances for the pods still
waiting; destroyed instances go at once, created ones come up after its delay.

With `defrag` (sim/defrag_pass.py) a defragmentation pass runs after the cycle, at most once per
its interval: a big whole-GPU job that waits, blocked only by fragmentation, gets room by moving
a few small pods (`core.defrag`); the plan is carried out as a cycle's result is.

Conservation holds at every moment: arrived = waiting + running + finished.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.core.faults import DeviceFault, Fault, NodeFault, describe, quarantine, restore, victims
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import Profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, ModelError, NodeInfo, NodeName, Placement, PodSpec, PodUid, QueueTree
from gpufleet.sim.claims import jobs_as_claims
from gpufleet.sim.defrag_pass import Defragmenter
from gpufleet.sim.environment import Environment, Kind
from gpufleet.sim.faults import FaultInjector, FaultSetup, InjectedFault
from gpufleet.sim.mig_reconfig import MigReady, MigReconfigurer, Relayout
from gpufleet.sim.queue_kpis import QueueMeter, QueueSample
from gpufleet.sim.scaling import Billing, NewNode, Scaler
from gpufleet.sim.workload import Job, Workload


@dataclass(slots=True)
class JobRecord:
    job: int
    arrival_s: float
    start_s: float | None = None
    """Start of the latest run (the one that finished, for a finished job)."""
    end_s: float | None = None
    preempted: int = 0
    failed: int = 0
    """Runs ended by a fault (or by its node being scaled away)."""


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
    faults: int = 0
    """Injected faults that took capacity out (faults on capacity already out are not counted)."""
    gpu_seconds_lost_to_faults: float = 0.0
    gpu_seconds_out_of_service: float = 0.0
    """GPU-seconds during which devices were out of service (failed, quarantined or drained)."""
    restarts: list[tuple[int, float]] = field(default_factory=list)
    """(job, seconds from the fault to its next start) for each job a fault interrupted."""
    gpu_seconds_paid: float = 0.0
    """GPU-seconds of nodes requested by the scaler, from request to removal or the end."""
    cost: float = 0.0
    gpu_seconds_allocated: float = 0.0
    gang: list[bool] = field(default_factory=list)
    """Per job: whether it has more than one pod."""

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
        gangs = {r.job for r in self.records if self.gang[r.job]} if self.gang else set()
        back = np.array([d for _, d in self.restarts])
        gang_back = np.array([d for i, d in self.restarts if i in gangs])
        return {"jobs": float(len(self.records)), "finished": float(len(done)),
                "waiting_at_end": float(sum(1 for r in self.records if r.start_s is None)),
                "jct_mean_s": float(jct.mean()) if len(jct) else float("nan"),
                "jct_p50_s": pct(jct, 50), "jct_p99_s": pct(jct, 99),
                "wait_mean_s": float(wait.mean()) if len(wait) else float("nan"),
                "wait_p95_s": pct(wait, 95), "wait_p99_s": pct(wait, 99), "wait_max_s": float(wait.max()) if len(wait) else float("nan"),
                "makespan_s": makespan, "makespan_lower_bound_s": bound,
                "makespan_over_bound": makespan / bound if bound else float("nan"),
                "gpu_allocation": mean_util,
                "gpu_utilisation": mean_util - wasted,
                "gpu_utilisation_while_arriving": _time_mean(times, util, first, last_arrival),
                "jain_fairness": self.jain_fairness,
                "priority_inversions": float(self.priority_inversions),
                "preemptions": float(self.preemptions),
                "gpu_hours_lost": self.gpu_seconds_lost / 3600,
                "faults": float(self.faults),
                "gpu_hours_lost_to_faults": self.gpu_seconds_lost_to_faults / 3600,
                "gpu_hours_out_of_service": self.gpu_seconds_out_of_service / 3600,
                "restart_mean_s": float(back.mean()) if len(back) else float("nan"),
                "gang_restart_mean_s": float(gang_back.mean()) if len(gang_back) else float("nan"),
                "gang_restarts": float(len(gang_back)),
                "gpu_hours_paid": self.gpu_seconds_paid / 3600, "cost": self.cost,
                "gpu_hours_allocated": self.gpu_seconds_allocated / 3600,
                "idle_gpu_hours": max(0.0, self.gpu_seconds_paid - self.gpu_seconds_allocated) / 3600
                if self.gpu_seconds_paid else 0.0}


def _time_mean(times: np.ndarray, values: np.ndarray, start: float, end: float) -> float:
    """Time-weighted mean of a step function (value holds until the next sample) over [start, end]."""
    if len(times) < 2 or end <= start:
        return float(values[-1]) if len(values) else 0.0
    edges = np.clip(np.append(times, end), start, end)
    return float(np.sum(values * np.diff(edges)) / (end - start))


@dataclass(frozen=True, slots=True)
class Moment:
    """The replay's state after a batch of events, as `replay(observe=...)` hands it out. `snapshot`
    is the replay's own and goes on changing: read it during the call, keep what you need."""

    time_s: float
    snapshot: ClusterSnapshot
    waiting: tuple[PodSpec, ...]
    reasons: Mapping[PodUid, str]
    """Why each waiting pod's job was left pending at its last cycle (the core's message)."""
    out: frozenset[tuple[NodeName, int | None]]
    """Capacity out of service: (node, device), or (node, None) for a whole node."""
    trace: tuple[tuple[float, str, int], ...]
    """(time, what, job) since the previous moment: arrive, start, finish, preempted, failed, scaled-down."""
    jobs: tuple[Job, ...]


Observer = Callable[[Moment], None]
Slowdown = Callable[[int, Job, Sequence[Placement]], float]
"""(job index, job, the placements its run starts with) -> factor >= 1 on its remaining duration."""


def replay(workload: Workload, profile: Profile, seed: int = 0, *, until_s: float | None = None,
           defrag: Defragmenter | None = None,
           sample_s: float = 600.0, checkpoint_s: float | None = None, faults: FaultSetup | None = None,
           scaler: Scaler | None = None, observe: Observer | None = None, observe_every_s: float = 600.0,
           slowdown: Slowdown | None = None, mig: MigReconfigurer | None = None) -> ReplayResult:
    """Replay `workload` (jobs need `duration_s`; None means it never finishes). `observe` is called
    with a `Moment` after the first batch and then after the first batch at least `observe_every_s`
    later (a dashboard's frames); it must not change what it is given."""
    if checkpoint_s is not None and not checkpoint_s > 0:
        raise ValueError(f"checkpoint interval must be a positive number of seconds, got {checkpoint_s}")
    if scaler is not None and not scaler.interval_s > 0:
        raise ValueError(f"scaler interval must be a positive number of seconds, got {scaler.interval_s}")
    if observe is not None and not observe_every_s > 0:
        raise ValueError(f"observe interval must be a positive number of seconds, got {observe_every_s}")
    if workload.claims and scaler is not None:
        raise ModelError(f"replay of workload {workload.name}",
                         "a scaler cannot be used when GPUs are asked through DRA claims yet: the nodes it adds "
                         "would need ResourceSlices of their own and it reads pods' extended resources only")
    run = _Replay(workload, profile, seed, sample_s, checkpoint_s, faults, scaler)
    run.observer = observe
    run.observe_every_s = observe_every_s
    run.slowdown = slowdown
    run.defrag = defrag
    run.mig = mig
    return run.run(until_s)


IDLE_TICKS = 60
"""Scaler looks without any other event before a run ends (see `_Replay._keep_going`)."""


class _Replay:
    def __init__(self, workload: Workload, profile: Profile, seed: int, sample_s: float,
                 checkpoint_s: float | None, faults: FaultSetup | None, scaler: Scaler | None) -> None:
        self.jobs = workload.jobs
        self.profile = profile
        self.cfg = profile.queueing
        self.tree = QueueTree.build(workload.queues)
        self.queued = bool(workload.queues) or self.cfg != QueueingConfig()
        self.env = Environment()
        groups = [j.group for j in self.jobs if j.group]
        self.asking = self.jobs
        """The jobs as the core is given them: through claims with `Workload.claims`."""
        if workload.claims:
            dra, self.asking = jobs_as_claims(workload.nodes, self.jobs)
            snap = ClusterSnapshot.build(workload.nodes, pod_groups=groups, device_classes=dra.classes,
                                         slices=dra.slices, claims=dra.claims)
            if snap.dra.problems:
                raise ModelError(f"workload {workload.name} as DRA claims", "; ".join(snap.dra.problems))
        else:
            snap = ClusterSnapshot.build(workload.nodes, pod_groups=groups)
        self.snap = snap.owned()
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
        self.checkpoint_s = checkpoint_s
        self.done: dict[int, float] = {}
        """Checkpointed seconds of work per job."""
        self.unfinished = len(self.jobs)
        # faults
        self.faults = faults
        self.injector = FaultInjector(faults.model, workload.nodes, seed, faults.script) if faults else None
        self.hit_at: dict[int, float] = {}
        """Jobs a fault stopped, waiting for their pods to be released: when their work stopped."""
        self.down_since: dict[int, float] = {}
        self.restarts: list[tuple[int, float]] = []
        self.out: set[tuple[NodeName, int | None]] = set()
        """Capacity out of service: (node, device) or (node, None) for a whole node."""
        self.forever: dict[NodeName, set[int]] = {}
        self.fault_count = 0
        self.lost_to_faults = 0.0
        self.out_gpu_s = 0.0
        # autoscaling
        self.scaler = scaler
        self.launching: dict[NodeName, NewNode] = {}
        self.billing = Billing()
        self.alloc_gpu_s = 0.0
        self.last_alloc = (0.0, 0.0)
        self.idle_ticks = 0
        # observation
        self.observer: Observer | None = None
        self.observe_every_s = 600.0
        self.next_moment = 0.0
        self.traced = 0
        self.slowdown: Slowdown | None = None
        self.factor: dict[int, float] = {}
        """The running jobs' slowdown factors (1 when absent)."""
        self.defrag: Defragmenter | None = None
        self.mig: MigReconfigurer | None = None

    def run(self, until_s: float | None) -> ReplayResult:
        for i, job in enumerate(self.jobs):
            self.env.schedule(job.arrival_s, Kind.ARRIVAL, i)
            for pod in job.pods:
                self.pod_job[pod.uid] = i
        if self.injector is not None:
            self._next_fault(0.0)
        if self.scaler is not None:
            self.env.schedule(0.0, Kind.SCALE_TICK)
        env = self.env
        end = 0.0
        while len(env):
            batch = env.pop_batch()
            if until_s is not None and env.now > until_s:
                end = until_s
                break
            end = env.now
            self._integrate(env.now)
            self._decay(env.now)
            ticked = False
            for event in batch:
                self._handle(event.kind, event.payload)
                ticked |= event.kind is Kind.SCALE_TICK
            pending = [p for job in self.waiting.values() for p in job.pods]
            if pending:
                self._cycle(pending)
            if self.defrag is not None and self.waiting and self.defrag.due(env.now):
                self._defrag()
            if self.mig is not None:
                self._relayout(self.mig.step(env.now, self.snap, [p for job in self.waiting.values() for p in job.pods],
                                             self.profile))
            if ticked:
                self.idle_ticks = 0 if self._scale([p for job in self.waiting.values() for p in job.pods]) \
                    else self.idle_ticks + 1
            self._keep_going()
            if self.meter is not None:
                self.meter.observe(env.now, self.snap, [p for job in self.waiting.values() for p in job.pods])
            self.utilisation.append((env.now, self.snap.gpu_allocated_milli() / self.capacity))
            self._settle()
            if self.observer is not None and env.now >= self.next_moment:
                self._observe(self.observer)
        self._integrate(end)
        self.billing.close(end)
        return self._result()

    def _observe(self, observer: Observer) -> None:
        now = self.env.now
        self.next_moment = now + self.observe_every_s
        waiting = tuple(p for job in self.waiting.values() for p in job.pods)
        reasons = {p.uid: self.reasons[self.pod_job[p.uid]] for p in waiting if self.pod_job[p.uid] in self.reasons}
        observer(Moment(now, self.snap, waiting, MappingProxyType(reasons), frozenset(self.out),
                        tuple(self.trace[self.traced:]), self.jobs))
        self.traced = len(self.trace)

    def _keep_going(self) -> None:
        """Schedule the next fault and scaler tick while something can still change.

        Faults and ticks alone cannot finish a job. Once no other event is left, the fault
        stream stops, and the scaler gets `IDLE_TICKS` more looks (its own timers, such as
        a batching window, may still make it act) before the run ends."""
        env = self.env
        if not self.unfinished:
            return
        others = env.pending(Kind.ARRIVAL, Kind.COMPLETION, Kind.RELEASE, Kind.REPAIR, Kind.NODE_ADDED, Kind.MIG_READY)
        if self.injector is not None and not env.pending(Kind.FAULT) and others:
            self._next_fault(env.now)
        if self.scaler is not None and not env.pending(Kind.SCALE_TICK) and (others or self.idle_ticks < IDLE_TICKS):
            env.schedule(env.now + self.scaler.interval_s, Kind.SCALE_TICK)

    def _handle(self, kind: Kind, payload: object) -> None:
        now = self.env.now
        if kind is Kind.ARRIVAL:
            i = int(payload)  # type: ignore[call-overload]
            self.waiting[i] = self.asking[i]
            self.trace.append((now, "arrive", i))
        elif kind is Kind.COMPLETION:
            i = int(payload)  # type: ignore[call-overload]
            if self.ends.get(i) == now:
                self._release(self._stop(i))
                self.records[i].end_s = now
                self.unfinished -= 1
                self.trace.append((now, "finish", i))
        elif kind is Kind.FAULT:
            assert isinstance(payload, InjectedFault)
            self._fault(payload)
        elif kind is Kind.RELEASE:
            assert isinstance(payload, tuple)
            i, run = int(payload[0]), payload[1]
            if i in self.running and i in self.hit_at and self.records[i].start_s == run:
                self._release(self._interrupt(i))
        elif kind is Kind.REPAIR:
            self._repair(payload)  # type: ignore[arg-type]
        elif kind is Kind.NODE_ADDED:
            assert isinstance(payload, NewNode)
            del self.launching[payload.node.name]
            self._rebuild([*self.snap.cluster.nodes, payload.node])
        elif kind is Kind.MIG_READY:
            assert isinstance(payload, MigReady) and self.mig is not None
            self._relayout(self.mig.ready(payload, self.snap))

    def _release(self, uids: list[PodUid]) -> None:
        if uids:
            self.snap = self.snap.advance(releases=uids)

    # -- one cycle ------------------------------------------------------------------------
    def _cycle(self, pending: list[PodSpec]) -> None:
        now = self.env.now
        ctx = self._context(pending) if self.queued else None
        result = schedule(self.snap, pending, self.profile, now=now, rng=self.rng, queues=ctx)
        self._carry_out(result)

    def _carry_out(self, result: CycleResult) -> None:
        """Evict, then bind and start: a cycle's result, or a defragmentation plan as one."""
        released = self._evict(result)
        self.snap = self.snap.advance([*result.binds, *result.nominated], releases=released)
        started: dict[int, list[PodUid]] = {}
        for bind in [*result.binds, *result.nominated]:
            started.setdefault(self.pod_job[bind.pod], []).append(bind.pod)
        for i, uids in sorted(started.items()):
            self._start(i, uids)
        for uid, status in result.unschedulable.items():
            self.reasons[self.pod_job[uid]] = status.message

    def _defrag(self) -> None:
        """Offer each waiting job to the defragmentation pass, oldest first (sim/defrag_pass.py)."""
        d = self.defrag
        assert d is not None
        for i in sorted(self.waiting, key=lambda k: (self.jobs[k].arrival_s, k)):
            if i not in self.waiting:
                continue  # a job a plan moved and started again
            plan = d.plan(self.env.now, self.snap, self.asking[i].pods, self.profile, self._spec)
            if plan is not None:
                lost = self.lost
                self._carry_out(CycleResult(plan.moves, plan.evictions, {}, plan.placements))
                d.gpu_seconds_lost += self.lost - lost

    def _spec(self, uid: PodUid) -> PodSpec | None:
        """A running pod's spec, for the pass to place it again; None for a pod of a job of several
        pods (moving one would restart them all: it waits in the queue with its job)."""
        pods = self.asking[self.pod_job[uid]].pods
        return pods[0] if len(pods) == 1 and pods[0].uid == uid else None

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
        since = self.down_since.pop(i, None)
        if since is not None:
            self.restarts.append((i, now - since))
        if self.slowdown is not None:
            placements = self.snap.placements
            self.factor[i] = max(1.0, self.slowdown(i, job, [placements[u] for u in uids]))
        if job.duration_s is not None:
            end = now + (job.duration_s - self.done.get(i, 0.0)) * self.factor.get(i, 1.0)
            self.ends[i] = end
            self.env.schedule(end, Kind.COMPLETION, i)

    def _stop(self, i: int) -> list[PodUid]:
        """End job i's current run; credit its attained service; return its pods to release."""
        uids = self.running.pop(i)
        self.ends.pop(i, None)
        self.attained[i] = self.attained.get(i, 0.0) + self._gpus(i, uids) * (self.env.now - self._started(i))
        return uids

    def _interrupt(self, i: int) -> list[PodUid]:
        """Stop job i's run early: it keeps its checkpointed work, loses the rest, and waits again."""
        now = self.env.now
        start = self._started(i)
        stopped = self.hit_at.pop(i, now)
        progress = max(0.0, stopped - start) / self.factor.get(i, 1.0)
        kept = math.floor(progress / self.checkpoint_s) * self.checkpoint_s if self.checkpoint_s else 0.0
        wasted = self._gpus(i, self.running[i]) * (now - start - kept * self.factor.get(i, 1.0))
        self.lost += wasted
        if i in self.down_since:
            self.lost_to_faults += wasted
        self.done[i] = self.done.get(i, 0.0) + kept
        uids = self._stop(i)
        self.waiting[i] = self.asking[i]
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
            if job.group is not None and len(still) >= job.group.min_member and i not in self.hit_at:
                self.running[i] = still  # extras of an elastic gang: the job goes on smaller
                released.extend(gone)
                continue
            released.extend(self._interrupt(i))
            self.records[i].preempted += 1
            self.trace.append((now, "preempted", i))
        return released

    # -- faults -----------------------------------------------------------------------------
    def _next_fault(self, after: float) -> None:
        assert self.injector is not None
        nxt = self.injector.next_after(after)
        if nxt is not None:
            self.env.schedule(nxt.time_s, Kind.FAULT, nxt)

    def _fault(self, injected: InjectedFault) -> None:
        assert self.faults is not None
        policy = self.faults.policy
        fault = injected.fault
        if (fault.node, None) in self.out or (isinstance(fault, DeviceFault) and (fault.node, fault.gpu) in self.out):
            return  # that capacity is out already
        now = self.env.now
        self.fault_count += 1
        isolate: Fault = fault
        if isinstance(fault, DeviceFault) and policy.isolate == "node":
            isolate = NodeFault(fault.node, f"drained after {fault.reason} on GPU {fault.gpu}")
        direct_delay = policy.node_release_s if isinstance(fault, NodeFault) else 0.0
        delays: dict[int, float] = {}
        for e in victims(self.snap, isolate):  # pods on the lost capacity first, then their gang mates
            on_lost = e.reason == describe(isolate)
            i = self.pod_job[e.pod]
            delays[i] = max(delays.get(i, 0.0), direct_delay if on_lost else policy.gang_release_s)
        for i, delay in sorted(delays.items()):
            self.hit_at.setdefault(i, now)
            self.down_since.setdefault(i, now)
            self.ends.pop(i, None)
            self.records[i].failed += 1
            self.trace.append((now, "failed", i))
            if delay > 0:
                self.env.schedule(now + delay, Kind.RELEASE, (i, self.records[i].start_s))
            else:
                self._release(self._interrupt(i))
        self.snap = quarantine(self.snap, isolate, now)
        key = (isolate.node, isolate.gpu if isinstance(isolate, DeviceFault) else None)
        self.out.add(key)
        if isinstance(isolate, DeviceFault) and not policy.device_repaired:
            self.forever.setdefault(isolate.node, set()).add(isolate.gpu)
        else:
            self.env.schedule(now + injected.cls.repair_s, Kind.REPAIR, isolate)

    def _repair(self, fault: Fault) -> None:
        self.snap = restore(self.snap, fault)
        self.out.discard((fault.node, fault.gpu if isinstance(fault, DeviceFault) else None))
        if isinstance(fault, NodeFault):  # a restarted node re-enumerates its devices
            for gpu in sorted(self.forever.pop(fault.node, set())):
                self.snap = restore(self.snap, DeviceFault(fault.node, gpu, "node restarted"))
                self.out.discard((fault.node, gpu))

    def _integrate(self, now: float) -> None:
        """Accumulate allocated and out-of-service GPU-seconds up to `now`."""
        t, alloc = self.last_alloc
        self.alloc_gpu_s += alloc * (now - t)
        if self.out:
            u = self.snap.usage
            c = self.snap.cluster
            gone = c.gpu_present & ~(u.gpu_healthy & u.node_ready[:, None])
            self.out_gpu_s += float(gone.sum()) * (now - t)
        self.last_alloc = (now, alloc)

    def _settle(self) -> None:
        """Note the allocation the batch leaves (it holds until the next batch)."""
        self.last_alloc = (self.env.now, self.snap.gpu_allocated_milli() / 1000)

    # -- autoscaling ------------------------------------------------------------------------
    def _scale(self, pending: list[PodSpec]) -> bool:
        """Ask the scaler; True if it added or removed anything."""
        assert self.scaler is not None
        now = self.env.now
        step = self.scaler.step(now, self.snap, pending, tuple(self.launching.values()))
        known = set(self.snap.cluster.names)
        for name in step.remove:
            if name not in known:
                raise ValueError(f"autoscaler removed node {name}, which is not in the cluster"
                                 + (" yet (still launching)" if name in self.launching else ""))
        for new in step.add:
            if new.node.name in known or new.node.name in self.launching:
                raise ValueError(f"autoscaler requested node {new.node.name}, whose name is taken")
            if not new.start_delay_s >= 0:
                raise ValueError(f"node {new.node.name}: start delay must be non-negative, got {new.start_delay_s}")
            self.billing.start(new, now)
            self.launching[new.node.name] = new
            self.env.schedule(now + new.start_delay_s, Kind.NODE_ADDED, new)
        if step.remove:
            gone = set(step.remove)
            for name in sorted(gone):
                for i in sorted({self.pod_job[e.pod] for e in victims(self.snap, NodeFault(name, "scaled down"))}):
                    self._release(self._interrupt(i))
                    self.records[i].failed += 1
                    self.trace.append((now, "scaled-down", i))
                self.billing.stop(name, now)
            self._rebuild([n for n in self.snap.cluster.nodes if n.name not in gone])
        return bool(step.add or step.remove)

    def _relayout(self, change: Relayout | None) -> None:
        """Carry out a MIG layout change: new nodes, remapped placements, the instances' ready events."""
        if change is None:
            return
        self._rebuild(list(change.nodes), change.placements)
        for ready in change.ready:
            self.env.schedule(ready.at_s, Kind.MIG_READY, ready)

    def _rebuild(self, nodes: list[NodeInfo], placements: Sequence[Placement] | None = None) -> None:
        """Replace the cluster's nodes, keeping every placement (or taking `placements`, the same
        pods' holdings on the new nodes) and each node's health and fault time."""
        old = self.snap
        running = old.placements.values() if placements is None else placements
        snap = ClusterSnapshot.build(nodes, running, old.pod_groups.values()).owned()
        u, ou = snap.usage, old.usage
        for name, j in snap.cluster.index.items():
            i = old.cluster.index.get(name)
            if i is None:
                continue
            g = int(snap.cluster.gpu_count[j])
            u.gpu_healthy[j, :g] = ou.gpu_healthy[i, :g]
            u.node_ready[j] = ou.node_ready[i]
            u.fault_at[j] = ou.fault_at[i]
            u.refresh_row(j)
        self.snap = snap
        self.capacity = snap.gpu_capacity_milli() or 1
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
                            len(meter.inverted) if meter else 0,
                            self.fault_count, self.lost_to_faults, self.out_gpu_s, self.restarts,
                            self.billing.gpu_seconds, self.billing.cost, self.alloc_gpu_s,
                            [len(j.pods) > 1 for j in jobs])
