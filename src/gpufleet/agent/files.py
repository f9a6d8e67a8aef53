"""Files the agent writes that others read while it runs (state, NFD features, CDI specs, its checkpoint)."""

from __future__ import annotations

from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader sees
    the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
