"""Defragmentation: move a few small pods so that a whole-GPU pod or gang blocked only by
fragmentation fits. Pure: the snapshot, the time and what was moved before are parameters.

**Blocked only by fragmentation.** The unit (a whole-GPU pod, or the members a gang still
needs) fits no node now, yet the nodes it is eligible for (every filter passes once all
running pods are taken off) hold at least as many free whole GPUs as it asks for in all.
With fewer free GPUs than that, no set of moves can help (that is the autoscaler's or
preemption's work): `plan` evicts nothing and says so.

**Movable pods.** A running pod may be moved when all of these hold:
- it is preemptible (`gpufleet.io/preemptible`, default true);
- it is small: a fraction of one GPU, or exactly one whole GPU. Bigger pods are what
  defragmentation is for, and one GPU per pod keeps the GPUs of a node independent (below);
- it belongs to no gang: evicting one member restarts the whole job, a cost far beyond the
  member's own GPUs; MIG and DRA-claim pods are not moved either (not worth the complexity);
- no PodDisruptionBudget that selects it is out of disruptions (`model.disruption`), counting
  the pods this plan already takes from that budget;
- it was not moved within the last `window_s` (`DefragLedger.moved_at`).

**What a move costs.** A moved pod restarts from its last checkpoint: it loses
`gpus x (now - started)` GPU-seconds, or only the part since the last checkpoint when pods
checkpoint every `checkpoint_s` (`(now - started) mod checkpoint_s`). The plan minimises the
number of pods moved, then the GPU-hours lost, and is refused when its loss would take the
GPU-hours lost in the last hour (`DefragLedger`, a rolling account) above the budget.

**Search.** Per pod of the unit that does not fit: on each node where it passes the filters
once the movable pods are gone, each GPU is free, or freed by evicting every pod on it (all
must be movable), at a cost of (pods, GPU-hours). Because movable pods sit on one GPU each,
freeing one GPU never frees part of another, so taking the cheapest GPUs in (pods, GPU-hours)
order until the pod's GPU count is free is the cheapest set on that node (an exchange
argument); the node with the cheapest set wins, ties to the lowest name. For a single pod
this is exact (the brute-force test checks it) except where a budget allows some
disruptions but fewer than the cheapest set needs: the GPUs are then taken in the same order
while the budget lasts, which can miss a cheaper combination. A gang's members are planned
one after the other, each on the usage its predecessors left: greedy, not exact.

**Where the moved pods go.** Each evicted pod for which `specs` gives its PodSpec is placed
again at once through the normal filters and scores, on the usage after the unit is placed,
so it never takes the room just made: a *move* (a bind in the plan). One that fits nowhere,
or whose spec is unknown, goes back to the queue (`requeued`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np

from gpufleet.core.result import Eviction
from gpufleet.core.statement import Statement
from gpufleet.framework.profile import Profile
from gpufleet.model import GPU_MILLI, ClusterSnapshot, GpuKind, Placement, PodSpec, PodUid
from gpufleet.model.disruption import Budget

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class DefragSettings:
    """When and how much to defragment. Times in seconds."""

    min_gpus: int = 4
    """Only units asking at least this many whole GPUs in all are defragmented for."""
    min_wait_s: float = 300.0
    """A unit must have waited this long (since it was created) first: most fit soon by themselves."""
    window_s: float = 3600.0
    """A pod moved is not moved again for this long."""
    budget_gpu_hours_per_hour: float = 2.0
    """GPU-hours of work moves may throw away in any hour (rolling)."""
    checkpoint_s: float | None = None
    """Pods checkpoint this often (None: a moved pod loses all the work of its run)."""
    interval_s: float = 60.0
    """For drivers: look for blocked units at most this often."""


@dataclass(frozen=True, slots=True)
class DefragLedger:
    """What the driver remembers across passes: when each pod was last moved, and the loss of
    each past move (time, GPU-hours) for the rolling budget."""

    moved_at: Mapping[PodUid, float] = field(default_factory=lambda: MappingProxyType({}))
    spent: tuple[tuple[float, float], ...] = ()

    def left(self, settings: DefragSettings, now: float) -> float:
        """GPU-hours the budget still allows at `now` (what moves lost in the last hour is spent)."""
        used = sum(lost for t, lost in self.spent if now - t < HOUR_S)
        return settings.budget_gpu_hours_per_hour - used

    def record(self, plan: DefragPlan, now: float, settings: DefragSettings) -> DefragLedger:
        """The ledger after `plan` was carried out at `now` (entries older than they matter dropped)."""
        keep = max(settings.window_s, HOUR_S)
        moved = {u: t for u, t in self.moved_at.items() if now - t < keep}
        moved.update({e.pod: now for e in plan.evictions})
        spent = tuple(s for s in self.spent if now - s[0] < HOUR_S) + ((now, plan.lost_gpu_hours),)
        return DefragLedger(MappingProxyType(moved), spent)


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """Evict `evictions`, then bind `placements` (the unit) and `moves` (evicted pods placed again);
    `requeued` evicted pods wait in the queue."""

    placements: tuple[Placement, ...]
    evictions: tuple[Eviction, ...]
    moves: tuple[Placement, ...]
    requeued: tuple[PodUid, ...]
    lost_gpu_hours: float


def lost_gpu_hours(p: Placement, now: float, checkpoint_s: float | None) -> float:
    """GPU-hours a pod loses if it is stopped at `now` (work since its last checkpoint)."""
    ran = max(0.0, now - p.started_s)
    if checkpoint_s:
        ran = ran % checkpoint_s
    return len(p.gpus) * p.milli / GPU_MILLI * ran / HOUR_S


def wants_defrag(unit: Sequence[PodSpec], now: float, settings: DefragSettings) -> bool:
    """Whether a pending unit is one defragmentation is for: whole GPUs, big and waiting long enough."""
    return (bool(unit) and all(p.gpu.kind is GpuKind.WHOLE for p in unit)
            and sum(p.gpu.count for p in unit) >= settings.min_gpus
            and now - min(p.created_s for p in unit) >= settings.min_wait_s)


def small(p: Placement) -> bool:
    """The size rule of movable pods: a fraction of one GPU or one whole GPU, no gang, MIG or claims."""
    return len(p.gpus) == 1 and p.pod_group is None and not p.mig_slices and not p.claims


def plan(snapshot: ClusterSnapshot, unit: Sequence[PodSpec], profile: Profile, *, now: float,
         rng: random.Random, settings: DefragSettings, ledger: DefragLedger = DefragLedger(),
         budgets: Sequence[Budget] = (),
         specs: Callable[[PodUid], PodSpec | None] = lambda _uid: None) -> DefragPlan | str:
    """The cheapest moves that let `unit` run (module docstring), or why there are none.

    `unit`: a whole-GPU pod, or the pending members of one gang (the first `need` of them are
    placed, `need` being what the gang lacks of minMember). Never mutates `snapshot`."""
    if not unit or any(p.gpu.kind is not GpuKind.WHOLE for p in unit):
        return "defragmentation is only for pods asking whole GPUs"
    statement = Statement(snapshot, profile, now, rng, explain=False)
    members = list(unit[:_needed(snapshot, unit)])
    search = _Search(statement, settings, ledger, budgets, now)
    why = search.fragmented(members)
    if why is not None:
        return why
    placed: list[Placement] = []
    for pod in members:
        fitted = statement.place(pod)
        got = fitted if isinstance(fitted, Placement) else search.make_room(pod)
        if isinstance(got, str):
            return got
        placed.append(got)
    if not search.victims:
        return "the unit fits without moving anything"
    lost = sum(lost_gpu_hours(p, now, settings.checkpoint_s) for p in search.victims)
    left = ledger.left(settings, now)
    if lost > left + 1e-9:
        return f"moves would lose {lost:.2f} GPU-hours; the budget has {max(left, 0.0):.2f} left this hour"
    moves, requeued = _replace(statement, search.victims, specs)
    key = unit[0].uid
    evictions = tuple(Eviction(p.pod, f"moved to make room for pod {unit[0].key} (defragmentation)", key)
                      for p in search.victims)
    return DefragPlan(tuple(placed), evictions, tuple(moves), tuple(requeued), lost)


def _needed(snapshot: ClusterSnapshot, unit: Sequence[PodSpec]) -> int:
    group = snapshot.pod_groups.get(unit[0].pod_group or "")
    if unit[0].pod_group is None or group is None:
        return len(unit)
    running = sum(1 for p in snapshot.placements.values() if p.pod_group == unit[0].pod_group)
    return max(group.min_member - running, 0)


def _replace(statement: Statement, victims: Sequence[Placement], specs: Callable[[PodUid], PodSpec | None]
             ) -> tuple[list[Placement], list[PodUid]]:
    """Place each victim again where it fits now (a move), or leave it to the queue."""
    moves: list[Placement] = []
    requeued: list[PodUid] = []
    for victim in victims:
        spec = specs(victim.pod)
        got = statement.place(spec) if spec is not None else None
        if isinstance(got, Placement):
            moves.append(got)
        else:
            requeued.append(victim.pod)
    return moves, requeued


Cost = tuple[int, float]


class _Search:
    """The movable pods of one snapshot and the plan being built through `statement`."""

    def __init__(self, statement: Statement, settings: DefragSettings, ledger: DefragLedger,
                 budgets: Sequence[Budget], now: float) -> None:
        self.statement, self.settings, self.now = statement, settings, now
        running = list(statement.snapshot.placements.values())
        self.budgets = [(b, b.allowed(running)) for b in budgets]
        self.taken = [0] * len(self.budgets)
        self.victims: list[Placement] = []
        self.gone: set[PodUid] = set()
        """The victims' uids."""
        self.movable: dict[PodUid, Placement] = {}
        self.on_gpu: dict[tuple[int, int], list[Placement]] = {}
        index = statement.view.cluster.index
        for p in running:
            for j in p.gpus:
                self.on_gpu.setdefault((index[p.node], j), []).append(p)
            if small(p) and p.preemptible and now - ledger.moved_at.get(p.pod, -np.inf) >= settings.window_s:
                self.movable[p.pod] = p

    def fragmented(self, members: Sequence[PodSpec]) -> str | None:
        """None if the unit is blocked only by fragmentation, else why defragmenting cannot help."""
        s = self.statement
        if len(members) == 1 and len(s.feasible_unmasked(members[0])):
            return "the pod fits without moving anything"
        empty = s.view.usage.copy()
        index = s.view.cluster.index
        empty.place_all(((p, index[p.node]) for p in s.snapshot.placements.values()), sign=-1)
        eligible = s.feasible_under(members[0], empty)
        free = int(s.view.usage.free_whole[eligible].sum())
        need = sum(p.gpu.count for p in members)
        if free < need:
            return (f"not fragmentation: {free} free whole GPUs on the {len(eligible)} eligible nodes, "
                    f"{need} needed")
        return None

    def _may_move(self, p: Placement) -> bool:
        if p.pod not in self.movable:
            return False
        return all(self.taken[k] < allowed for k, (b, allowed) in enumerate(self.budgets) if b.selects(p))

    def _gpu_cost(self, node: int, j: int) -> tuple[Cost, list[Placement]] | None:
        """What freeing GPU j of `node` takes (None: a pod there cannot be moved)."""
        pods = [p for p in self.on_gpu.get((node, j), ()) if p.pod not in self.gone]
        if not all(self._may_move(p) for p in pods):
            return None
        lost = sum(lost_gpu_hours(p, self.now, self.settings.checkpoint_s) for p in pods)
        return (len(pods), lost), pods

    def _node(self, pod: PodSpec, node: int) -> tuple[Cost, list[Placement]] | None:
        """The cheapest pods to evict from `node` for `pod` (None: it cannot be cleared enough)."""
        s = self.statement
        usage = s.view.usage
        n = int(s.view.cluster.gpu_count[node])
        usable = usage.usable()[node]
        options: list[tuple[Cost, int, list[Placement]]] = []
        free = 0
        for j in range(n):
            if not usable[j]:
                continue
            if usage.gpu_used_milli[node, j] == 0 and usage.gpu_used_mem[node, j] == 0:
                free += 1
                continue
            found = self._gpu_cost(node, j)
            if found is not None:
                options.append((found[0], j, found[1]))
        missing = pod.gpu.count - free
        if missing > len(options):
            return None
        options.sort(key=lambda o: (o[0], o[1]))
        chosen: list[Placement] = []
        taken = list(self.taken)
        for _cost, _j, pods in options:
            if missing <= 0:
                break
            hits = [k for k, (b, _) in enumerate(self.budgets) for p in pods if b.selects(p)]
            if any(taken[k] + hits.count(k) > self.budgets[k][1] for k in set(hits)):
                continue  # the budget has too few disruptions left for this GPU's pods
            for k in hits:
                taken[k] += 1
            chosen.extend(pods)
            missing -= 1
        if missing > 0:
            return None
        what_if = usage.copy()
        index = s.view.cluster.index
        what_if.place_all(((p, index[p.node]) for p in chosen), sign=-1)
        if not s.fits(pod, node, what_if):
            return None  # CPU, memory or another filter still says no
        lost = sum(lost_gpu_hours(p, self.now, self.settings.checkpoint_s) for p in chosen)
        return (len(chosen), lost), chosen

    def make_room(self, pod: PodSpec) -> Placement | str:
        """Evict the cheapest pods on the best node for `pod` and place it there, or say why not."""
        s = self.statement
        usage = s.view.usage.copy()
        index = s.view.cluster.index
        usage.place_all(((p, index[p.node]) for p in self.movable.values() if p.pod not in self.gone), sign=-1)
        best: tuple[Cost, int, list[Placement]] | None = None
        for node in s.feasible_under(pod, usage).tolist():
            found = self._node(pod, node)
            if found is not None and (best is None or (found[0], node) < (best[0], best[1])):
                best = (found[0], node, found[1])
        if best is None:
            return f"fragmented, but no node can be cleared for pod {pod.key} with movable pods"
        _cost, node, chosen = best
        for p in chosen:
            s.evict(p)
            self.victims.append(p)
            self.gone.add(p.pod)
            for k, (b, _) in enumerate(self.budgets):
                self.taken[k] += b.selects(p)
        got = s.place_on(pod, node)
        return got if isinstance(got, Placement) else f"pod {pod.key}: {got.message}"
