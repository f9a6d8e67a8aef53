"""What the replay asks of an autoscaler, and how it bills the nodes one adds.

A `Scaler` is called every `interval_s` (Karpenter batches pending pods in a similar
window) with the cluster, the pods still pending and the nodes already requested. It
answers with nodes to request and nodes to remove. A requested node is billed from the
request and joins after its start delay; a removed node stops being billed, and whatever
still runs on it is evicted (its jobs restart from their last checkpoint, gangs whole).
Nodes of the workload itself are free: a fixed, billed cluster is a scaler that requests
its nodes at time 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, PodSpec


@dataclass(frozen=True, slots=True)
class NewNode:
    node: NodeInfo
    """Its name must be new among existing and launching nodes."""
    price_per_hour: float
    start_delay_s: float


@dataclass(frozen=True, slots=True)
class ScaleStep:
    add: tuple[NewNode, ...] = ()
    remove: tuple[NodeName, ...] = ()


class Scaler(Protocol):
    interval_s: float

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep: ...


@dataclass(slots=True)
class _Bill:
    since: float
    price_per_hour: float
    gpus: int


class Billing:
    """GPU-seconds and money paid for requested nodes, from request to removal (or the end)."""

    def __init__(self) -> None:
        self.open: dict[NodeName, _Bill] = {}
        self.gpu_seconds = 0.0
        self.cost = 0.0

    def start(self, new: NewNode, now: float) -> None:
        if new.node.name in self.open:
            raise ValueError(f"autoscaler requested node {new.node.name} twice")
        self.open[new.node.name] = _Bill(now, new.price_per_hour, len(new.node.gpus))

    def stop(self, name: NodeName, now: float) -> None:
        bill = self.open.pop(name, None)
        if bill is not None:
            self.gpu_seconds += bill.gpus * (now - bill.since)
            self.cost += bill.price_per_hour * (now - bill.since) / 3600

    def close(self, now: float) -> None:
        for name in list(self.open):
            self.stop(name, now)
