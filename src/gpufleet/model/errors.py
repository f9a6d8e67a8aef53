"""Errors raised while building model objects from user input.

A `ModelError` always names *where* the problem is (a pod, a node, a field) so that the
edge that caught it (trace reader, CLI, live scheduler) can report it without a traceback.
"""

from __future__ import annotations


class ModelError(ValueError):
    """Invalid user input for a model object; `where` names the object and field."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
