"""`python -m gpufleet` is the `gpufleet` command, and its help names every part."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_runs_the_cli_and_its_help_names_every_part() -> None:
    done = subprocess.run([sys.executable, "-m", "gpufleet", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    head = " ".join(done.stdout.split("positional arguments")[0].split())
    for part in ("live scheduler", "node agent", "trace simulator", "autoscaling planner", "dashboard"):
        assert part in head
    assert all(cmd in done.stdout for cmd in ("scheduler", "agent", "simulate", "experiment", "dev-cluster", "dashboard"))


def test_python_dash_m_passes_the_exit_status_of_a_user_mistake() -> None:
    done = subprocess.run([sys.executable, "-m", "gpufleet", "simulate", "--no-such-flag"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
