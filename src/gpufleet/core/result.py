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
    preemptor: PodUid | None = None
    """The pending pod this eviction makes room for."""


@dataclass(frozen=True, slots=True)
class CycleResult:
    """`binds` can start now. `nominated` placements start once `evictions` are carried out:
    they hold capacity that the evicted pods free (a driver evicts, waits for the victims to
    be gone, then binds; the simulator does all three at once)."""

    binds: tuple[Placement, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    unschedulable: Mapping[PodUid, Status] = field(default_factory=dict)
    nominated: tuple[Placement, ...] = ()
