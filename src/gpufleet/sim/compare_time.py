"""Time-driven comparison: replay one workload under several policies x seeds.

Seeds vary the built-in workload (arrivals, durations, order) and the Random policy; a
trace replay is deterministic otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.sim import parallel
from gpufleet.sim.policies import profile_for
from gpufleet.sim.queue_kpis import QueueSample
from gpufleet.sim.replay import replay
from gpufleet.sim.workload import Workload

WorkloadFor = Callable[[int], Workload]


@dataclass(frozen=True, slots=True)
class ReplayRun:
    policy: str
    seed: int
    summary: dict[str, float]
    utilisation: list[tuple[float, float]]
    samples: list[QueueSample]
    """Queue shares over time (empty without queues)."""


def _one(make: WorkloadFor, policy: str, seed: int) -> ReplayRun:
    workload = make(seed)
    tasks = typical_tasks([p for j in workload.jobs for p in j.pods])
    result = replay(workload, profile_for(policy, tasks), seed)
    step = max(1, len(result.utilisation) // 400)
    return ReplayRun(policy, seed, result.summary(), result.utilisation[::step], result.queue_samples)


def run_all(make: WorkloadFor, policies: Sequence[str], seeds: Sequence[int], workers: int,
            on_done: Callable[[ReplayRun], None] | None = None) -> list[ReplayRun]:
    results = parallel.run_jobs(_one, make, [(p, s) for p in policies for s in seeds], workers, on_done)
    return sorted(results, key=lambda r: (list(policies).index(r.policy), r.seed))


def summarise(results: Sequence[ReplayRun]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for policy in dict.fromkeys(r.policy for r in results):
        runs = [r for r in results if r.policy == policy]
        out[policy] = {}
        for key in runs[0].summary:
            values = np.array([r.summary[key] for r in runs])
            out[policy][key] = {"mean": round(float(np.mean(values)), 4),
                                "sd": round(float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, 4)}
    return out
