"""Fixtures for the trace-reader and experiment tests.

Tests that need a real trace take `trace_root`; it skips them, with the reason shown by
`pytest -ra`, when GPUFLEET_TRACE_DIR is unset (CI points it at ../shared/traces).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.sim.traces import ENV_VAR, philly, trace_dir

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


THROUGHPUTS = {"v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 1.0},
                        "('ResNet-18 (batch size 32)', 8)": {"null": 8.0}}}


@pytest.fixture
def small_philly(write_file: WriteFile) -> Path:
    """A Philly-shaped trace directory: three VCs of six jobs each (8, 1 and 16 GPUs) on 16 V100s."""
    root = write_file(f"{philly.SUBDIR}/{philly.THROUGHPUTS}", json.dumps(THROUGHPUTS)).parent.parent
    write_file(f"{philly.SUBDIR}/{philly.CLUSTER_SPECS}", json.dumps({"philly": ["16:0:0"]}))
    for vc, gpus, steps in (("aaa", 8, 8000), ("bbb", 1, 500), ("ccc", 16, 16000)):
        rows = ["\t".join(["ResNet-18 (batch size 32)", "python3 train.py", "-n", "1", str(steps), f"{t * 60}.0",
                           str(gpus)]) for t in range(6)]
        write_file(f"{philly.SUBDIR}/{philly.TRACES}/{vc}.trace", "\n".join(rows) + "\n")
    return root
