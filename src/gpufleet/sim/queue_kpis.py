"""Fairness and priority KPIs of a replay, measured as DESIGN.md defines them.

At sampled moments (at most one per `period_s` of simulated time) the meter computes, per
leaf queue, the GPUs it holds and its fair share — the same hierarchical water-filling the
scheduler uses (`core.fairshare`), over what each queue holds plus what it asks — and:

* Jain's index of allocated / fair over the queues whose fair share is not zero:
  (sum x)^2 / (n * sum x^2); 1 when every queue holds exactly its share. The run's figure is
  the time-weighted mean over samples where at least two queues want GPUs.
* priority inversions: pods that, at some sample, waited while a lower-priority pod of their
  own queue was running.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufleet.core.claim_gpus import ClaimGpus
from gpufleet.core.claims import ClaimAllocator
from gpufleet.core.fairshare import fair_shares
from gpufleet.core.quota import GPU_DIM, QueueBook
from gpufleet.model import ClusterSnapshot, PodSpec, PodUid, QueueTree


@dataclass(slots=True)
class QueueSample:
    time: float
    held: dict[str, float]
    """GPUs held per leaf queue."""
    fair: dict[str, float]
    """Fair share in GPUs per leaf queue."""
    jain: float | None


@dataclass(slots=True)
class QueueMeter:
    tree: QueueTree
    period_s: float = 600.0
    samples: list[QueueSample] = field(default_factory=list)
    inverted: set[PodUid] = field(default_factory=set)
    _next: float = float("-inf")

    def observe(self, now: float, snap: ClusterSnapshot, pending: list[PodSpec]) -> None:
        if now < self._next:
            return
        self._next = now + self.period_s
        asking = ClaimGpus(ClaimAllocator(snap)) if snap.dra.claims else None  # what claims amount to
        book = QueueBook(self.tree, snap.cluster, asking)
        book.load(snap.placements.values())
        lowest: dict[str, int] = {}
        for p in snap.placements.values():
            lowest[p.queue] = min(lowest.get(p.queue, p.priority), p.priority)
        want = book.alloc.copy()
        asked: dict[int, int] = {}
        for pod in pending:
            q = book.queue_of(pod.queue)
            asked[q] = asked.get(q, 0) + book.gpus.milli(pod)
            floor = lowest.get(pod.queue)
            if floor is not None and floor < pod.priority:
                self.inverted.add(pod.uid)
        for q, milli in asked.items():
            want[q, GPU_DIM] += milli
        fair = fair_shares(book, want)
        leaves = [q for q in range(len(book.names)) if book.is_leaf(q)]
        held = {book.names[q]: float(book.alloc[q, GPU_DIM]) / 1000 for q in leaves}
        share = {book.names[q]: float(fair[q, GPU_DIM]) / 1000 for q in leaves}
        ratios = np.array([held[n] / share[n] for n in share if share[n] > 1e-9])
        jain = float(ratios.sum() ** 2 / (len(ratios) * (ratios ** 2).sum())) \
            if len(ratios) >= 2 and (ratios ** 2).sum() > 0 else None
        self.samples.append(QueueSample(now, held, share, jain))

    def jain(self, end: float) -> float:
        """Time-weighted mean of Jain's index over the samples that have one."""
        total = weight = 0.0
        for here, nxt in zip(self.samples, [*self.samples[1:], None]):
            if here.jain is None:
                continue
            span = (nxt.time if nxt is not None else end) - here.time
            total += here.jain * span
            weight += span
        return total / weight if weight > 0 else float("nan")
