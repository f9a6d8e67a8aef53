"""The FGD packing experiment: inflation rules, conservation, determinism, bucketing."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.sim import fgd_experiment as fe
from gpufleet.sim.default_workload import default_workload
from gpufleet.testing import make_pod


def pods(n: int, gpus: int = 1) -> list:  # type: ignore[type-arg]
    return [make_pod(f"p{i:03d}").gpus(gpus).build() for i in range(n)]


def test_inflation_appends_clones_until_the_next_would_pass_the_target() -> None:
    tasks = fe.task_list(pods(10), seed=1, capacity_milli=10_000, tune=1.3)
    assert len(tasks) == 13  # 13 GPUs <= 13 GPU target; a 14th would pass it
    assert [t.name for t in tasks[:10]] != [f"p{i:03d}" for i in range(10)], "original order is shuffled"
    assert all("-clone-" in t.name for t in tasks[10:])
    assert len({t.uid for t in tasks}) == 13


def test_deflation_deletes_random_tasks_down_to_the_target() -> None:
    tasks = fe.task_list(pods(20), seed=1, capacity_milli=10_000, tune=1.3)
    assert len(tasks) == 13
    assert all("-clone-" not in t.name for t in tasks)


@pytest.mark.parametrize("pods", [[], [make_pod("cpu-only").build()]],
                         ids=["an empty workload", "a workload without GPU tasks"])
def test_a_workload_without_gpu_demand_is_a_clear_error_not_an_endless_loop(pods: list) -> None:  # type: ignore[type-arg]
    from gpufleet.model import ModelError

    with pytest.raises(ModelError, match="no GPU tasks"):
        fe.task_list(pods, seed=1, capacity_milli=10_000)


def test_every_attempt_is_either_placed_or_failed_and_the_run_is_repeatable() -> None:
    w = default_workload(scale=0.05, seed=0, max_pods=1001)
    a = fe.run(w, "fgd", 42)
    b = fe.run(w, "fgd", 42)
    assert a.placed + a.failed == len(a.arrived_pct)
    assert a.placed == b.placed and np.array_equal(a.series["unallocated_gpu_pct"], b.series["unallocated_gpu_pct"])
    assert a.arrived_pct[-1] == pytest.approx(130, abs=2)
    unalloc = a.series["unallocated_gpu_pct"]
    assert np.all(np.diff(unalloc) <= 1e-9), "nothing leaves: allocation never drops"
    assert np.all(a.series["frag_ratio_pct"] <= 100 + 1e-9)


def test_buckets_average_per_integer_arrived_percent_and_fill_gaps_from_neighbours() -> None:
    run = fe.FgdRun("p", 1, np.array([0.2, 0.4, 2.2]), {"m": np.array([1.0, 3.0, 5.0])}, 3, 0)
    out = fe.bucketed(run, "m", last=3)
    assert out[0] == 2.0          # 0.2 and 0.4 round to 0
    assert out[2] == 5.0
    assert out[1] == 3.5          # empty: mean of buckets 0 and 2
    assert out[3] == 5.0          # empty: only bucket 2 has data among its neighbours


@pytest.mark.parametrize("policy", ["fgd", "gpufleet", "bestfit"])
def test_the_experiment_asked_through_dra_claims_places_exactly_as_with_extended_resources(policy: str) -> None:
    """Issue 21 item 7: the same tasks as ResourceClaims (whole GPUs as device counts, shares as
    `share`/`memory` capacity requests on shared devices) give the same series, attempt by attempt."""
    w = default_workload(scale=0.05, seed=0, max_pods=1001)
    plain = fe.run(w, policy, 7)
    claims = fe.run(w, policy, 7, claims=True)
    assert plain.placed > 0 and plain.failed > 0
    assert (claims.placed, claims.failed) == (plain.placed, plain.failed)
    for metric, series in plain.series.items():
        assert np.array_equal(claims.series[metric], series), metric
