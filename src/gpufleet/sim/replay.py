"""Time-driven replay: jobs arrive, wait, run for their duration and leave.

After every batch of simultaneous events the simulator runs one scheduling cycle over all
waiting pods (oldest first within a priority, as the core orders them) and starts what was
bound. A gang's job starts when its group is bound (the core binds a group all or nothing,
at least minMember pods; an elastic gang runs with the members that fit and drops the rest).
Device failures and node changes are event kinds the loop accepts as hooks for later work;
this module handles arrivals and completions.

Conservation holds at every moment: arrived = waiting + running + finished.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import Profile
from gpufleet.model import ClusterSnapshot, PodSpec, PodUid
from gpufleet.sim.environment import Environment, Kind
from gpufleet.sim.workload import Job, Workload


@dataclass(slots=True)
class JobRecord:
    job: int
    arrival_s: float
    start_s: float | None = None
    end_s: float | None = None


@dataclass(slots=True)
class ReplayResult:
    records: list[JobRecord]
    trace: list[tuple[float, str, int]]
    """(time, event, job index) for every arrival, start and finish, in order."""
    utilisation: list[tuple[float, float]]
    """(time, allocated GPU fraction) after each cycle."""
    gpus: int
    gpu_seconds: float
    longest_s: float
    unscheduled_reasons: dict[int, str] = field(default_factory=dict)

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
                "gpu_utilisation": mean_util,
                "gpu_utilisation_while_arriving": _time_mean(times, util, first, last_arrival)}


def _time_mean(times: np.ndarray, values: np.ndarray, start: float, end: float) -> float:
    """Time-weighted mean of a step function (value holds until the next sample) over [start, end]."""
    if len(times) < 2 or end <= start:
        return float(values[-1]) if len(values) else 0.0
    edges = np.clip(np.append(times, end), start, end)
    return float(np.sum(values * np.diff(edges)) / (end - start))


def replay(workload: Workload, profile: Profile, seed: int = 0, *, until_s: float | None = None) -> ReplayResult:
    """Replay `workload` (jobs need `duration_s`; None means it never finishes)."""
    env = Environment()
    jobs = workload.jobs
    snap = ClusterSnapshot.build(workload.nodes, pod_groups=[j.group for j in jobs if j.group]).owned()
    gpus = int(snap.cluster.gpu_count.sum())
    records = [JobRecord(i, j.arrival_s) for i, j in enumerate(jobs)]
    for i, job in enumerate(jobs):
        env.schedule(job.arrival_s, Kind.ARRIVAL, i)
    waiting: dict[int, Job] = {}
    pod_job: dict[PodUid, int] = {}
    running_pods: dict[int, list[PodUid]] = {}
    trace: list[tuple[float, str, int]] = []
    utilisation: list[tuple[float, float]] = []
    rng = random.Random(seed)
    capacity = snap.gpu_capacity_milli() or 1
    reasons: dict[int, str] = {}
    while len(env):
        batch = env.pop_batch()
        if until_s is not None and env.now > until_s:
            break
        releases: list[PodUid] = []
        for event in batch:
            i = int(event.payload)
            if event.kind is Kind.ARRIVAL:
                waiting[i] = jobs[i]
                for pod in jobs[i].pods:
                    pod_job[pod.uid] = i
                trace.append((env.now, "arrive", i))
            elif event.kind is Kind.COMPLETION:
                releases.extend(running_pods.pop(i))
                records[i].end_s = env.now
                trace.append((env.now, "finish", i))
        if releases:
            snap = snap.advance(releases=releases)
        pending: list[PodSpec] = [p for job in waiting.values() for p in job.pods]
        if pending:
            result = schedule(snap, pending, profile, now=env.now, rng=rng)
            snap = snap.advance(result.binds)
            started: dict[int, list[PodUid]] = {}
            for bind in result.binds:
                started.setdefault(pod_job[bind.pod], []).append(bind.pod)
            for i, uids in sorted(started.items()):
                group = jobs[i].group
                need = group.min_member if group else len(jobs[i].pods)
                if len(uids) < need:
                    raise AssertionError(f"core bound {len(uids)} of job {i}'s pods, below its minimum {need}")
                # An elastic gang (minMember < pods) starts with the members that fit; the
                # others are not run (the job runs at the scale it got).
                del waiting[i]
                running_pods[i] = uids
                records[i].start_s = env.now
                trace.append((env.now, "start", i))
                duration = jobs[i].duration_s
                if duration is not None:
                    env.schedule(env.now + duration, Kind.COMPLETION, i)
            for uid, status in result.unschedulable.items():
                reasons[pod_job[uid]] = status.message
        utilisation.append((env.now, snap.gpu_allocated_milli() / capacity))
    gpu_seconds = sum((j.duration_s or 0.0) * j.gpu_milli / 1000 for j in jobs)
    longest = max((j.duration_s or 0.0 for j in jobs), default=0.0)
    return ReplayResult(records, trace, utilisation, gpus, gpu_seconds, longest,
                        {i: reasons[i] for i in waiting if i in reasons})
