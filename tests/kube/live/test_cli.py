"""`gpufleet scheduler` and `gpufleet snapshot`: mistakes are one line, exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.scheduler_cmd import main

PROFILE = Path(__file__).resolve().parents[3] / "src/gpufleet/framework/profiles/default.yaml"


@pytest.mark.parametrize(("argv", "message"), [
    (["scheduler", "--config", "/nope.yaml"], "gpufleet scheduler: error: /nope.yaml: no such file"),
    (["scheduler", "--config", str(PROFILE), "--leader-elect", "--lease-duration", "5"],
     "leader election needs 0 < retry period < renew deadline < lease duration, got 2.0 / 10.0 / 5.0 s"),
    (["scheduler", "--config", str(PROFILE), "--kubeconfig", "/nope"], "kubeconfig /nope: no such file"),
    (["snapshot", "replay", "/nope.json"], "gpufleet snapshot replay: error: /nope.json: no such file"),
], ids=["a missing profile", "lease settings out of order", "a missing kubeconfig", "a missing dump"])
def test_mistakes_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_bad_profile_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("profiles:\n  - schedulerName: gpufleet\n    plugins:\n      score: {enabled: [{name: Nope}]}\n")
    assert main(["scheduler", "--config", str(bad)]) == 2
    assert "unknown plugin 'Nope'" in capsys.readouterr().err
