"""Run the FGD experiment for several policies x seeds (in worker processes) and summarise.

The summary is per policy, metric and arrived-% bucket: mean and sd over seeds, the shape
`gpufleet experiment fgd --json` writes.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gpufleet.sim import fgd_experiment
from gpufleet.sim.workload import Workload

Summary = dict[str, dict[str, dict[str, dict[str, float | None]]]]


@dataclass(frozen=True, slots=True)
class RunCurves:
    policy: str
    seed: int
    curves: dict[str, list[float]]
    placed: int
    failed: int


_SHARED: Workload | None = None
"""The workload worker processes inherit through fork (model objects are not picklable)."""


def _one_shared(policy: str, seed: int) -> RunCurves:
    assert _SHARED is not None
    return _one(_SHARED, policy, seed)


def _one(workload: Workload, policy: str, seed: int) -> RunCurves:
    run = fgd_experiment.run(workload, policy, seed)
    curves = {m: fgd_experiment.bucketed(run, m).tolist() for m in fgd_experiment.METRICS}
    return RunCurves(policy, seed, curves, run.placed, run.failed)


def run_all(workload: Workload, policies: Sequence[str], seeds: Sequence[int], workers: int,
            on_done: Callable[[RunCurves], None] | None = None) -> list[RunCurves]:
    jobs = [(p, s) for p in policies for s in seeds]
    results: list[RunCurves] = []
    if workers <= 1:
        for p, s in jobs:
            results.append(_one(workload, p, s))
            if on_done:
                on_done(results[-1])
    else:
        global _SHARED
        _SHARED = workload
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = [pool.submit(_one_shared, p, s) for p, s in jobs]
            for future in as_completed(futures):
                results.append(future.result())
                if on_done:
                    on_done(results[-1])
    results.sort(key=lambda r: (list(policies).index(r.policy), r.seed))
    return results


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
