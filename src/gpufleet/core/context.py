"""`QueueContext`: what the driver knows across cycles and the queue-aware core needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from gpufleet.model import PodUid, QueueTree


def _empty() -> Mapping[str, float]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class QueueContext:
    """What the driver knows across cycles and the core needs: queues and history."""

    tree: QueueTree = field(default_factory=lambda: QueueTree.build(()))
    usage_share: Mapping[str, float] = field(default_factory=_empty)
    """Per leaf queue: dominant share of the cluster used, decayed with the driver's half-life
    (fair order only; missing = use current allocation)."""
    attained_gpu_s: Mapping[PodUid, float] = field(default_factory=lambda: MappingProxyType({}))
    """Per pod: GPU-seconds its job has received so far (las order)."""
    evicted_at: Mapping[PodUid, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """Per pod: when it was evicted before (the per-hour preemption cap)."""
