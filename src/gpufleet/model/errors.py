"""Errors raised while building model objects from user input.

A `ModelError` always names *where* the problem is (a pod, a node, a field) so that the
edge that caught it (trace reader, CLI, live scheduler) can report it without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class ModelError(ValueError):
    """Invalid user input for a model object; `where` names the object and field."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def read_text(path: Path) -> str:
    """The UTF-8 text of a file the user named; a binary or mis-encoded file is a ModelError
    naming the line and column of the first bad byte (OSErrors pass through unchanged)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ModelError(f"{path}:{line}", f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); "
                                           "is it the right file?") from None
