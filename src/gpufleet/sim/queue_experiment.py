"""The multi-tenant experiment of issue 4: queueing policies on the Philly-derived trace.

The 15 Philly virtual clusters are 15 queues of equal weight on the trace's 500-GPU
cluster. Every policy places pods with the `bestfit` profile's plugins (BestFit + Topology +
RecentFaults: the default profile's until 2026-11-22; the published figures were measured
with BestFit + Topology, and RecentFaults has no preference without faults; the trace has
whole-GPU jobs only, where the default's fragmentation look-ahead has little to do) and
differs only in its `queueing` section, so the table compares queueing alone:

- fifo: arrival order across all queues;
- priority: priority, then age (non-preemptive, kube-scheduler's queue without preemption);
- drf: hierarchical dominant-resource fair share between queues, no preemption;
- drf-reclaim: the same, and queues below their fair share reclaim from queues above;
- las: Tiresias-like least attained service (two thresholds), preemptive;
- default: the queueing of gpufleet's profiles as shipped (fair share with reclaim).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from gpufleet.framework.profile import Profile, build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ModelError
from gpufleet.sim import parallel
from gpufleet.sim.queue_kpis import QueueSample
from gpufleet.sim.replay import replay
from gpufleet.sim.workload import Workload

QUEUE_POLICIES: dict[str, QueueingConfig | None] = {
    "fifo": QueueingConfig(order="fifo"),
    "priority": QueueingConfig(order="priority"),
    "drf": QueueingConfig(order="fair"),
    "drf-reclaim": QueueingConfig(order="fair", reclaim=True),
    "las": QueueingConfig(order="las", preemption=True),
    "default": None,
}
KPIS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "wait_p99_s", "wait_max_s", "jain_fairness",
        "gpu_utilisation", "gpu_allocation", "gpu_utilisation_while_arriving", "preemptions", "gpu_hours_lost",
        "priority_inversions", "finished", "waiting_at_end")


def profile_for(policy: str) -> Profile:
    if policy not in QUEUE_POLICIES:
        raise ModelError("--policies", f"unknown queueing policy {policy!r}; known: {', '.join(QUEUE_POLICIES)}")
    settings = builtin("bestfit")
    cfg = QUEUE_POLICIES[policy]
    if cfg is not None:
        settings = dataclasses.replace(settings, name=policy, queueing=cfg)
    return build_profile(settings)


@dataclass(frozen=True, slots=True)
class QueueRun:
    policy: str
    summary: dict[str, float]
    samples: list[QueueSample]
    utilisation: list[tuple[float, float]]


def _one(shared: tuple[Workload, float | None], policy: str) -> QueueRun:
    workload, checkpoint_s = shared
    result = replay(workload, profile_for(policy), 0, checkpoint_s=checkpoint_s)
    step = max(1, len(result.utilisation) // 400)
    return QueueRun(policy, result.summary(), result.queue_samples, result.utilisation[::step])


def run_all(workload: Workload, policies: Sequence[str], workers: int,
            on_done: Callable[[QueueRun], None] | None = None, checkpoint_s: float | None = None) -> list[QueueRun]:
    """Replay every policy; with `checkpoint_s` a preempted job restarts from its last checkpoint."""
    for p in policies:
        profile_for(p)  # unknown names fail before any work starts
    runs = parallel.run_jobs(_one, (workload, checkpoint_s), [(p,) for p in policies], workers, on_done)
    return sorted(runs, key=lambda r: list(policies).index(r.policy))


def table(runs: Sequence[QueueRun]) -> dict[str, dict[str, float]]:
    return {r.policy: {k: round(r.summary[k], 4) for k in KPIS} for r in runs}


def dominated(rows: dict[str, dict[str, float]], policy: str) -> list[str]:
    """Policies better than `policy` on all of mean JCT, max wait and Jain's index."""
    me = rows[policy]
    return [name for name, row in rows.items() if name != policy
            and row["jct_mean_s"] < me["jct_mean_s"] and row["wait_max_s"] < me["wait_max_s"]
            and row["jain_fairness"] > me["jain_fairness"]]
