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

import bisect
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

import numpy as np

from gpufleet.core import ordering, preemption
from gpufleet.core.fairshare import fair_shares
from gpufleet.core.quota import F64, QueueBook, pod_gpu_milli
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.status import Code, Status
from gpufleet.model import GpuKind, Placement, PodSpec, PodUid, QueueTree, Usage

if TYPE_CHECKING:
    from gpufleet.core.cycle import _Cycle

Unit = list[PodSpec]


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


def run(cycle: _Cycle, pending: Sequence[PodSpec], cfg: QueueingConfig, ctx: QueueContext) -> None:
    book = QueueBook(ctx.tree, cycle.view.cluster)
    book.load(cycle.snapshot.placements.values())
    now = cycle.state.now
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
    held = np.zeros(cycle.view.cluster.n_nodes, dtype=np.bool_)
    failed: list[Unit] = []
    for unit, is_starving in _sequence(cfg, book, ctx, starving, rest):
        if not _place_unit(cycle, book, unit, held):
            failed.append(unit)
            status = cycle.unschedulable.get(unit[0].uid)
            if is_starving and not held.any() and (status is None or status.plugin not in ("Queue", "QueueLimit")):
                _hold(cycle, unit, held)  # holding nodes cannot help a unit its queue does not admit
    if cfg.preempts:
        preemption.run(cycle, book, fair, ctx, cfg, held, failed[:cfg.preemption_attempts_per_cycle])
    cycle.mask, cycle.mask_key = None, None


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
        t[2] += pod_gpu_milli(pod)
    for (q, model), (cpu, mem, gpu) in totals.items():
        want[q] += book.vector(cpu, mem, gpu, model)


def _unit_key(cfg: QueueingConfig, ctx: QueueContext) -> Callable[[PodSpec], tuple[object, ...]]:
    if cfg.order == "fifo":
        return ordering.by_arrival
    if cfg.order == "las":
        levels = cfg.las_thresholds_gpu_seconds

        def las(p: PodSpec) -> tuple[object, ...]:
            return (las_level(levels, ctx.attained_gpu_s.get(p.uid, 0.0)), p.created_s, p.uid)
        return las
    return ordering.by_priority


def las_level(thresholds: Sequence[float], attained: float) -> int:
    """Tiresias' discretised attained service: 0 until the first threshold, then 1, ..."""
    return bisect.bisect_right(list(thresholds), attained)


def _place_unit(cycle: _Cycle, book: QueueBook, unit: Unit, held: np.ndarray) -> bool:
    q = book.queue_of(unit[0].queue)
    if not book.is_leaf(q):
        _fail(cycle, unit, f"queue {book.names[q]} has child queues: pods must name a leaf queue", "Queue")
        return False
    if book.limited[q]:
        why = book.over_limit(q, sum_vectors(book, unit[:members_needed(cycle, unit)]))
        if why is not None:
            _fail(cycle, unit, why, "QueueLimit")
            return False
    return bool(cycle.run_unit(unit, QueueAdmission(cycle, book, q, held)))


def members_needed(cycle: _Cycle, unit: Unit) -> int:
    """How many of the unit's pods must be placed together: all, or what a gang lacks of minMember."""
    group = cycle.snapshot.pod_groups.get(unit[0].pod_group or "")
    if unit[0].pod_group is None or group is None:
        return len(unit)
    return max(group.min_member - cycle.running_members(unit[0].pod_group), 0)


def sum_vectors(book: QueueBook, pods: Iterable[PodSpec]) -> F64:
    return sum((book.pod_vector(p) for p in pods), np.zeros(len(book.dims)))


class QueueAdmission:
    """Counts every pod of a unit against its queue's limits as it is placed, tentative gang
    members included, and masks the nodes of GPU models a per-model limit no longer allows.
    A gang takes extra members (beyond minMember) only while they stay within the limits."""

    def __init__(self, cycle: _Cycle, book: QueueBook, q: int, held: np.ndarray) -> None:
        self.cycle, self.book, self.q, self.held = cycle, book, q, held

    def admit(self, pod: PodSpec) -> Status | None:
        why = self.book.over_limit(self.q, self.book.pod_vector(pod))
        if why is not None:
            return Status(Code.UNSCHEDULABLE, (why,), "QueueLimit")
        self.cycle.mask, self.cycle.mask_key = node_mask(self.cycle, self.book, self.q, pod, self.held)
        return None

    def placed(self, placement: Placement) -> None:
        self.book.add(self.q, self.book.placement_vector(placement))

    def removed(self, placement: Placement) -> None:
        self.book.add(self.q, self.book.placement_vector(placement), sign=-1)

    def explain(self, pod: PodSpec, status: Status) -> Status:
        if not self.book.model_limited[self.q] or pod.gpu.kind is GpuKind.NONE:
            return status
        reached = self.book.model_limits_reached(self.q, pod_gpu_milli(pod))
        return Status(status.code, status.reasons + tuple(reached), status.plugin) if reached else status


def node_mask(cycle: _Cycle, book: QueueBook, q: int, pod: PodSpec, held: np.ndarray
               ) -> tuple[np.ndarray | None, object]:
    mask: np.ndarray | None = ~held if held.any() else None
    key: object = ("held", int(held.sum())) if mask is not None else None
    if book.model_limited[q] and pod.gpu.kind is not GpuKind.NONE:
        ok = book.allowed_models(q, pod_gpu_milli(pod))
        model_id = cycle.view.cluster.model_id
        by_model = np.where(model_id >= 0, ok[np.maximum(model_id, 0)], True)
        mask = by_model if mask is None else mask & by_model
        key = (key, book.names[q], tuple(ok.tolist()))
    return mask, key


def _fail(cycle: _Cycle, unit: Unit, why: str, plugin: str) -> None:
    for pod in unit:
        cycle.unschedulable[pod.uid] = Status(Code.UNSCHEDULABLE, (why,), plugin)


def _hold(cycle: _Cycle, unit: Unit, held: np.ndarray) -> None:
    """Hold for `unit` the nodes with the most free GPU capacity that could host its members."""
    cluster = cycle.view.cluster
    pod = unit[0]
    empty = Usage(cluster)
    candidates = cycle.feasible_under(pod, empty)
    if len(candidates) == 0:
        return
    free = cycle.view.usage.free_milli_total[candidates]
    ranked = candidates[np.lexsort((candidates, -free))]
    per_node = _members_per_node(pod, cluster.gpu_count[ranked])
    need = len(unit)
    covered = np.cumsum(per_node)
    take = int(np.searchsorted(covered, need)) + 1
    chosen = ranked[:take]
    held[chosen] = True
    names = ", ".join(cluster.names[i] for i in chosen[:5]) + (" ..." if len(chosen) > 5 else "")
    note = (f"waiting longer than the starvation bound: {len(chosen)} node(s) held for it "
            f"until it fits ({names})")
    for member in unit:
        status = cycle.unschedulable.get(member.uid)
        if status is not None:
            cycle.unschedulable[member.uid] = Status(status.code, status.reasons + (note,), status.plugin)


def _members_per_node(pod: PodSpec, gpu_count: np.ndarray) -> np.ndarray:
    if pod.gpu.kind is GpuKind.WHOLE:
        return np.asarray(gpu_count // max(pod.gpu.count, 1), dtype=np.int64)
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

