"""Run the FGD experiment for several policies x seeds (in worker processes) and summarise.

The summary is per policy, metric and arrived-% bucket: mean and sd over seeds, the shape
`gpufleet experiment fgd --json` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpufleet.sim import fgd_experiment, parallel
from gpufleet.sim.workload import Workload

Summary = dict[str, dict[str, dict[str, dict[str, float | None]]]]


@dataclass(frozen=True, slots=True)
class RunCurves:
    policy: str
    seed: int
    curves: dict[str, list[float]]
    placed: int
    failed: int


def _one(workload: Workload, policy: str, seed: int) -> RunCurves:
    run = fgd_experiment.run(workload, policy, seed)
    curves = {m: fgd_experiment.bucketed(run, m).tolist() for m in fgd_experiment.METRICS}
    return RunCurves(policy, seed, curves, run.placed, run.failed)


def run_all(workload: Workload, policies: Sequence[str], seeds: Sequence[int], workers: int,
            on_done: Callable[[RunCurves], None] | None = None) -> list[RunCurves]:
    results = parallel.run_jobs(_one, workload, [(p, s) for p in policies for s in seeds], workers, on_done)
    return sorted(results, key=lambda r: (list(policies).index(r.policy), r.seed))


def _mean_sd(column: np.ndarray) -> dict[str, float | None]:
    """Mean and sample sd over seeds; None where no seed reached the bucket (strict JSON has no NaN)."""
    seen = column[~np.isnan(column)]
    if len(seen) == 0:
        return {"mean": None, "sd": None}
    sd = float(np.std(seen, ddof=1)) if len(seen) > 1 else 0.0
    return {"mean": round(float(np.mean(seen)), 4), "sd": round(sd, 4)}


def summarise(results: Sequence[RunCurves]) -> Summary:
    out: Summary = {}
    for policy in dict.fromkeys(r.policy for r in results):
        runs = [r for r in results if r.policy == policy]
        out[policy] = {}
        for metric in fgd_experiment.METRICS:
            values = np.array([r.curves[metric] for r in runs])
            out[policy][metric] = {str(b): _mean_sd(values[:, b]) for b in range(values.shape[1])}
    return out
