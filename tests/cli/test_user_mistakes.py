"""User mistakes found by a CLI audit: each is one line on stderr naming the problem and where, exit 2.

Before the fixes these printed a traceback (a folder or a binary file where a file was
expected, a port out of range, zero binder threads), accepted nonsense silently (nan and inf
flags, a negative seed, zero workers, an unknown model in gpu_spec, a nan weight), or failed
only after a long run (an output path that cannot be written).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.main import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
              "scheduled_time\n")


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *messages: str) -> str:
    with_exit = _exit_code(argv)
    err = capsys.readouterr().err
    assert with_exit == 2, err
    assert "Traceback" not in err
    for message in messages:
        assert message in err
    return err


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "folder").mkdir()
    (tmp_path / "binary.yaml").write_bytes(b"name: x\n\xff\xfe\n")
    (tmp_path / "a-file").write_text("x")
    return tmp_path


@pytest.mark.parametrize("flag", ["--pods", "--scenario", "--profile"])
def test_a_folder_where_a_file_belongs_is_named(flag: str, files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--nodes", str(files / "nodes.csv")] if flag == "--pods" else []
    _fails(["simulate", *extra, flag, str(files / "folder")], capsys, f"{files / 'folder'}: is a directory")


@pytest.mark.parametrize("argv", [
    ["simulate", "--scenario", "{f}"],
    ["simulate", "--profile", "{f}"],
    ["scheduler", "--config", "{f}"],
    ["snapshot", "replay", "{f}"],
    ["agent", "inventory", "--fake", "{f}"],
    ["agent", "labels", "--fake", "a100-mig", "--config", "{f}"],
], ids=["scenario", "profile", "scheduler config", "snapshot", "agent fixture", "agent config"])
def test_a_binary_file_is_named_with_its_line(argv: list[str], files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = files / "binary.yaml"
    _fails([a.replace("{f}", str(path)) for a in argv], capsys, f"{path}:2", "is not UTF-8 text (byte 0xff at column 1)")


def test_a_binary_trace_is_named_with_its_line(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = files / "pods.csv"
    pods.write_bytes(POD_HEADER.encode() + b"p0,1000,1024,1,1000,,LS,Running,0,100,0\np1,\xe9\n")
    _fails(["simulate", "--nodes", str(files / "nodes.csv"), "--pods", str(pods)], capsys,
           f"{pods}:3: is not UTF-8 text")


def test_an_unknown_gpu_model_in_gpu_spec_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = files / "pods.csv"
    pods.write_text(POD_HEADER + "p0,1000,1024,1,1000,A100,LS,Running,0,100,0\n")
    _fails(["simulate", "--nodes", str(files / "nodes.csv"), "--pods", str(pods)], capsys,
           f"{pods}:2: gpu_spec: unknown GPU model 'A100'; known: A10, G2")


@pytest.mark.parametrize("text, message", [
    ("profiles: [{plugins: {score: {enabled: [{name: FragAware, weight: .nan}]}}}]",
     "enabled[0].weight: must be a non-negative number, got nan"),
    ("profiles: [{plugins: {score: {enabled: [{name: FragAware, weight: .inf}]}}}]",
     "enabled[0].weight: must be a non-negative number, got inf"),
    ("profiles: [{pluginConfig: [{name: FragAware, args: {tightnessWeight: .nan}}]}]",
     "pluginConfig[0].args.tightnessWeight: expected a finite number, got nan"),
    ("", "the file holds no YAML document"),
], ids=["nan weight", "inf weight", "nan plugin argument", "empty file"])
def test_a_profile_with_a_non_finite_number_is_refused(text: str, message: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(text)
    _fails(["simulate", "--scale", "0.03", "--profile", str(profile)], capsys, f"{profile}: ", message)


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--seed", "-1"], "argument --seed: a seed is 0 or more, got -1"),
    (["snapshot", "replay", "dump.json", "--seed", "-3"], "argument --seed: a seed is 0 or more, got -3"),
    (["dev-cluster", "--seed", "-1"], "argument --seed: a seed is 0 or more, got -1"),
    (["simulate", "--mode", "time", "--time-scale", "nan"], "argument --time-scale: expected a finite number, got 'nan'"),
    (["simulate", "--scale", "inf"], "argument --scale: expected a finite number, got 'inf'"),
    (["compare", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
    (["experiment", "fgd", "--json", "x.json", "--workers", "-2"], "argument --workers: must be at least 1, got -2"),
    (["experiment", "queues", "--json", "x.json", "--checkpoint-s", "nan"],
     "argument --checkpoint-s: expected a finite number, got 'nan'"),
    (["experiment", "queues", "--json", "x.json", "--time-scale", "nan"],
     "argument --time-scale: expected a finite number, got 'nan'"),
    (["experiment", "faults", "--json", "x.json", "--rate-scale", "inf"],
     "argument --rate-scale: expected a finite number, got 'inf'"),
    (["experiment", "autoscale", "--jobs-per-day", "inf"], "argument --jobs-per-day: expected a finite number"),
    (["experiment", "autoscale", "--curve", "60,nan"], "--curve values must be finite and non-negative"),
    (["experiment", "autoscale", "--arms", "gpufleet-underutilized", "--curve", "0,300"],
     "--curve draws the trade-off of the karpenter and gpufleet arms, and --arms gpufleet-underutilized has neither"),
    (["scheduler", "--config", "p.yaml", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
    (["scheduler", "--config", "p.yaml", "--burst", "0"], "argument --burst: must be at least 1, got 0"),
    (["scheduler", "--config", "p.yaml", "--http-port", "99999"], "argument --http-port: a port is 0..65535, got 99999"),
    (["scheduler", "--config", "p.yaml", "--qps", "nan"], "argument --qps: expected a finite number, got 'nan'"),
    (["agent", "run", "--metrics-port", "-5"], "argument --metrics-port: a port is 0..65535, got -5"),
    (["dev-cluster", "--port", "70000"], "argument --port: a port is 0..65535, got 70000"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_nonsense_flag_values_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(argv, capsys, message)


@pytest.mark.parametrize("flag, value, message", [
    ("--qps", "-1", "--qps must be 0 (unlimited) or more, got -1"),
    ("--api-timeout", "0", "--api-timeout must be a positive number of seconds, got 0"),
])
def test_scheduler_numbers_are_checked_before_connecting(flag: str, value: str, message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("profiles: [{schedulerName: gpufleet}]\n")
    _fails(["scheduler", "--config", str(profile), "--kubeconfig", str(tmp_path / "absent"), flag, value], capsys,
           message)


@pytest.mark.parametrize("argv, message", [
    (["compare", "--scale", "0.03", "--seeds", "1", "--policies", "fgd", "--out", "{a-file}"],
     "--out: {a-file} exists and is not a directory"),
    (["experiment", "fgd", "--scale", "0.03", "--seeds", "1", "--policies", "fgd", "--json", "{folder}"],
     "--json {folder}: is a directory; give a file name"),
    (["experiment", "fgd", "--scale", "0.03", "--seeds", "1", "--policies", "fgd", "--json", "{a-file}/x.json"],
     "--json: {a-file} exists and is not a directory"),
    (["experiment", "faults", "--json", "{folder}"], "--json {folder}: is a directory"),
    (["experiment", "queues", "--json", "{folder}"], "--json {folder}: is a directory"),
    (["experiment", "autoscale", "--json", "{folder}"], "--json {folder}: is a directory"),
], ids=["compare --out", "fgd --json folder", "fgd --json under a file", "faults", "queues", "autoscale"])
def test_an_unwritable_output_fails_before_the_run(argv: list[str], message: str, files: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    def fill(text: str) -> str:
        return text.replace("{a-file}", str(files / "a-file")).replace("{folder}", str(files / "folder"))
    # No trace directory is given: the output check must come first, before any trace is read.
    err = _fails([fill(a) for a in argv], capsys, fill(message))
    assert "no trace directory" not in err


def test_an_empty_agent_config_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["agent", "labels", "--fake", "a100-mig", "--config", str(tmp_path)], capsys,
           f"config {tmp_path}: is a directory holding no config files")


def test_agent_yaml_syntax_errors_are_one_line_with_their_place(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("version: v1\nflags: [\n")
    err = _fails(["agent", "labels", "--fake", "a100-mig", "--config", str(config)], capsys,
                 "config node.yaml: is not valid YAML: line 3, column 1:")
    assert "<unicode string>" not in err and len(err.strip().splitlines()) == 1


def test_a_fixture_that_is_not_a_mapping_says_what_it_needs(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    fixture = tmp_path / "gpus.yaml"
    fixture.write_text("- a\n")
    _fails(["agent", "inventory", "--fake", str(fixture)], capsys,
           f"fixture {fixture}: expected a mapping with system, board and gpus")


def test_our_errors_name_the_whole_command_as_argparse_does(capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(["experiment", "autoscale", "--arms", "gpufleet-underutilized", "--curve", "0"], capsys)
    assert err.startswith("gpufleet experiment autoscale: error: --curve draws the trade-off"), err
    err = _fails(["experiment", "autoscale", "--arms", "nope"], capsys)
    assert err.startswith("gpufleet experiment autoscale: error: unknown arm nope"), err
