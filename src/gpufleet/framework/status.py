"""Plugin results as values (Kubernetes `framework.Status`), never exceptions.

| code | meaning | what the driver does |
|---|---|---|
| SUCCESS | the pod may proceed | - |
| UNSCHEDULABLE | no node fits *now*; may fit after others leave or after preemption | retry later; preemption may help |
| UNRESOLVABLE | cannot fit in this cluster as it is (e.g. GPU model absent) | retry only when nodes change; preemption cannot help |
| ERROR | a bug or an internal inconsistency | log, retry with backoff |
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Code(str, Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


OK = Status()


def unschedulable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reasons, plugin)


def unresolvable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNRESOLVABLE, reasons, plugin)
