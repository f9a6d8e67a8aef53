"""The autoscaling experiment on a tiny day: every arm finishes every job and pays for at least
what it allocates; the fixed cluster is the planner's peak; reports are written."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from gpufleet.model import ModelError
from gpufleet.sim import autoscale_report
from gpufleet.sim.autoscale_experiment import ArmSpec, Experiment, fixed_cost_per_hour, run_arm, run_experiment
from gpufleet.sim.diurnal import DiurnalSettings
from gpufleet.sim.workload import Job
from gpufleet.testing import make_pod

POOL = [Job((make_pod("whole").cpu(8000).mem_mib(16_384).gpus(1).build(),), 0.0, 1200.0,
            attrs=MappingProxyType({"pod_phase": "Running"})),
        Job((make_pod("frac").cpu(4000).mem_mib(8192).fraction(460).build(),), 0.0, 900.0,
            attrs=MappingProxyType({"pod_phase": "Running"})),
        Job((make_pod("multi").cpu(32_000).mem_mib(131_072).gpus(4).build(),), 0.0, 1800.0,
            attrs=MappingProxyType({"pod_phase": "Running"}))]
TINY = DiurnalSettings(jobs_per_day=60, gang_share=1.0)


@pytest.fixture(scope="module")
def experiment() -> Experiment:
    return run_experiment(POOL, seeds=[0], curve=(0.0,), diurnal=TINY, workers=1)


def test_every_arm_finishes_every_job_and_pays_at_least_what_it_allocates(experiment: Experiment) -> None:
    assert {r.spec.arm for r in experiment.runs} == {"fixed", "karpenter", "gpufleet"}
    for r in experiment.runs:
        s = r.summary
        assert s["jobs"] > 40 and s["finished"] == s["jobs"], r.spec
        assert s["gpu_hours_paid"] >= s["gpu_hours_allocated"] > 0, r.spec
        assert s["idle_gpu_hours"] == pytest.approx(s["gpu_hours_paid"] - s["gpu_hours_allocated"])
        assert s["cost"] > 0 and s["wait_p95_s"] >= 0


def test_all_arms_allocate_the_same_work(experiment: Experiment) -> None:
    # No arm evicts (idle-only consolidation): each job's GPU-time is allocated exactly once.
    allocated = {r.spec.arm: round(r.summary["gpu_hours_allocated"], 6) for r in experiment.of("gpufleet") +
                 experiment.of("karpenter") + experiment.of("fixed")}
    assert len(set(allocated.values())) == 1, allocated


def test_the_fixed_cluster_is_the_planners_peak_and_waits_least(experiment: Experiment) -> None:
    planner, = experiment.of("gpufleet")
    fixed, = experiment.of("fixed")
    assert dict(fixed.spec.fixed) == {"l40s-x1": planner.peak_nodes.get("l40s-x1", 0),
                                      "l40s-x4": planner.peak_nodes.get("l40s-x4", 0),
                                      "h100-x8": planner.peak_nodes.get("h100-x8", 0)}
    assert fixed_cost_per_hour(fixed.spec.fixed) > 0
    assert fixed.summary["gpu_hours_paid"] > planner.summary["gpu_hours_paid"]
    assert fixed.summary["wait_p95_s"] <= planner.summary["wait_p95_s"]


def test_the_curve_has_a_row_per_knob_value_for_each_autoscaler(experiment: Experiment) -> None:
    curve = experiment.curve_rows()
    assert set(curve) == {"karpenter", "gpufleet"}
    assert [row["consolidate_after_s"] for row in curve["gpufleet"]] == [0.0, 60.0]
    # Removing empty nodes at once can only pay for fewer node-hours than waiting a minute.
    assert curve["karpenter"][0]["gpu_hours_paid"] <= curve["karpenter"][1]["gpu_hours_paid"]


def test_the_series_samples_paid_gpus_at_least_allocated(experiment: Experiment) -> None:
    run, = experiment.of("karpenter")
    assert run.series and all(paid >= allocated for _, paid, allocated in run.series)
    assert run.summary["peak_gpus"] == max(p for _, p, _ in run.series)


def test_reports_are_written(experiment: Experiment, tmp_path: Path) -> None:
    paths = autoscale_report.write_plots(experiment, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)
    table = autoscale_report.markdown_table(experiment.table())
    assert table.count("\n") == 4 and "| gpufleet |" in table
    data = autoscale_report.to_json(experiment, {"seconds": 1.0})
    assert set(data["arms"]) == {"fixed", "karpenter", "gpufleet"} and len(data["runs"]) == len(experiment.runs)


def test_the_underutilized_planner_may_move_pods_and_still_finishes_every_job() -> None:
    r = run_arm(POOL, ArmSpec("gpufleet-underutilized", 0, 0.0), DiurnalSettings(jobs_per_day=20, gang_share=1.0))
    assert r.summary["jobs"] > 10
    assert r.summary["finished"] == r.summary["jobs"]
    assert r.summary["gpu_hours_paid"] >= r.summary["gpu_hours_allocated"]


def test_a_run_without_an_autoscaler_curve_writes_no_empty_tradeoff_plot(tmp_path: Path) -> None:
    exp = run_experiment(POOL, seeds=[0], arms=["gpufleet-underutilized"], curve=(),
                         diurnal=DiurnalSettings(jobs_per_day=20, gang_share=1.0), workers=1)
    assert not any(exp.curve_rows().values())
    paths = autoscale_report.write_plots(exp, tmp_path)
    assert [p.name for p in paths] == ["autoscale-fleet.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autoscale-fleet.png"]


def test_unknown_arms_are_refused() -> None:
    with pytest.raises(ModelError, match="unknown arm 'cluster-autoscaler'"):
        run_experiment(POOL, seeds=[0], arms=["cluster-autoscaler"], diurnal=TINY)


def test_the_command_runs_a_small_day_and_writes_its_reports(trace_root: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from gpufleet.cli.main import main

    out = tmp_path / "out"
    code = main(["experiment", "autoscale", "--trace-dir", str(trace_root), "--seeds", "1", "--jobs-per-day", "80",
                 "--curve", "none", "--workers", "1", "--json", str(tmp_path / "a.json"), "--out", str(out)])
    assert code == 0
    assert {p.name for p in out.iterdir()} == {"autoscale-fleet.png", "autoscale-tradeoff.png", "autoscale-table.md"}
    assert "| karpenter |" in (out / "autoscale-table.md").read_text()
    assert main(["experiment", "autoscale", "--trace-dir", str(trace_root), "--arms", "nope"]) == 2
    assert "unknown arm nope" in capsys.readouterr().err
