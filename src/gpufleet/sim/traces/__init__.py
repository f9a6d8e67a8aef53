"""Readers for public cluster traces and the YAML scenario format.

Every reader turns a file into `sim.workload` values (`NodeInfo`s, `Job`s, a `Workload`) and
rejects a malformed row with a `ModelError` whose `where` names the file, the line and the
field: a trace is never half-read, and a bad row is never skipped silently.

The project commits no trace files (DESIGN.md, "Data"). They live in a directory the user
points at: `--trace-dir` on the command line, else the environment variable
`GPUFLEET_TRACE_DIR`. `trace_dir()` is the one place that resolution happens, so the CLI,
the tests and the benchmarks agree on it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "GPUFLEET_TRACE_DIR"


class TraceDirError(FileNotFoundError):
    """No usable trace directory. A FileNotFoundError, so the CLI reports it in one line."""


def trace_dir(explicit: str | None = None) -> Path:
    """The trace directory: `explicit` if given, else `$GPUFLEET_TRACE_DIR`.

    Raises TraceDirError, saying how to set it, when neither is given or the path is not a
    directory.
    """
    if explicit:
        return _existing(Path(explicit), "--trace-dir")
    from_env = os.environ.get(ENV_VAR, "")
    if from_env:
        return _existing(Path(from_env), ENV_VAR)
    raise TraceDirError(
        f"no trace directory: pass --trace-dir DIR or set {ENV_VAR}=DIR, where DIR holds the "
        "trace folders (alibaba-gpu-v2023-openb/, gavel-philly-derived/), "
        f"e.g. {ENV_VAR}=../shared/traces")


def _existing(path: Path, given_by: str) -> Path:
    if not path.is_dir():
        raise TraceDirError(f"trace directory {str(path)!r} (from {given_by}) is not a directory")
    return path
