"""The defragmentation experiment of issue 22: does moving a few small pods cut the wait of big
jobs, and what does it cost?

**Workload** (`workload`): openb's tasks, replayed in time with departures.
- Cluster: every `every`-th node of openb's GPU node list, taken in (GPUs per node, model,
  name) order so the sample keeps the list's shape mix (1/10 by default: 122 nodes, 626 GPUs,
  most of them 8-GPU nodes as in openb).
- Tasks: drawn uniformly with replacement from the default pod list's GPU tasks that ran
  (`sim.diurnal.task_pool`: 7,064 tasks, 41 % fractions of one GPU, 59 % whole GPUs, 0.8 % of
  all tasks ask 4 or 8 GPUs). Each keeps its CPU, memory and GPU request; openb's GPU-model
  constraints are empty in this list.
- Durations: the task's own `deletion_time - creation_time`, clipped to [30 s, 6 h] as in the
  autoscaling experiment (openb's durations are heavy-tailed and censored at the trace's end).
- Time scaling: openb's own arrivals are 149 days long and offer 0.2 % of its GPUs; arrivals
  are drawn instead as a Poisson process whose rate offers `load` of the sample's GPUs (by the
  pool's mean GPU-seconds per task). The big jobs are as rare as in openb: their waits are a
  small sample, which is why the command reports their count and runs several seeds.

**Policies**: `off` (no defragmentation) and `budget-B` for each budget B in GPU-hours lost per
hour. All use the `bestfit` profile with default queueing (kube-scheduler's loop: no
reservation, so small pods keep taking the GPUs a big one waits for) and the same checkpoint
model: a job interrupted by a move keeps the work up to its last checkpoint (`checkpoint_s`,
30 min by default) and loses the rest. Defragmentation starts for a job asking >= 4 GPUs that
has waited 5 min, looks at most once a minute and never moves a pod twice within an hour.

**Measures** per policy (mean over seeds): wait (mean, p95) of jobs asking >= 4 GPUs and of all
jobs (first start minus arrival: a moved job's restart is not a wait), GPU allocation while jobs
arrive, the same net of the work thrown away, evictions, evicted pods placed again at once, and
GPU-hours lost to moves.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from gpufleet.core.defrag import DefragSettings
from gpufleet.framework.profile import build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ModelError, NodeInfo, PodUid
from gpufleet.sim import parallel
from gpufleet.sim.defrag_pass import Defragmenter
from gpufleet.sim.diurnal import task_pool
from gpufleet.sim.replay import ReplayResult, replay
from gpufleet.sim.workload import Job, Workload

BIG_GPUS = 4
MIN_DURATION_S = 30.0
MAX_DURATION_S = 6 * 3600.0
KPIS = ("big_jobs", "big_wait_mean_s", "big_wait_p95_s", "wait_mean_s", "wait_p95_s", "gpu_allocation",
        "gpu_utilisation", "evictions", "moved_at_once", "gpu_hours_lost", "plans", "waiting_at_end")


def sample_nodes(nodes: Sequence[NodeInfo], every: int) -> tuple[NodeInfo, ...]:
    """Every `every`-th node in (GPUs, model, name) order: the list's shape mix, smaller."""
    if every < 1:
        raise ModelError("defrag experiment", f"--every must be at least 1, got {every}")
    ordered = sorted(nodes, key=lambda n: (len(n.gpus), n.gpu_model or "", n.name))
    return tuple(ordered[::every])


def _clipped(job: Job) -> float:
    assert job.duration_s is not None
    return min(max(job.duration_s, MIN_DURATION_S), MAX_DURATION_S)


def workload(openb_jobs: Sequence[Job], openb_nodes: Sequence[NodeInfo], *, jobs: int, load: float,
             every: int = 10, seed: int = 0) -> Workload:
    """`jobs` openb tasks arriving as a Poisson process offering `load` of the sampled nodes' GPUs."""
    if jobs < 1 or not 0 < load <= 2:
        raise ModelError("defrag experiment", "jobs must be positive and the load in (0, 2]")
    pool = task_pool(openb_jobs)
    nodes = sample_nodes(openb_nodes, every)
    gpus = sum(len(n.gpus) for n in nodes)
    mean_gpu_s = float(np.mean([j.gpu_milli / 1000 * _clipped(j) for j in pool]))
    rate = load * gpus / mean_gpu_s
    rng = random.Random(seed)
    out: list[Job] = []
    t = 0.0
    for k in range(jobs):
        t += rng.expovariate(rate)
        task = pool[rng.randrange(len(pool))]
        name = f"j{k:05d}"
        pod = dataclasses.replace(task.pods[0], uid=PodUid(name), name=name, created_s=t)
        out.append(Job((pod,), t, _clipped(task), None, task.source))
    return Workload("openb-defrag", nodes, tuple(out),
                    f"{jobs} openb tasks (seed {seed}) arriving at {load:g} of the GPUs of every {every}th openb "
                    f"GPU node ({len(nodes)} nodes, {gpus} GPUs), durations clipped to "
                    f"[{MIN_DURATION_S:g}, {MAX_DURATION_S:g}] s")


def policy(name: str, checkpoint_s: float) -> DefragSettings | None:
    """None for `off`; the settings of `budget-B` (B GPU-hours per hour)."""
    if name == "off":
        return None
    prefix = "budget-"
    try:
        budget = float(name.removeprefix(prefix)) if name.startswith(prefix) else math.nan
    except ValueError:
        budget = math.nan
    if not budget > 0 or math.isinf(budget):
        raise ModelError("--policies", f"unknown policy {name!r}: use off or budget-B (B GPU-hours per hour, > 0)")
    return DefragSettings(min_gpus=BIG_GPUS, budget_gpu_hours_per_hour=budget, checkpoint_s=checkpoint_s)


@dataclass(frozen=True, slots=True)
class DefragRun:
    policy: str
    seed: int
    row: dict[str, float]
    refusals: dict[str, int]


def run_one(shared: tuple[Callable[[int], Workload], float], name: str, seed: int) -> DefragRun:
    make, checkpoint_s = shared
    w = make(seed)
    settings = policy(name, checkpoint_s)
    profile = build_profile(dataclasses.replace(builtin("bestfit"), queueing=QueueingConfig()))
    d = Defragmenter(settings, seed=seed) if settings is not None else None
    result = replay(w, profile, seed, checkpoint_s=checkpoint_s, defrag=d)
    return DefragRun(name, seed, measure(w, result, d), dict(d.refusals) if d else {})


def measure(w: Workload, result: ReplayResult, d: Defragmenter | None) -> dict[str, float]:
    """The KPIs of one run (module docstring)."""
    first: dict[int, float] = {}
    for t, what, i in result.trace:
        if what == "start":
            first.setdefault(i, t)
    end = max((t for t, _, _ in result.trace), default=0.0)
    waits = np.array([first.get(i, end) - j.arrival_s for i, j in enumerate(w.jobs)])
    big = np.array([j.gpu_milli >= BIG_GPUS * 1000 and all(p.gpu.milli == 1000 for p in j.pods) for j in w.jobs])
    s = result.summary()
    span = _arrival_span(w)
    lost_h = d.gpu_seconds_lost / 3600 if d else 0.0
    gpus = result.gpus or 1

    def pct(a: np.ndarray, q: float) -> float:
        return round(float(np.percentile(a, q)), 1) if len(a) else math.nan
    return {"big_jobs": float(big.sum()),
            "big_wait_mean_s": round(float(waits[big].mean()), 1) if big.any() else math.nan,
            "big_wait_p95_s": pct(waits[big], 95),
            "wait_mean_s": round(float(waits.mean()), 1), "wait_p95_s": pct(waits, 95),
            "gpu_allocation": round(s["gpu_utilisation_while_arriving"], 4),
            "gpu_utilisation": round(s["gpu_utilisation_while_arriving"] - lost_h * 3600 / (gpus * span), 4)
            if span > 0 else math.nan,
            "evictions": float(d.evictions if d else 0), "moved_at_once": float(d.moved if d else 0),
            "gpu_hours_lost": round(lost_h, 2), "plans": float(d.plans if d else 0),
            "waiting_at_end": s["waiting_at_end"]}


def _arrival_span(w: Workload) -> float:
    return w.jobs[-1].arrival_s - w.jobs[0].arrival_s if w.jobs else 0.0


def run_all(make: Callable[[int], Workload], policies: Sequence[str], seeds: Sequence[int], workers: int,
            checkpoint_s: float, on_done: Callable[[DefragRun], None] | None = None) -> list[DefragRun]:
    for name in policies:
        policy(name, checkpoint_s)  # unknown names fail before any work starts
    jobs = [(p, s) for p in policies for s in seeds]
    runs = parallel.run_jobs(run_one, (make, checkpoint_s), jobs, workers, on_done)
    return sorted(runs, key=lambda r: (list(policies).index(r.policy), r.seed))


def table(runs: Sequence[DefragRun]) -> dict[str, dict[str, float]]:
    """policy -> KPI -> mean over seeds; the big-job mean wait is weighted by each seed's big jobs
    (pooled), `big_jobs` is their sum."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r.policy for r in runs):
        rows = [r.row for r in runs if r.policy == name]
        out[name] = {k: round(float(np.nanmean([row[k] for row in rows])), 4) for k in KPIS}
        out[name]["big_jobs"] = float(sum(row["big_jobs"] for row in rows))
        weights = [row["big_jobs"] for row in rows]
        if sum(weights):
            out[name]["big_wait_mean_s"] = round(
                sum(row["big_wait_mean_s"] * n for row, n in zip(rows, weights) if n) / sum(weights), 1)
    return out


def refusals(runs: Sequence[DefragRun]) -> Mapping[str, dict[str, int]]:
    """policy -> why units got no plan -> how often (summed over seeds)."""
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        into = out.setdefault(r.policy, {})
        for k, n in r.refusals.items():
            into[k] = into.get(k, 0) + n
    return out
