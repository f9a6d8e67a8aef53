"""Preemption and reclaim: make room for a pending unit by evicting the pods that matter least.

Who may be a victim of pending pod P in leaf queue Q:
- every victim is preemptible, has run at least `minRuntimeSeconds`, and was evicted fewer
  than `maxPreemptionsPerPodPerHour` times in the last hour;
- priority preemption (`preemption: true`): pods of Q with a lower priority than P; in the
  las order, pods of any queue on a higher attained-service level than P's job;
- reclaim (`reclaim: true`): pods of another queue that holds more than its fair share of
  the dimension P is scheduled for (GPUs, or CPU and memory for a pod without GPUs), if Q
  stays within its own fair share once P runs.
The last rule is what keeps reclaim from looping: the reclaiming queue ends at or below its
share and the victim's queue started above its own, so the victim's queue can never reclaim
back from it; priority preemption cannot loop because victims have lower priority.

Gangs: a victim that belongs to a gang takes its whole gang with it, unless the gang runs
more than minMember pods (an elastic gang): then up to as many of its members as it runs
beyond minMember are extras, victims on their own and always the first; victims that would
leave a gang below minMember take the rest of it too. A gang of preemptors stops at its
maxMember, each member is checked against its queue's limits, and once a unit has reclaimed,
each further member must keep its queue within its fair share.

Per pending pod, as kube-scheduler does: remove every candidate, keep the nodes where the pod
then fits, and on each (at most eight, fewest candidates first) give back candidates most
important first (non-extra, highest priority, longest running) while the pod still fits;
what cannot be given back are the victims. The node whose victims have the lowest highest
priority wins, then the one that throws away the least work (GPU-seconds run so far: a
preempted pod restarts), then the fewest pods. Priorities compare only within a queue
(DESIGN: priority orders pods of one queue), so a reclaim victim's priority counts for
nothing and reclaim takes what costs least work. A gang of
preemptors is placed member by member and rolled back whole if fewer than its minimum fit.
Everything placed here is `nominated`: it starts once its victims are gone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from gpufleet.core.context import QueueContext
from gpufleet.core.ordering import las_level
from gpufleet.core.placing import Placer
from gpufleet.core.queue_admission import node_mask, sum_vectors
from gpufleet.core.quota import F64, GPU_DIM, QueueBook
from gpufleet.core.result import Eviction
from gpufleet.core.statement import Statement, constraint_key
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import Placement, PodSpec, PodUid

MAX_NODES = 8
_EPS = 1e-6
HOUR_S = 3600.0

VictimUnit = tuple[Placement, ...]


class _Preemptor:
    def __init__(self, placer: Placer, book: QueueBook, fair: F64, ctx: QueueContext, cfg: QueueingConfig,
                 held: np.ndarray) -> None:
        self.placer, self.book, self.fair, self.ctx, self.cfg, self.held = placer, book, fair, ctx, cfg, held
        self.statement: Statement = placer.statement
        now = self.statement.state.now
        self.evicted: set[PodUid] = set()
        self.hopeless: dict[tuple[object, ...], int] = {}
        """Units that found no room, by every member's shape, queue and priority, with the cycle's epoch then."""
        self.by_queue: dict[int, list[Placement]] = {}
        self.groups: dict[str, list[Placement]] = {}
        for p in self.statement.snapshot.placements.values():
            if p.pod_group is not None:
                self.groups.setdefault(p.pod_group, []).append(p)
            if not self._protected(p, now):
                self.by_queue.setdefault(book.queue_of(p.queue), []).append(p)
        for victims in self.by_queue.values():
            victims.sort(key=lambda p: (p.priority, -p.started_s, p.pod))
        self.protected_groups = {g for g, members in self.groups.items()
                                 if any(self._protected(m, now) for m in members)}

    def _protected(self, p: Placement, now: float) -> bool:
        if not p.preemptible or now - p.started_s < self.cfg.min_runtime_seconds:
            return True
        recent = sum(1 for t in self.ctx.evicted_at.get(p.pod, ()) if now - t < HOUR_S)
        return recent >= self.cfg.max_preemptions_per_pod_per_hour

    # -- who may be evicted for `pod` -------------------------------------------------------
    def candidates(self, pod: PodSpec, q: int, reclaim_dims: list[int] | None) -> list[VictimUnit]:
        """Victims for `pod` of queue q; `reclaim_dims`: the dimensions q may reclaim in (None: it may not)."""
        cfg, book = self.cfg, self.book
        found: list[Placement] = []
        if cfg.preemption and cfg.order == "las":
            levels = cfg.las_thresholds_gpu_seconds
            mine = las_level(levels, self.ctx.attained_gpu_s.get(pod.uid, 0.0))
            for victims in self.by_queue.values():
                found.extend(p for p in victims
                             if las_level(levels, self.ctx.attained_gpu_s.get(p.pod, 0.0)) > mine)
        elif cfg.preemption:
            for p in self.by_queue.get(q, ()):
                if p.priority >= pod.priority:
                    break
                found.append(p)
        if reclaim_dims is not None:
            for other, victims in self.by_queue.items():
                if other != q and (book.alloc[other, reclaim_dims] > self.fair[other, reclaim_dims] + _EPS).any():
                    found.extend(victims)
        return self._units(found)

    def _dims(self, vec: F64) -> list[int]:
        return [GPU_DIM] if vec[GPU_DIM] > 0 else [0, 1]

    def reclaim_dims(self, q: int, ask: F64) -> list[int] | None:
        """Where queue q may reclaim for a pod asking `ask`: the pod's dimensions, if q stays within
        its fair share in them once the pod runs (what q holds counts the unit's members placed so far)."""
        if not self.cfg.reclaim:
            return None
        dims = self._dims(ask)
        return dims if bool((self.book.alloc[q, dims] + ask[dims] <= self.fair[q, dims] + _EPS).all()) else None

    def _units(self, found: list[Placement]) -> list[VictimUnit]:
        """Victim units: single pods; a gang's extra members (beyond minMember) one by one, as
        many as it has extras; the rest of a gang together, when all of it may be evicted."""
        units: list[VictimUnit] = []
        seen: set[PodUid] = set()
        allowed = {p.pod for p in found}
        extras: dict[str, int] = {}
        for p in found:
            if p.pod in self.evicted or p.pod in seen:
                continue
            if p.pod_group is None:
                units.append((p,))
                seen.add(p.pod)
                continue
            members = self._running(p.pod_group)
            group = self.statement.snapshot.pod_groups.get(p.pod_group)
            left = extras.setdefault(p.pod_group, len(members) - group.min_member if group is not None else 0)
            if left > 0:
                extras[p.pod_group] = left - 1
                units.append((p,))  # an extra member of an elastic gang
                seen.add(p.pod)
            elif p.pod_group not in self.protected_groups and all(m.pod in allowed for m in members):
                units.append(tuple(m for m in members if m.pod not in seen))
                seen.update(m.pod for m in members)
        return units

    def _running(self, group: str) -> list[Placement]:
        return [m for m in self.groups.get(group, ()) if m.pod not in self.evicted]

    def _whole(self, victims: list[VictimUnit]) -> list[VictimUnit]:
        """`victims`, plus the members a gang would keep if they are fewer than its minMember
        (its extras, when the rest of it is a victim): no gang is left running partly."""
        chosen = {p.pod for unit in victims for p in unit}
        out = list(victims)
        for name in sorted({p.pod_group for unit in victims for p in unit if p.pod_group is not None}):
            members = self._running(name)
            group = self.statement.snapshot.pod_groups.get(name)
            kept = tuple(m for m in members if m.pod not in chosen)
            if kept and len(kept) < (group.min_member if group is not None else len(members)):
                out.append(kept)
                chosen.update(m.pod for m in kept)
        return out

    # -- where, and whom ---------------------------------------------------------------------
    def choose(self, pod: PodSpec, q: int, units: list[VictimUnit]) -> tuple[int, list[VictimUnit]] | None:
        statement = self.statement
        index = statement.view.cluster.index
        usage = statement.view.usage.copy()
        count = np.zeros(statement.view.cluster.n_nodes, dtype=np.int64)
        pairs = [(p, index[p.node]) for unit in units for p in unit]
        usage.place_all(pairs, sign=-1)
        for _, i in pairs:
            count[i] += 1
        feasible = statement.feasible_under(pod, usage)
        feasible = feasible[count[feasible] > 0]
        if len(feasible) == 0:
            return None
        ranked = feasible[np.lexsort((feasible, count[feasible]))][:MAX_NODES]
        best: tuple[tuple[float, ...], int, list[VictimUnit]] | None = None
        now = statement.state.now
        for node in ranked.tolist():
            here = [u for u in units if any(index[p.node] == node for p in u)]
            victims = self._reprieve(pod, q, node, here)
            if victims is None:
                continue
            victims = self._whole(victims)
            pods = [p for u in victims for p in u]
            lost = sum(len(p.gpus) * p.milli * (now - p.started_s) for p in pods)
            cost = (max(self._rank(p, q) for p in pods), lost, len(pods), -max(p.started_s for p in pods), node)
            if best is None or cost < best[0]:
                best = (cost, node, victims)
        return None if best is None else (best[1], best[2])

    def _rank(self, p: Placement, q: int) -> float:
        """A victim's priority where it counts (its own queue); other queues' priorities do not compare."""
        return float(p.priority) if self.book.queue_of(p.queue) == q else float("-inf")

    def _reprieve(self, pod: PodSpec, q: int, node: int, here: list[VictimUnit]) -> list[VictimUnit] | None:
        statement = self.statement
        index = statement.view.cluster.index
        usage = statement.view.usage.copy()
        usage.place_all(((p, index[p.node]) for unit in here for p in unit), sign=-1)
        if not statement.fits(pod, node, usage):
            return None
        important_first = sorted(here, key=lambda u: (self._is_extra(u), -max(self._rank(p, q) for p in u),
                                                      min(p.started_s for p in u)))
        victims: list[VictimUnit] = []
        for unit in important_first:
            usage.place_all((p, index[p.node]) for p in unit)
            if not statement.fits(pod, node, usage):
                usage.place_all(((p, index[p.node]) for p in unit), sign=-1)
                victims.append(unit)
        return victims

    def _is_extra(self, unit: VictimUnit) -> bool:
        return len(unit) == 1 and unit[0].pod_group is not None

    # -- carrying out, and undoing ----------------------------------------------------------
    def evict(self, unit: VictimUnit) -> None:
        for p in unit:
            self.statement.evict(p)
            self.book.add(self.book.queue_of(p.queue), self.book.placement_vector(p), sign=-1)
            self.evicted.add(p.pod)

    def undo(self, mark: int) -> None:
        """Roll the statement back to `mark`, and the queue usage and the victims chosen with it."""
        for change in self.statement.rollback(mark):
            p = change.placement
            if change.is_eviction:
                self.book.add(self.book.queue_of(p.queue), self.book.placement_vector(p))
                self.evicted.discard(p.pod)
            else:
                self.book.add(self.book.queue_of(p.queue), self.book.placement_vector(p), sign=-1)

    def _las_victim(self, pod: PodSpec, victim: Placement) -> bool:
        """Whether `victim` may go for `pod` by least attained service (a higher level)."""
        if self.cfg.order != "las" or not self.cfg.preemption:
            return False
        levels, attained = self.cfg.las_thresholds_gpu_seconds, self.ctx.attained_gpu_s
        return las_level(levels, attained.get(victim.pod, 0.0)) > las_level(levels, attained.get(pod.uid, 0.0))

    def reclaims(self, pod: PodSpec, q: int, victim: Placement) -> bool:
        """Whether evicting `victim` for `pod` is reclaim (another queue's pod, not taken by LAS)."""
        return self.book.queue_of(victim.queue) != q and not self._las_victim(pod, victim)

    def why(self, pod: PodSpec, q: int, victim: Placement) -> str:
        if self._las_victim(pod, victim):
            return f"preempted by pod {pod.key}, whose job has received less GPU time"
        if self.reclaims(pod, q, victim):
            return (f"reclaimed by queue {self.book.names[q]} for pod {pod.key}: queue "
                    f"{self.book.names[self.book.queue_of(victim.queue)]} holds more than its fair share")
        return f"preempted by pod {pod.key} (priority {pod.priority} > {victim.priority}) in queue {self.book.names[q]}"


def run(placer: Placer, book: QueueBook, fair: F64, ctx: QueueContext, cfg: QueueingConfig, held: np.ndarray,
        units: Sequence[list[PodSpec]]) -> None:
    """Try to make room for each of `units` (pending units, in scheduling order)."""
    if not units:
        return
    preemptor = _Preemptor(placer, book, fair, ctx, cfg, held)
    for unit in units:
        _try_unit(preemptor, unit)


def _as_gpus(statement: Statement, pod: PodSpec) -> PodSpec:
    """`pod` asking for the GPUs its claims amount to, when they are nothing more (`ClaimAllocator.as_gpus`:
    `Statement.place` places such a pod so); victims are then chosen, and the pod placed after
    them, exactly as for a pod asking for those GPUs as extended resources."""
    claims = statement.claims
    if not pod.claims or claims is None or claims.check(pod) is not None:
        return pod
    gpu = claims.as_gpus(pod)
    return pod if gpu is None else replace(pod, gpu=gpu)


def _shape(statement: Statement, pod: PodSpec) -> tuple[object, ...]:
    """What makes two pods alike for the cache of hopeless units: a claim pod by what its claims ask."""
    if not pod.claims or statement.claims is None:
        return constraint_key(pod)
    return (*constraint_key(_as_gpus(statement, pod)), statement.claims.key(pod))


def _try_unit(pre: _Preemptor, unit: list[PodSpec]) -> None:
    placer, statement, book = pre.placer, pre.statement, pre.book
    q = book.queue_of(unit[0].queue)
    if not book.is_leaf(q) or any(p.uid not in placer.unschedulable for p in unit):
        return
    need = placer.members_needed(unit)
    group = statement.snapshot.pod_groups.get(unit[0].pod_group or "")
    if unit[0].pod_group is not None and group is not None and group.max_member is not None:
        unit = unit[:max(group.max_member - placer.running_members(unit[0].pod_group), 0)]
        if not unit:
            return
    key = (tuple(_shape(statement, p) for p in unit), need, q, unit[0].priority,
           pre.ctx.attained_gpu_s.get(unit[0].uid, 0.0) if pre.cfg.order == "las" else 0.0)
    if pre.hopeless.get(key) == statement.epoch:
        return  # an identical unit found no room this cycle, and nothing was evicted since
    if book.over_limit(q, sum_vectors(book, unit[:max(need, 1)])) is not None:
        return
    mark = statement.checkpoint()
    placed: list[tuple[PodSpec, Placement]] = []
    evicted: list[tuple[Placement, str]] = []
    reclaimed = False
    for i, pod in enumerate(unit):
        if len(placed) + (len(unit) - i) < need:
            break
        asks = _as_gpus(statement, pod)
        vector = book.pod_vector(pod)  # what its claims amount to counted (`book.gpus`)
        if book.over_limit(q, vector) is not None:
            continue  # an extra member of an elastic gang its queue's limits leave no room for
        if reclaimed and pre.reclaim_dims(q, vector) is None:
            continue  # what was reclaimed goes no further than the queue's fair share
        statement.restrict(*node_mask(statement.view.cluster, book, q, pod, pre.held))
        fitted = statement.place(pod)
        if not isinstance(fitted, Placement):
            units = pre.candidates(asks, q, pre.reclaim_dims(q, vector))
            choice = pre.choose(asks, q, units) if units else None
            if choice is None:
                continue
            node, victims = choice
            before = statement.checkpoint()
            for victim in victims:
                pre.evict(victim)
            fitted = statement.place_on(asks, node, claims_as_gpus=asks is not pod)
            if not isinstance(fitted, Placement):  # its claims' devices did not fit together there
                pre.undo(before)
                continue
            for victim in victims:
                why = pre.why(pod, q, victim[0])
                evicted.extend((p, why) for p in victim)
                reclaimed = reclaimed or pre.reclaims(pod, q, victim[0])
        book.add(q, book.placement_vector(fitted))
        placed.append((pod, fitted))
    if len(placed) < max(need, 1) or not evicted:
        pre.undo(mark)
        pre.hopeless[key] = statement.epoch
        return
    for pod, placement in placed:
        placer.unschedulable.pop(pod.uid, None)
        placer.nominated.append(placement)
    placer.evictions.extend(Eviction(p.pod, why, unit[0].uid) for p, why in evicted)
