"""What a cycle returns: intents for the driver, and a reason for every pod left pending."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from gpufleet.framework.status import Status
from gpufleet.model import Placement, PodUid


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: PodUid
    reason: str


@dataclass(frozen=True, slots=True)
class CycleResult:
    binds: tuple[Placement, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    unschedulable: Mapping[PodUid, Status] = field(default_factory=dict)
