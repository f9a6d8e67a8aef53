"""Queues: a tree of teams sharing the cluster, each with a guaranteed quota, a limit and a weight.

Amounts are kept per *dimension* in base units: `cpu` (milli-CPU), `memory` (MiB), `gpu`
(GPU-milli, all models) and `gpu/<model>` (GPU-milli of one GPU model, the model as the
feature-discovery label `nvidia.com/gpu.product` spells it). A dimension missing from
`guaranteed` is guaranteed 0; missing from `limit`, it is unlimited.

In a cluster a queue is the `gpufleet.io/v1alpha1` `Queue` custom resource (spec: `parent`,
`weight`, `borrow`, `guaranteed`, `limit`, `gpuModels`, `namespaces`); pods name theirs with the label
`gpufleet.io/queue`. Pods of a queue that is not defined run in `default`, a root queue
with weight 1, nothing guaranteed and no limit. A queue with `spec.namespaces` admits only
pods of those namespaces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from gpufleet.model.errors import ModelError

CPU = "cpu"
MEMORY = "memory"
GPU = "gpu"
GPU_MODEL_PREFIX = "gpu/"
DEFAULT_QUEUE = "default"
QUEUE_LABEL = "gpufleet.io/queue"
PREEMPTIBLE_ANNOTATION = "gpufleet.io/preemptible"
"""`"false"` makes a pod immune to preemption and reclaim; pods are preemptible by default."""


def gpu_model_dim(model: str) -> str:
    return GPU_MODEL_PREFIX + model


def _is_dim(name: str) -> bool:
    return name in (CPU, MEMORY, GPU) or (name.startswith(GPU_MODEL_PREFIX) and len(name) > len(GPU_MODEL_PREFIX))


def _amounts(where: str, values: Mapping[str, int]) -> Mapping[str, int]:
    for dim, amount in values.items():
        if not _is_dim(dim):
            raise ModelError(f"{where}.{dim}", "unknown resource; expected cpu, memory, gpu or gpu/<model>")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise ModelError(f"{where}.{dim}", f"must be a whole number >= 0, got {amount!r}")
    return MappingProxyType(dict(values))


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    parent: str | None = None
    weight: float = 1.0
    """Share of what is left over after guarantees, relative to the queue's siblings."""
    guaranteed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    limit: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    borrow: bool = True
    """Whether the queue may use more than its guarantee when others leave capacity idle."""
    namespaces: frozenset[str] | None = None
    """The namespaces whose pods may run in the queue; None: every namespace. A queue is a
    team's budget and the queue label is written by whoever writes the pod, so without this
    any tenant could spend another team's guarantee."""

    def admits(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def __post_init__(self) -> None:
        where = f"queue {self.name}"
        if not self.name:
            raise ModelError("queue", "name must not be empty")
        if self.parent == self.name:
            raise ModelError(f"{where}: parent", "a queue cannot be its own parent")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) \
                or not math.isfinite(self.weight) or self.weight <= 0:
            raise ModelError(f"{where}: weight", f"must be a number > 0, got {self.weight!r}")
        object.__setattr__(self, "guaranteed", _amounts(f"{where}: guaranteed", self.guaranteed))
        object.__setattr__(self, "limit", _amounts(f"{where}: limit", self.limit))
        for dim, amount in self.guaranteed.items():
            cap = self.limit.get(dim)
            if cap is not None and amount > cap:
                raise ModelError(f"{where}: guaranteed.{dim}", f"{amount} exceeds the limit {cap}")


@dataclass(frozen=True, slots=True)
class QueueTree:
    """A validated forest of queues: parents exist, no cycles, children's guarantees fit the parent's."""

    queues: Mapping[str, Queue]
    children: Mapping[str | None, tuple[str, ...]]
    """Child names per parent, sorted; key None holds the roots."""

    @staticmethod
    def build(queues: Iterable[Queue]) -> QueueTree:
        by_name: dict[str, Queue] = {}
        for q in queues:
            if q.name in by_name:
                raise ModelError(f"queue {q.name}", "defined twice")
            by_name[q.name] = q
        by_name.setdefault(DEFAULT_QUEUE, Queue(DEFAULT_QUEUE))
        children: dict[str | None, list[str]] = {}
        for q in by_name.values():
            if q.parent is not None and q.parent not in by_name:
                raise ModelError(f"queue {q.name}: parent", f"no queue named {q.parent!r}")
            children.setdefault(q.parent, []).append(q.name)
        for q in by_name.values():
            seen = {q.name}
            up = q.parent
            while up is not None:
                if up in seen:
                    raise ModelError(f"queue {q.name}: parent", f"cycle through {up!r}")
                seen.add(up)
                up = by_name[up].parent
        for parent, kids in children.items():
            if parent is None:
                continue
            for dim, amount in by_name[parent].guaranteed.items():
                total = sum(by_name[k].guaranteed.get(dim, 0) for k in kids)
                if total > amount:
                    raise ModelError(f"queue {parent}: guaranteed.{dim}",
                                     f"children guarantee {total} in total, more than the parent's {amount}")
        return QueueTree(MappingProxyType(by_name),
                         MappingProxyType({p: tuple(sorted(k)) for p, k in children.items()}))

    def leaf_of(self, name: str) -> str:
        """The queue a pod naming `name` runs in: that queue if defined, else `default`."""
        return name if name in self.queues else DEFAULT_QUEUE

    def path(self, name: str) -> tuple[str, ...]:
        """Root-first chain of queue names ending at `name`."""
        chain = [name]
        up = self.queues[name].parent
        while up is not None:
            chain.append(up)
            up = self.queues[up].parent
        return tuple(reversed(chain))
