"""Fixtures for the trace-reader tests.

Tests that need a real trace take `trace_root`; it skips them, with the reason shown by
`pytest -ra`, when GPUFLEET_TRACE_DIR is unset (CI points it at ../shared/traces).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.sim.traces import ENV_VAR, trace_dir

WriteFile = Callable[[str, str], Path]


@pytest.fixture(scope="session")
def trace_root() -> Path:
    if not os.environ.get(ENV_VAR):
        pytest.skip(f"{ENV_VAR} is not set; run with {ENV_VAR}=../shared/traces to test the real traces")
    return trace_dir(None)


@pytest.fixture
def write_file(tmp_path: Path) -> WriteFile:
    """write_file("pods.csv", text) -> the path of a small handwritten fixture file."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return write
