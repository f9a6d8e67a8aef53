"""Queue limits as a unit is placed: `QueueAdmission` counts each pod against its queue's
limits (tentative gang members included) and masks the nodes of GPU models that a per-model
limit no longer allows."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from gpufleet.core.statement import Statement
from gpufleet.core.quota import F64, QueueBook
from gpufleet.framework.status import Code, Status
from gpufleet.model import Cluster, Placement, PodSpec


def sum_vectors(book: QueueBook, pods: Iterable[PodSpec]) -> F64:
    """What `pods` ask, as a queue usage vector."""
    return sum((book.pod_vector(p) for p in pods), np.zeros(len(book.dims)))


class QueueAdmission:
    """Counts every pod of a unit against its queue's limits as it is placed, tentative gang
    members included, and masks the nodes of GPU models a per-model limit no longer allows.
    A gang takes extra members (beyond minMember) only while they stay within the limits."""

    def __init__(self, statement: Statement, book: QueueBook, q: int, held: np.ndarray) -> None:
        self.statement, self.book, self.q, self.held = statement, book, q, held

    def admit(self, pod: PodSpec) -> Status | None:
        why = self.book.over_limit(self.q, self.book.pod_vector(pod))
        if why is not None:
            return Status(Code.UNSCHEDULABLE, (why,), "QueueLimit")
        self.statement.restrict(*node_mask(self.statement.view.cluster, self.book, self.q, pod, self.held))
        return None

    def placed(self, placement: Placement) -> None:
        self.book.add(self.q, self.book.placement_vector(placement))

    def removed(self, placement: Placement) -> None:
        self.book.add(self.q, self.book.placement_vector(placement), sign=-1)

    def explain(self, pod: PodSpec, status: Status) -> Status:
        milli = self.book.gpus.milli(pod)
        if not self.book.model_limited[self.q] or not milli:
            return status
        reached = self.book.model_limits_reached(self.q, milli)
        return Status(status.code, status.reasons + tuple(reached), status.plugin) if reached else status


def node_mask(cluster: Cluster, book: QueueBook, q: int, pod: PodSpec, held: np.ndarray
              ) -> tuple[np.ndarray | None, object]:
    """The nodes `pod` of queue q may take (not `held` for a starving unit, of a GPU model its
    queue's per-model limits still allow; None: any), and a key naming that mask."""
    mask: np.ndarray | None = ~held if held.any() else None
    key: object = ("held", int(held.sum())) if mask is not None else None
    milli = book.gpus.milli(pod) if book.model_limited[q] else 0
    if milli:
        ok = book.allowed_models(q, milli)
        model_id = cluster.model_id
        by_model = np.where(model_id >= 0, ok[np.maximum(model_id, 0)], True)
        mask = by_model if mask is None else mask & by_model
        key = (key, book.names[q], tuple(ok.tolist()))
    return mask, key
