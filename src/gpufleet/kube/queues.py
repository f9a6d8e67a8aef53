"""`QueueState`: what the live scheduler tells the core about queues across cycles.

The core's queue-aware cycle (`core.queued`) takes a `QueueContext`; the simulator fills it
from its own history, this module from what a live scheduler can observe:

* `tree`: the `Queue` custom resources (a tree that does not validate — a missing parent, a
  cycle, children guaranteed more than their parent — is logged once and replaced by the
  default queue alone, so a bad CR cannot stop scheduling);
* `usage_share`: each queue's GPU share decayed with the profile's half-life, on wall time
  (empty when the half-life is 0: the core then uses current allocation);
* `attained_gpu_s` (las order): GPU-seconds of the *current* run of each pending pod's gang
  (running members' GPUs x time since they started). A live scheduler does not see earlier
  runs of a job (its pods are new objects), so a restarted job starts again from 0;
* `evicted_at`: when this process evicted a pod (the per-hour preemption cap). Not
  persisted: after a restart the cap starts afresh.

`queue_status` is what the scheduler writes into each Queue's `status` (allocated, fair
share, pending pods), so `kubectl get queue -o yaml` shows where a team stands.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

from gpufleet.core.fairshare import fair_shares
from gpufleet.core.queued import add_demand
from gpufleet.core.quota import F64, QueueBook
from gpufleet.core.context import QueueContext
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, ModelError, PodSpec, PodUid, Queue, QueueTree
from gpufleet.model.queue import DEFAULT_QUEUE, QUEUE_LABEL

log = logging.getLogger(__name__)


def queue_refusal(queues: Mapping[str, Queue], spec: PodSpec) -> str | None:
    """Why the queue `spec` runs in does not admit it, or None when it does. A pod runs in the
    queue its label names, or in `default` when no such queue is defined; a queue with
    `spec.namespaces` admits pods of those namespaces only."""
    name = spec.queue if spec.queue in queues else DEFAULT_QUEUE
    q = queues.get(name)
    if q is None or q.namespaces is None or q.admits(spec.namespace):
        return None
    named = f"queue {name}" if name == spec.queue else \
        f"queue {name} (the pod names queue {spec.queue!r}, which is not defined)"
    allowed = ", ".join(sorted(q.namespaces)) or "none"
    return (f"{named} does not admit pods of namespace {spec.namespace}; its spec.namespaces: {allowed}. "
            f"Label the pod with a queue of its namespace ({QUEUE_LABEL})")


class QueueState:
    def __init__(self, cfg: QueueingConfig) -> None:
        self.cfg = cfg
        self.decayed: dict[str, float] = {}
        self.evicted_at: dict[PodUid, tuple[float, ...]] = {}
        self._last_t: float | None = None
        self._bad: str | None = None

    def context(self, queues: Sequence[Queue], snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
                now: float) -> QueueContext | None:
        """The context for this cycle, or None when neither queues nor queueing are configured."""
        if not queues and self.cfg == QueueingConfig():
            return None
        tree = self._tree(queues)
        self._decay(snapshot, now)
        return QueueContext(tree, MappingProxyType(dict(self.decayed)),
                            MappingProxyType(self._attained(snapshot, pending, now)),
                            MappingProxyType(dict(self.evicted_at)))

    def evicted(self, pod: PodUid, now: float) -> None:
        self.evicted_at[pod] = (*[t for t in self.evicted_at.get(pod, ()) if now - t < 3600.0], now)

    def tree(self, queues: Sequence[Queue]) -> QueueTree:
        """The validated tree of `queues` (the default queue alone if they do not form one)."""
        return self._tree(queues)

    def _tree(self, queues: Sequence[Queue]) -> QueueTree:
        try:
            tree = QueueTree.build(sorted(queues, key=lambda q: q.name))
        except ModelError as exc:
            if str(exc) != self._bad:
                self._bad = str(exc)
                log.error("the Queue objects do not form a valid tree (%s); scheduling as if there were none", exc)
            return QueueTree.build(())
        if self._bad is not None:
            log.info("the Queue objects form a valid tree again")
            self._bad = None
        return tree

    def _decay(self, snapshot: ClusterSnapshot, now: float) -> None:
        half = self.cfg.usage_half_life_seconds
        capacity = snapshot.gpu_capacity_milli()
        if not half or not capacity:
            return
        last = self._last_t if self._last_t is not None else now
        keep = math.pow(0.5, max(0.0, now - last) / half)
        held: dict[str, float] = {}
        for p in snapshot.placements.values():
            held[p.queue] = held.get(p.queue, 0.0) + len(p.gpus) * p.milli
        for q in set(self.decayed) | set(held):
            self.decayed[q] = self.decayed.get(q, 0.0) * keep + (1 - keep) * held.get(q, 0.0) / capacity
        self._last_t = now

    def _attained(self, snapshot: ClusterSnapshot, pending: Sequence[PodSpec], now: float) -> dict[PodUid, float]:
        if self.cfg.order != "las":
            return {}
        by_group: dict[str, float] = {}
        for p in snapshot.placements.values():
            if p.pod_group:
                by_group[p.pod_group] = (by_group.get(p.pod_group, 0.0)
                                         + len(p.gpus) * p.milli / 1000 * max(0.0, now - p.started_s))
        return {pod.uid: by_group.get(pod.pod_group, 0.0) for pod in pending if pod.pod_group}


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """Per queue of a tree (`names`, in `QueueBook` order): what it holds, its fair share (held
    plus asked, as the core computes it), both per dimension (`dims`), and the pods waiting in it
    or below it."""

    names: tuple[str, ...]
    dims: tuple[str, ...]
    allocated: F64
    fair_share: F64
    waiting: tuple[int, ...]


def queue_figures(tree: QueueTree, snapshot: ClusterSnapshot, pending: Sequence[PodSpec]) -> QueueFigures:
    book = QueueBook(tree, snapshot.cluster)
    book.load(snapshot.placements.values())
    want = book.alloc.copy()
    add_demand(book, want, pending)
    waiting = [0] * len(book.names)
    for pod in pending:
        for a in book.up[book.queue_of(pod.queue)]:
            waiting[a] += 1
    return QueueFigures(book.names, book.dims, book.alloc, fair_shares(book, want), tuple(waiting))


def queue_status(tree: QueueTree, snapshot: ClusterSnapshot, pending: Sequence[PodSpec]
                 ) -> dict[str, dict[str, object]]:
    """Per queue: what it holds, its fair share and how many pods wait in it or below it, in the
    Queue CR's status shape (quantities)."""
    f = queue_figures(tree, snapshot, pending)
    return {name: {"allocated": _quantities(f.allocated[i]), "fairShare": _quantities(f.fair_share[i]),
                   "pending": f.waiting[i]}
            for i, name in enumerate(f.names)}


def _quantities(row: Sequence[float]) -> dict[str, str]:
    return {"cpu": f"{int(round(row[0]))}m", "memory": f"{int(round(row[1]))}Mi",
            "nvidia.com/gpu": f"{int(round(row[2]))}m"}
