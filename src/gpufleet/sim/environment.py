"""One clock and a heap of events (SimPy's core, reduced to what the simulator needs).

Events at the same time pop in the order they were scheduled (a sequence number breaks
ties), so a run is deterministic for a seed. The environment never reads the wall clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Kind(str, Enum):
    ARRIVAL = "arrival"
    COMPLETION = "completion"
    FAULT = "fault"
    """A device or node fails (payload: sim.faults.InjectedFault)."""
    RELEASE = "release"
    """A job hit by a fault gives its pods back (payload: job index, start of the run it ends)."""
    REPAIR = "repair"
    """Failed capacity returns to service (payload: core.faults.Fault)."""
    NODE_ADDED = "node_added"
    """A node requested by the autoscaler joins (payload: sim.scaling.NewNode)."""
    SCALE_TICK = "scale_tick"
    """The autoscaler looks at the cluster."""
    MIG_READY = "mig_ready"
    """A MIG change's new instances come up (payload: sim.mig_reconfig.MigReady)."""


@dataclass(order=True, frozen=True, slots=True)
class Event:
    time: float
    seq: int
    kind: Kind = field(compare=False)
    payload: Any = field(compare=False, default=None)


class Environment:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[Event] = []
        self._seq = 0
        self._kinds: dict[Kind, int] = {}

    def schedule(self, time: float, kind: Kind, payload: Any = None) -> Event:
        if time < self.now:
            raise ValueError(f"cannot schedule {kind.value} at {time} before now ({self.now})")
        event = Event(time, self._seq, kind, payload)
        self._seq += 1
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        heapq.heappush(self._heap, event)
        return event

    def pop_batch(self) -> list[Event]:
        """All events at the next time, in scheduling order; advances the clock to it."""
        if not self._heap:
            return []
        first = heapq.heappop(self._heap)
        batch = [first]
        while self._heap and self._heap[0].time == first.time:
            batch.append(heapq.heappop(self._heap))
        self.now = first.time
        for event in batch:
            self._kinds[event.kind] -= 1
        return batch

    def pending(self, *kinds: Kind) -> int:
        """Events of these kinds still to come."""
        return sum(self._kinds.get(k, 0) for k in kinds)

    def __len__(self) -> int:
        return len(self._heap)
