"""trace_dir(): explicit argument, then GPUFLEET_TRACE_DIR, else an error saying how to set it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.sim.traces import ENV_VAR, TraceDirError, trace_dir


def test_explicit_directory_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "/nonexistent")
    assert trace_dir(str(tmp_path)) == tmp_path


def test_environment_is_used_without_an_explicit_directory(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert trace_dir(None) == tmp_path


def test_neither_given_says_how_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(TraceDirError, match=f"pass --trace-dir DIR or set {ENV_VAR}=DIR"):
        trace_dir(None)


def test_a_path_that_is_not_a_directory_names_its_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(TraceDirError, match=f"from {ENV_VAR}"):
        trace_dir(None)
