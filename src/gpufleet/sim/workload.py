"""What a simulation replays: a cluster (nodes) and jobs that arrive over time.

Trace readers (`sim.traces.*`), the built-in default generator and the YAML scenario
loader all produce a `Workload`, so every experiment runs on the same shape of input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from gpufleet.model import NodeInfo, PodGroup, PodSpec, Queue


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work: a single pod, or a gang of pods with their PodGroup.

    `duration_s` None means the job never finishes (the FGD packing experiment has no
    departures). `source` names where the job came from ("file.csv:123") for messages.
    `attrs` keeps trace columns the scheduler does not read (QoS class, job type, ...).
    """

    pods: tuple[PodSpec, ...]
    arrival_s: float = 0.0
    duration_s: float | None = None
    group: PodGroup | None = None
    source: str = ""
    attrs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def gpu_milli(self) -> int:
        return sum(p.gpu.total_milli for p in self.pods)


@dataclass(frozen=True, slots=True)
class Workload:
    """A named cluster plus jobs ordered by arrival (ties keep file order)."""

    name: str
    nodes: tuple[NodeInfo, ...]
    jobs: tuple[Job, ...]
    description: str = ""
    queues: tuple[Queue, ...] = ()
    """The cluster's queues (pods name theirs in `PodSpec.queue`); empty = one default queue."""
    claims: bool = False
    """Whole-GPU and fractional requests go through DRA ResourceClaims when replayed or packed
    (`sim.claims`); the pods keep their extended resources here, so every reader sees what they ask."""

    @property
    def gpu_capacity_milli(self) -> int:
        return sum(len(n.gpus) for n in self.nodes) * 1000
