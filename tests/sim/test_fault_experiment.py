"""`gpufleet experiment faults` end to end on a small Philly-shaped trace, and its table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.framework.plugins.recent_faults import NAME as RECENT_FAULTS
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.sim import fault_experiment, fault_report
from gpufleet.sim.fault_experiment import FaultRun


def test_the_experiment_writes_every_policy_with_the_same_faults_per_seed(
        small_philly: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plot = tmp_path / "f.json", tmp_path / "f.png"
    code = main(["experiment", "faults", "--trace-dir", str(small_philly), "--json", str(out), "--plot", str(plot),
                 "--seeds", "2", "--workers", "1", "--rate-scale", "20000", "--checkpoint-s", "60"])
    assert code == 0
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == list(fault_experiment.ARMS)
    assert plot.stat().st_size > 10_000
    runs = doc["runs"]
    assert len(runs) == 6
    for seed in (0, 1):
        counts = {r["faults"] for r in runs if r["seed"] == seed}
        assert all(c > 0 for c in counts), "at 20,000x the rate a 16-GPU cluster fails within the trace"
    for row in doc["policies"].values():
        assert row["seeds"] == 2.0
        assert row["gpu_hours_lost_to_faults"] >= 0 and row["gpu_hours_out_of_service"] > 0
    assert doc["meta"]["faults_per_gpu_hour"] == pytest.approx(20_000 * 0.798 * 419 / (16_384 * 54 * 24))
    assert "gang back (min)" in capsys.readouterr().err
    again = tmp_path / "again.png"
    fault_report.write_png(fault_report.runs_from_json(doc), doc["policies"], again, "replotted")
    assert again.stat().st_size > 10_000
    assert [r.gang_restarts for r in fault_report.runs_from_json(doc)] == [r["gang_restarts_s"] for r in runs]


def test_bad_arguments_are_one_line_errors(small_philly: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    for args, message in ((["--policies", "gpufleet,reboot"], "unknown policy reboot"),
                          (["--seeds", "0"], "--seeds must be at least 1"),
                          (["--rate-scale", "-2"], "--rate-scale: fault rate scale must be a non-negative number")):
        code = main(["experiment", "faults", "--trace-dir", str(small_philly), "--json", str(tmp_path / "x.json"),
                     *args])
        assert code == 2
        assert message in capsys.readouterr().err


def test_only_the_gpufleet_arm_scores_down_recent_faults() -> None:
    def scorers(arm: str) -> set[str]:
        return {plugin.name for plugin, _ in fault_experiment.profile_for(arm).scores}
    assert RECENT_FAULTS in scorers("gpufleet")
    assert RECENT_FAULTS not in scorers("drain-node") | scorers("unhealthy-forever")
    assert fault_experiment.profile_for("gpufleet").queueing == QueueingConfig(), "the replay's queue-free path"


def test_the_table_averages_per_seed_kpis_and_pools_restart_times() -> None:
    def run(arm: str, seed: int, lost: float, gangs: list[float]) -> FaultRun:
        summary = {k: 0.0 for k in fault_experiment.PER_SEED} | {"gpu_hours_lost_to_faults": lost}
        return FaultRun(arm, seed, summary, gangs, gangs + [5.0], 1 if seed else 0)
    rows = fault_experiment.table([run("a", 0, 10.0, [30.0]), run("a", 1, 20.0, [30.0, 90.0])])
    row = rows["a"]
    assert row["gpu_hours_lost_to_faults"] == 15.0
    assert row["gpu_hours_lost_to_faults_ci95"] == pytest.approx(1.96 * 7.0711 / 1.4142, rel=1e-3)
    assert row["gang_restart_s_mean"] == 50.0 and row["gang_restarts"] == 3.0
    assert row["gang_restart_s_median"] == 30.0
    assert row["job_restarts"] == 5.0 and row["never_restarted"] == 1.0
