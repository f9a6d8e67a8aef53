"""The failure experiment of issue 7: gpufleet's fault handling against two common reactions.

Each arm replays one workload with the same injected faults (one fault stream per seed,
independent of scheduling; sim/faults.py) and differs only in how the cluster reacts:

- gpufleet: the failed GPU is quarantined (a node fault takes the node), the rest of a gang
  that lost a member is evicted after a 30 s grace and placed again at once, repaired
  devices return, and RecentFaults steers new work away from nodes that just failed;
- drain-node: any GPU fault cordons and drains the whole node until the GPU is repaired;
  gangs are not understood, so survivors hang until NCCL's 10-minute timeout;
- unhealthy-forever: NVIDIA's device plugin: the GPU is Unhealthy until its node restarts,
  survivors hang until the timeout.

All arms place pods with the `bestfit` profile's plugins (the default profile when these figures
were measured) in kube-scheduler's order (priority,
then age; the trace has no priorities, so arrival order). The workload's queues are dropped:
queue order is not what this experiment compares, and the queue-aware path costs the replay
ten times more. Jobs checkpoint every `checkpoint_s` and restart from the
last checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpufleet.framework.profile import Profile, build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.plugins.recent_faults import NAME as RECENT_FAULTS
from gpufleet.model import ModelError
from gpufleet.sim import parallel
from gpufleet.sim.faults import POLICIES, FaultModel, FaultSetup
from gpufleet.sim.replay import replay
from gpufleet.sim.workload import Workload

ARMS = tuple(POLICIES)
PER_SEED = ("faults", "gpu_hours_lost_to_faults", "gpu_hours_out_of_service", "jct_mean_s", "wait_mean_s",
            "gpu_utilisation", "finished")


def profile_for(arm: str) -> Profile:
    if arm not in POLICIES:
        raise ModelError("--policies", f"unknown fault policy {arm!r}; known: {', '.join(POLICIES)}")
    settings = dataclasses.replace(builtin("bestfit"), name=arm, queueing=QueueingConfig())
    if not POLICIES[arm].avoid_recent:
        settings = dataclasses.replace(settings, scores=tuple(s for s in settings.scores if s.name != RECENT_FAULTS))
    return build_profile(settings)


@dataclass(frozen=True, slots=True)
class FaultRun:
    arm: str
    seed: int
    summary: dict[str, float]
    gang_restarts: list[float]
    """Seconds from the fault to the next start, for each gang a fault interrupted."""
    restarts: list[float]
    never_restarted: int
    """Jobs a fault interrupted that did not start again before the run ended."""


@dataclass(frozen=True, slots=True)
class Settings:
    model: FaultModel = FaultModel()
    checkpoint_s: float | None = 3600.0


def _one(shared: tuple[Workload, Settings], arm: str, seed: int) -> FaultRun:
    workload, settings = shared
    result = replay(workload, profile_for(arm), seed, checkpoint_s=settings.checkpoint_s,
                    faults=FaultSetup(settings.model, POLICIES[arm]))
    gangs = {i for i, gang in enumerate(result.gang) if gang}
    restarted = {i for i, _ in result.restarts}
    hit = {i for i, r in enumerate(result.records) if r.failed}
    return FaultRun(arm, seed, result.summary(), [d for i, d in result.restarts if i in gangs],
                    [d for _, d in result.restarts], len(hit - restarted))


def run_all(workload: Workload, arms: Sequence[str], seeds: Sequence[int], settings: Settings, workers: int,
            on_done: Callable[[FaultRun], None] | None = None) -> list[FaultRun]:
    for arm in arms:
        profile_for(arm)  # unknown names fail before any work starts
    bare = dataclasses.replace(workload, queues=())
    jobs = [(arm, seed) for seed in seeds for arm in arms]
    runs = parallel.run_jobs(_one, (bare, settings), jobs, workers, on_done)
    return sorted(runs, key=lambda r: (list(arms).index(r.arm), r.seed))


def _mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of a normal 95 % interval of the mean (nan without data)."""
    a = np.array([v for v in values if not math.isnan(v)])
    if not len(a):
        return float("nan"), float("nan")
    half = 1.96 * float(a.std(ddof=1)) / math.sqrt(len(a)) if len(a) > 1 else float("nan")
    return float(a.mean()), half


def table(runs: Sequence[FaultRun]) -> dict[str, dict[str, float]]:
    """Per arm: per-seed KPIs averaged over seeds (with 95 % intervals), restart times pooled."""
    rows: dict[str, dict[str, float]] = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        row: dict[str, float] = {"seeds": float(len(mine))}
        for key in PER_SEED:
            mean, half = _mean_ci([r.summary[key] for r in mine])
            row[key], row[f"{key}_ci95"] = round(mean, 4), round(half, 4)
        gangs = [d for r in mine for d in r.gang_restarts]
        alls = [d for r in mine for d in r.restarts]
        for key, values in (("gang_restart_s", gangs), ("restart_s", alls)):
            mean, half = _mean_ci(values)
            row[f"{key}_mean"], row[f"{key}_ci95"] = round(mean, 1), round(half, 1)
            row[f"{key}_median"] = round(float(np.median(values)), 1) if values else float("nan")
        row["gang_restarts"] = float(len(gangs))
        row["job_restarts"] = float(len(alls))
        row["never_restarted"] = float(sum(r.never_restarted for r in mine))
        rows[arm] = row
    return rows
