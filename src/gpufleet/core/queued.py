"""The queue-aware cycle: order across queues, queue limits, starvation, then preemption.

1. Account: every running pod counts against its queue and the queue's ancestors
   (`QueueBook`); fair shares are computed from what each queue holds plus what it asks.
2. Order (the profile's `queueing.order`):
   - fifo: arrival order; priority: priority, then age (kube-scheduler);
   - fair: hierarchical — from the roots down, the child with pending work that is below
     its guarantee, else with the lowest dominant share over weight (on usage decayed by
     the driver, if it reports one) goes next; within a leaf queue, priority then age;
     shares are updated after every placement, so queues interleave;
   - las: least attained service first (Tiresias' discretised levels), then age.
   The oldest unit that has waited longer than `starvationBoundSeconds` goes before all others.
3. Limits: a unit whose minimum (a gang's minMember) would take its queue (or an ancestor)
   past a limit stays pending with a message naming the queue and the limit; then each pod is
   checked as it is placed, counting the unit's members placed before it (`QueueAdmission`),
   so an elastic gang's extra members stop at the limit; per-model limits mask the nodes of
   a model the next pod would take past its limit.
4. Starvation: the head of the line — the oldest unit that has waited longer than the
   bound — is placed first; if it does not fit, the nodes with the most free GPUs that could
   host it are held for it and nothing else starts on them in this cycle. Freed capacity
   accumulates there, so its wait is bounded by the runtime of what already runs on them.
   Work elsewhere continues (backfill that cannot delay it), and every other unit keeps
   its place in the fair order, so one starving gang does not turn the queue into FIFO.
5. Preemption and reclaim (`core.preemption`) for the units still pending.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Sequence

import numpy as np

from gpufleet.core import ordering, preemption
from gpufleet.core.claim_gpus import ClaimGpus
from gpufleet.core.context import QueueContext
from gpufleet.core.fairshare import fair_shares
from gpufleet.core.placing import Placer
from gpufleet.core.queue_admission import QueueAdmission, sum_vectors
from gpufleet.core.quota import F64, QueueBook
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.status import Status
from gpufleet.model import GpuKind, GpuRequest, PodSpec, Usage

Unit = list[PodSpec]


def run(placer: Placer, pending: Sequence[PodSpec], cfg: QueueingConfig, ctx: QueueContext) -> None:
    statement = placer.statement
    book = QueueBook(ctx.tree, statement.view.cluster, ClaimGpus(statement.claims) if statement.claims is not None else None)
    book.load(statement.snapshot.placements.values())
    now = statement.state.now
    key = _unit_key(cfg, ctx)
    units = ordering.order(pending, key)
    want = book.alloc.copy()
    add_demand(book, want, pending)
    fair = fair_shares(book, want)
    bound = cfg.starvation_bound_seconds
    over = [u for u in units if bound > 0 and now - u[0].created_s >= bound]
    head = min(over, key=lambda u: (u[0].created_s, u[0].uid)) if over else None
    starving = [head] if head is not None else []
    rest = [u for u in units if u is not head]
    held = np.zeros(statement.view.cluster.n_nodes, dtype=np.bool_)
    failed: list[Unit] = []
    for unit, is_starving in _sequence(cfg, book, ctx, starving, rest):
        if not _place_unit(placer, book, unit, held):
            failed.append(unit)
            status = placer.unschedulable.get(unit[0].uid)
            if is_starving and not held.any() and (status is None or status.plugin not in ("Queue", "QueueLimit")):
                _hold(placer, book, unit, held)  # holding nodes cannot help a unit its queue does not admit
    if cfg.preempts:
        preemption.run(placer, book, fair, ctx, cfg, held, failed[:cfg.preemption_attempts_per_cycle])
    statement.restrict(None)


def _sequence(cfg: QueueingConfig, book: QueueBook, ctx: QueueContext, starving: list[Unit], rest: list[Unit]
              ) -> Iterable[tuple[Unit, bool]]:
    if cfg.order != "fair":
        return [(u, True) for u in starving] + [(u, False) for u in rest]
    return _FairPicker(book, ctx, starving, rest)


def add_demand(book: QueueBook, want: F64, pending: Sequence[PodSpec]) -> None:
    """Add what pending pods ask to their queues' rows (a GPU model only when the pod allows one)."""
    totals: dict[tuple[int, int], list[int]] = {}
    models = {m: k for k, m in enumerate(book.cluster.models)}
    for pod in pending:
        model = -1
        if len(pod.gpu_models) == 1:
            (only,) = pod.gpu_models
            model = models.get(only, -1)
        k = (book.queue_of(pod.queue), model)
        t = totals.get(k)
        if t is None:
            t = totals[k] = [0, 0, 0]
        t[0] += pod.cpu_milli
        t[1] += pod.mem_mib
        t[2] += book.gpus.milli(pod)
    for (q, model), (cpu, mem, gpu) in totals.items():
        want[q] += book.vector(cpu, mem, gpu, model)


def _unit_key(cfg: QueueingConfig, ctx: QueueContext) -> Callable[[PodSpec], tuple[object, ...]]:
    if cfg.order == "fifo":
        return ordering.by_arrival
    if cfg.order == "las":
        levels = cfg.las_thresholds_gpu_seconds

        def las(p: PodSpec) -> tuple[object, ...]:
            return (ordering.las_level(levels, ctx.attained_gpu_s.get(p.uid, 0.0)), p.created_s, p.uid)
        return las
    return ordering.by_priority


def _place_unit(placer: Placer, book: QueueBook, unit: Unit, held: np.ndarray) -> bool:
    q = book.queue_of(unit[0].queue)
    if not book.is_leaf(q):
        placer.fail(unit, f"queue {book.names[q]} has child queues: pods must name a leaf queue", "Queue")
        return False
    if book.limited[q]:
        why = book.over_limit(q, sum_vectors(book, unit[:placer.members_needed(unit)]))
        if why is not None:
            placer.fail(unit, why, "QueueLimit")
            return False
    return bool(placer.run_unit(unit, QueueAdmission(placer.statement, book, q, held)))


def _hold(placer: Placer, book: QueueBook, unit: Unit, held: np.ndarray) -> None:
    """Hold for `unit` the nodes with the most free GPU capacity that could host its members."""
    statement = placer.statement
    cluster = statement.view.cluster
    pod = unit[0]
    empty = Usage(cluster)
    candidates = statement.feasible_under(pod, empty)
    if len(candidates) == 0:
        return
    free = statement.view.usage.free_milli_total[candidates]
    ranked = candidates[np.lexsort((candidates, -free))]
    per_node = _members_per_node(book.gpus.request(pod), cluster.gpu_count[ranked])
    need = len(unit)
    covered = np.cumsum(per_node)
    take = int(np.searchsorted(covered, need)) + 1
    chosen = ranked[:take]
    held[chosen] = True
    names = ", ".join(cluster.names[i] for i in chosen[:5]) + (" ..." if len(chosen) > 5 else "")
    note = (f"waiting longer than the starvation bound: {len(chosen)} node(s) held for it "
            f"until it fits ({names})")
    for member in unit:
        status = placer.unschedulable.get(member.uid)
        if status is not None:
            placer.unschedulable[member.uid] = Status(status.code, status.reasons + (note,), status.plugin)


def _members_per_node(gpu: GpuRequest, gpu_count: np.ndarray) -> np.ndarray:
    if gpu.kind is GpuKind.WHOLE:
        return np.asarray(gpu_count // max(gpu.count, 1), dtype=np.int64)
    return np.ones(len(gpu_count), dtype=np.int64)


class _FairPicker:
    """Yields units: over-bound units first, then hierarchical fair share across queues."""

    def __init__(self, book: QueueBook, ctx: QueueContext, starving: list[Unit], rest: list[Unit]) -> None:
        self.book = book
        self.starving = starving
        self.queues: dict[int, deque[Unit]] = {}
        self.pending = [0] * len(book.names)
        for unit in rest:
            q = book.queue_of(unit[0].queue)
            self.queues.setdefault(q, deque()).append(unit)
            for a in book.up[q]:
                self.pending[a] += 1
        self.decayed: list[float] | None = None
        self.start = list(book.dominant)
        """Dominant shares when the cycle began: what was placed since is added to the decayed usage."""
        if ctx.usage_share:
            share = [0.0] * len(book.names)
            for name, value in ctx.usage_share.items():
                if name in book.index:
                    for a in book.up[book.index[name]]:
                        share[a] += value
            self.decayed = share

    def __iter__(self) -> _FairPicker:
        return self

    def __next__(self) -> tuple[Unit, bool]:
        if self.starving:
            return self.starving.pop(0), True
        kids = self.book.roots
        while True:
            live = [k for k in kids if self.pending[k] > 0]
            if not live:
                raise StopIteration
            k = min(live, key=self._key)
            if k in self.queues and self.queues[k]:
                break
            kids = self.book.children[k]
        unit = self.queues[k].popleft()
        for a in self.book.up[k]:
            self.pending[a] -= 1
        return unit, False

    def _key(self, q: int) -> tuple[int, float, str]:
        book = self.book
        share = book.dominant[q] if self.decayed is None else self.decayed[q] + book.dominant[q] - self.start[q]
        return (0 if book.below_guarantee(q) else 1, share / book.weight[q], book.names[q])

