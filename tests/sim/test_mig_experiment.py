"""`gpufleet experiment mig` (sim/mig_experiment.py): workloads, policies, the KPIs written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.sim import mig_experiment as mx
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_pod

DELAY = 30.0


@pytest.mark.parametrize(("milli", "profile"), [(50, "1g.10gb"), (125, "1g.10gb"), (140, "1g.20gb"),
                                                (230, "2g.20gb"), (270, "3g.40gb"), (500, "4g.40gb"),
                                                (590, "7g.80gb"), (999, "7g.80gb")])
def test_a_share_maps_to_the_smallest_profile_covering_compute_and_memory(milli: int, profile: str) -> None:
    assert mx.profile_for(milli) == profile


def test_the_invented_mix_shifts_from_small_by_day_to_large_by_night() -> None:
    day, night = mx.day_weights(14.0), mx.day_weights(2.0)
    assert day["7g.80gb"] == 0 and night["1g.10gb"] < day["1g.10gb"] and night["7g.80gb"] > 0


def test_demand_driven_runs_every_job_of_a_small_mix_without_interrupting_any() -> None:
    w = mx.diurnal(1, 0.8, days=0.1, seed=3)
    run = mx.run_one(({"d": w}, DELAY), "d", "demand", (mx.BALANCED,))
    static = mx.run_one(({"d": w}, DELAY), "d", "balanced", (mx.BALANCED,))
    assert run.row["never_started"] == 0 and (run.row["reconfigurations"] or 0) > 0
    assert static.row["reconfigurations"] == 0
    demand, balanced = run.row["unallocated_gpu_pct"], static.row["unallocated_gpu_pct"]
    assert demand is not None and balanced is not None and demand < balanced


def test_the_experiment_writes_the_kpis_per_workload_and_policy(tmp_path: Path) -> None:
    out = tmp_path / "mig.json"
    code = main(["experiment", "mig", "--workloads", "diurnal", "--diurnal-nodes", "1", "--days", "0.05",
                 "--workers", "1", "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())["workloads"]["diurnal"]
    assert list(rows) == list(mx.POLICIES)
    for row in rows.values():
        assert {"unallocated_gpu_pct", "wait_p95_s", "reconfigurations"} <= set(row)
    assert rows["all-1g"]["layout"] == {"+".join(["1g.10gb"] * 7): 8}


def test_openb_fractional_tasks_become_mig_pods(trace_root: Path) -> None:
    from gpufleet.sim.traces import openb
    base = openb.load(*openb.variant_files(trace_root))
    w = mx.openb_mig(base, 2, 0.85, jobs=100)
    assert len(w.jobs) == 100 and len(w.nodes) == 2
    assert {n.gpus[0].model for n in w.nodes} == {"A100-80GB", "H100-80GB"}
    assert all(j.pods[0].gpu.mig_profile == j.attrs["profile"] for j in w.jobs)


def _jobs(*spec: tuple[str, int]) -> Workload:
    """One node; `n` jobs of each profile, all running over the same 100 s window."""
    jobs = [Job((make_pod(f"{p}-{k}").mig(p).build(),), float(k % 2) * 100, 100.0) for p, n in spec for k in range(n)]
    return Workload("t", mx.cluster(1, ("H100-80GB",), mx.BALANCED), tuple(sorted(jobs, key=lambda j: j.arrival_s)))


def test_the_static_mix_carves_the_profiles_in_proportion_to_their_mean_demand() -> None:
    mix = mx.static_mix(_jobs(("7g.80gb", 4), ("1g.10gb", 28)))  # 4 x 7g and 28 x 1g running on average
    assert sorted(mix) == [("1g.10gb",) * 7] * 4 + [("7g.80gb",)] * 4
    only_3g = mx.static_mix(_jobs(("3g.40gb", 20)))
    assert all(layout.count("3g.40gb") == 2 for layout in only_3g)
