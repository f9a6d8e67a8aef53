"""A day of diurnal load built from the openb task mix, on a cluster that starts with no nodes.

The autoscaling experiment needs load that rises and falls, so that nodes are added and
removed; the openb trace has the right task mix but arrives over 149 days, mostly slowly.
So this module keeps openb's *tasks* and draws new *arrival times*. Decisions:

- **Task pool**: the openb default pod list's GPU tasks that ran (`pod_phase` other than
  Pending, whose "duration" is only how long they waited before deletion): 6,203 tasks, whole
  GPUs (1, 2, 4, 8) and fractions of one GPU. Each keeps its CPU, memory and GPU request.
  openb's GPU-model constraints (`gpu_spec`, empty in the default list) are dropped: the
  experiment's node templates have other models. CPU-only tasks are left out by default
  (`cpu_tasks`): the experiment is about GPU nodes, and CPU pods would belong to a CPU pool
  that every arm scales the same way.
- **Arrivals**: a non-homogeneous Poisson process over `day_s` with rate
  `mean * (1 + a cos(2 pi (t - peak) / day))`, `a = (r - 1) / (r + 1)` for a peak-to-trough
  ratio `r` (default 4, peak at 14:00), drawn by thinning. openb's own creation times, folded
  onto one day, have about that ratio (hourly counts from 137 to 550). `jobs_per_day` is the
  expected number of jobs (default 8,152: the default pod list's task count, in one day; the
  day's work is about 6,400 GPU-hours, 265 GPUs allocated on average; autoscaled fleets peak
  near 500 GPUs).
- **Tasks**: drawn uniformly with replacement from the pool, so the class mix (41 % fractions,
  59 % whole GPUs, 1.2 % of them multi-GPU) is openb's.
- **Durations**: the task's own `deletion_time - creation_time`, clipped to
  [`min_duration_s`, `max_duration_s`] (default 30 s to 6 h): openb's durations are heavy-tailed
  (median 12 min, p99 41 h, and tasks still running at the trace's end are censored), and a
  one-day experiment cannot show a 27-hour job's cost. Clipped, the mean is 45 min.
- **Gangs**: openb has none. Each multi-GPU task (2, 4 or 8 whole GPUs) becomes, with
  probability `gang_share` (default 0.5), a gang of `n` pods each asking for the task's
  resources, `n` drawn uniformly from `gang_sizes` (default 2 or 4): a distributed training
  job of that shape, all members starting together (PodGroup minMember = n).
- **Seeded**: one `random.Random(seed)` draws everything, in a fixed order.

Pure: the caller loads the pool (`openb.load`) and passes its jobs in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Sequence

from gpufleet.model import GpuKind, ModelError, PodGroup, PodSpec, PodUid
from gpufleet.sim.workload import Job, Workload

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class DiurnalSettings:
    """How the day is drawn. Times in seconds."""

    jobs_per_day: float = 8152.0
    """Expected number of jobs arriving over `day_s` (default: as many as openb's default pod list
    has tasks, which arrived over 149 days)."""
    peak_to_trough: float = 4.0
    """Arrival rate at the peak over the rate at the trough (1 = flat)."""
    peak_hour: float = 14.0
    """Hour of the day (0-24) at which arrivals peak."""
    day_s: float = DAY_S
    min_duration_s: float = 30.0
    max_duration_s: float = 6 * 3600.0
    gang_share: float = 0.5
    """Share of multi-GPU tasks that become gangs."""
    gang_sizes: tuple[int, ...] = (2, 4)
    cpu_tasks: bool = False
    """Keep openb's CPU-only tasks in the pool."""

    def __post_init__(self) -> None:
        checks = (("jobs_per_day", self.jobs_per_day > 0), ("peak_to_trough", self.peak_to_trough >= 1),
                  ("peak_hour", 0 <= self.peak_hour < 24), ("day_s", self.day_s > 0),
                  ("min_duration_s", self.min_duration_s > 0),
                  ("max_duration_s", self.max_duration_s >= self.min_duration_s),
                  ("gang_share", 0 <= self.gang_share <= 1),
                  ("gang_sizes", bool(self.gang_sizes) and all(n >= 2 for n in self.gang_sizes)))
        for name, ok in checks:
            if not ok:
                raise ModelError(f"diurnal settings: {name}", f"invalid value {getattr(self, name)!r}")

    def rate(self, t: float) -> float:
        """Arrivals per second at time t."""
        a = (self.peak_to_trough - 1) / (self.peak_to_trough + 1)
        phase = 2 * math.pi * (t - self.peak_hour * 3600) / self.day_s
        return self.jobs_per_day / self.day_s * (1 + a * math.cos(phase))


def task_pool(jobs: Sequence[Job], *, cpu_tasks: bool = False) -> list[Job]:
    """openb jobs usable as tasks: single pods that ran and have a duration."""
    pool = [j for j in jobs if len(j.pods) == 1 and j.duration_s is not None and j.group is None
            and j.attrs.get("pod_phase", "Running") != "Pending"
            and (cpu_tasks or j.pods[0].gpu.kind is not GpuKind.NONE)]
    if not pool:
        raise ModelError("diurnal workload", "the task pool is empty (no task that ran and has a duration)")
    return pool


def arrivals(settings: DiurnalSettings, rng: random.Random) -> list[float]:
    """Arrival times over one day, by thinning a Poisson process at the peak rate."""
    peak = settings.rate(settings.peak_hour * 3600)
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= settings.day_s:
            return out
        if rng.random() * peak < settings.rate(t):
            out.append(t)


def diurnal_workload(jobs: Sequence[Job], seed: int, settings: DiurnalSettings = DiurnalSettings(),
                     name: str = "diurnal-openb") -> Workload:
    """A day of jobs drawn from `jobs` (openb's), on a cluster with no nodes."""
    pool = task_pool(jobs, cpu_tasks=settings.cpu_tasks)
    rng = random.Random(seed)
    out: list[Job] = []
    for k, t in enumerate(arrivals(settings, rng)):
        task = pool[rng.randrange(len(pool))]
        assert task.duration_s is not None
        duration = min(max(task.duration_s, settings.min_duration_s), settings.max_duration_s)
        pod = task.pods[0]
        n = 1
        if pod.gpu.kind is GpuKind.WHOLE and pod.gpu.count >= 2 and rng.random() < settings.gang_share:
            n = settings.gang_sizes[rng.randrange(len(settings.gang_sizes))]
        out.append(_job(f"d{k:05d}", pod, n, t, duration, task.source))
    a = (settings.peak_to_trough - 1) / (settings.peak_to_trough + 1)
    description = (f"a day of diurnal load from openb tasks (seed {seed}): {settings.jobs_per_day:g} jobs/day "
                   f"expected, peak/trough {settings.peak_to_trough:g} (amplitude {a:.2f}) peaking at "
                   f"{settings.peak_hour:g}:00, durations clipped to [{settings.min_duration_s:g}, "
                   f"{settings.max_duration_s:g}] s, {settings.gang_share:g} of multi-GPU tasks as gangs of "
                   f"{'/'.join(map(str, settings.gang_sizes))}; no nodes at the start")
    return Workload(name, (), tuple(out), description)


def _job(name: str, pod: PodSpec, n: int, t: float, duration: float, source: str) -> Job:
    group = PodGroup(name, n) if n > 1 else None
    pods = tuple(replace(pod, uid=PodUid(f"{name}-{i}" if group else name), name=f"{name}-{i}" if group else name,
                         gpu_models=frozenset(), created_s=t, pod_group=group.key if group else None)
                 for i in range(n))
    return Job(pods, t, duration, group, source, MappingProxyType({"openb_task": pod.name}))
