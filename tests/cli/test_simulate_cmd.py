"""The simulator's CLI: reports are written, and user mistakes are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli import simulate_cmd
from gpufleet.cli.main import build_parser, main

SCENARIOS = Path(__file__).parents[2] / "src" / "gpufleet" / "sim" / "scenarios"


def test_compare_on_a_small_builtin_workload_writes_json_csv_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rep"
    code = main(["compare", "--scale", "0.03", "--seeds", "2", "--workers", "1", "--policies", "bestfit,fgd",
                 "--out", str(out)])
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert set(data["policies"]) == {"bestfit", "fgd"}
    cell = data["policies"]["fgd"]["unallocated_gpu_pct"]["100"]
    assert 0.0 <= cell["mean"] <= 100.0 and cell["sd"] >= 0.0
    assert (out / "results.csv").read_text().startswith("policy,metric,arrived_pct,mean,sd")
    assert "<img src='data:image/png;base64," in (out / "report.html").read_text()


def test_time_mode_replays_and_reports_jct_and_waits(tmp_path: Path) -> None:
    out = tmp_path / "time"
    code = main(["compare", "--mode", "time", "--scale", "0.03", "--tasks", "300", "--seeds", "1", "--workers", "1",
                 "--policies", "fgd", "--out", str(out)])
    assert code == 0
    fgd = json.loads((out / "results.json").read_text())["policies"]["fgd"]
    assert fgd["finished"]["0"]["mean"] + fgd["waiting_at_end"]["0"]["mean"] == 300


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--policy", "nope"], "unknown policy nope"),
    (["simulate", "--nodes", "n.csv"], "--nodes and --pods go together"),
    (["compare", "--seeds", "0", "--scale", "0.03"], "--seeds must be at least 1"),
    (["simulate", "--scale", "9"], "--scale must be in (0, 4]"),
    (["simulate", "--philly"], "--philly has no packing experiment"),
    (["simulate", "--scenario", "/no/such/scenario.yaml"], "/no/such/scenario.yaml: no such file"),
    (["simulate", "--mode", "time", "--scenario", str(SCENARIOS / "mixed-sharing.yaml"), "--time-scale", "0"],
     "--time-scale must be positive"),
    # Flags the run would ignore are refused rather than silently dropped.
    (["simulate", "--variant", "default", "--scenario", "x.yaml"], "choose one workload: --scenario and --variant"),
    (["simulate", "--variant", "default", "--scale", "0.5"], "--scale sizes the built-in default workload; it does "
                                                              "not apply to --variant"),
    (["compare", "--trace-dir", "traces"], "--trace-dir is read only with --variant or --philly"),
    (["simulate", "--time-scale", "10", "--scenario", "x.yaml"], "--time-scale applies only to --mode time"),
    (["simulate", "--mode", "time", "--time-scale", "10"], "--time-scale applies to traces and scenarios"),
    (["simulate", "--load", "3"], "--load applies only to the built-in default workload in --mode time"),
    (["simulate", "--mode", "time", "--philly", "--tasks", "50"], "--tasks applies only to the built-in default"),
], ids=["an unknown policy is named", "a node list needs a pod list", "zero seeds is refused",
        "an absurd scale is refused", "philly needs time mode", "a missing file is named",
        "a zero time scale is refused", "two workloads", "scale with a trace", "trace dir without a trace",
        "time scale in packing mode", "time scale for the built-in default", "load in packing mode",
        "tasks with a trace"])
def test_user_mistakes_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_the_fgd_experiment_has_no_time_mode_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "fgd", "--json", "x.json", "--mode", "time"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --mode time" in capsys.readouterr().err


def test_a_malformed_trace_row_names_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,1000,1024,2,500\n")
    assert main(["simulate", "--nodes", str(nodes), "--pods", str(pods)]) == 2
    err = capsys.readouterr().err
    assert "pods.csv:2" in err and "Traceback" not in err


def test_a_user_profile_runs_beside_the_named_policies(tmp_path: Path) -> None:
    profile = tmp_path / "mine.yaml"
    profile.write_text("profiles:\n  - plugins:\n      score:\n        enabled: [{name: MostAllocated}]\n")
    out = tmp_path / "rep"
    assert main(["compare", "--scale", "0.03", "--seeds", "1", "--workers", "1", "--policies", "fgd",
                 "--profile", str(profile), "--out", str(out)]) == 0
    assert set(json.loads((out / "results.json").read_text())["policies"]) == {"fgd", f"file:{profile}"}


def test_a_bad_profile_is_a_one_line_error_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("profiles:\n  - plugins:\n      score:\n        enabled: [{name: NoSuchScorer}]\n")
    assert main(["simulate", "--scale", "0.03", "--profile", str(profile)]) == 2
    err = capsys.readouterr().err
    assert "profiles[0].plugins.score.enabled[0].name" in err and "NoSuchScorer" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["mixed-sharing", "gangs-and-queues", "fragmentation"])
def test_every_shipped_scenario_replays_in_time_mode(name: str) -> None:
    scenario = SCENARIOS / f"{name}.yaml"
    assert main(["simulate", "--mode", "time", "--scenario", str(scenario), "--policy", "gpufleet"]) == 0


@pytest.mark.parametrize("mode, scenario", [("time", "mixed-sharing"), ("time", "gangs-and-queues"),
                                            ("packing", "fragmentation")])
def test_claims_flag_gives_the_same_results_as_extended_resources(tmp_path: Path, mode: str, scenario: str) -> None:
    results = []
    for extra in ([], ["--claims"]):
        out = tmp_path / f"rep{len(extra)}"
        assert main(["compare", "--mode", mode, "--scenario", str(SCENARIOS / f"{scenario}.yaml"), "--seeds", "1",
                     "--workers", "1", "--policies", "bestfit,default", "--out", str(out), *extra]) == 0
        results.append(json.loads((out / "results.json").read_text())["policies"])
    assert results[0] == results[1]
    args = build_parser().parse_args(["compare", "--mode", mode, "--scenario", str(SCENARIOS / f"{scenario}.yaml"),
                                      "--claims"])
    assert simulate_cmd.time_workload(args)(42).claims and simulate_cmd.load_workload(args).claims
