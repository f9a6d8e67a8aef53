"""The planner's search: greedy packing of pending pods onto new nodes of the cheapest template.

Pods with equal constraints (the core's `constraint_key`) form one class and are packed
together, so the work grows with classes x open nodes, not pods x nodes. Order: gangs first
(largest first), then whole-GPU pods (most GPUs first), MIG, fractions (largest first), CPU-only.
For each class:

1. fill the planned nodes already opened, of templates that can host the class (first fit);
2. for what is left (m pods), open nodes of the template with the lowest price per pod it
   would host of this demand, `price / min(pods per node, m)`, within its pool limits
   (so four 250m fractions open one 1-GPU node, not an 8-GPU one).

A gang is placed all or nothing: its members go onto open nodes and fresh nodes of the
template whose nodes for the whole gang cost least; if the pool limits leave no room for all
of them, every tentative placement is rolled back and each member gets a reason.

A repair (`close_all(prefer=...)`, for pods the check left out) opens nodes only of the
templates a class can use that rank highest in `prefer`, the cheapest of those as above, and
falls back to every template the class can use when their pool limits leave no room.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpufleet.autoscale.fit import BIG, Demand, Room, no_template_reason, static_reason
from gpufleet.autoscale.template import NodeTemplate
from gpufleet.core.statement import constraint_key
from gpufleet.model import GpuKind, NodeInfo, PodSpec, PodUid


@dataclass(slots=True)
class Unit:
    """Pods packed together: one class of interchangeable single pods, or one gang."""

    pods: list[PodSpec]
    gang: str | None = None


@dataclass(slots=True)
class Pool:
    """Nodes and GPUs of each template that exist or are planned, against its limits."""

    templates: Sequence[NodeTemplate]
    nodes: list[int]
    gpus: list[int]

    def room(self, t: int) -> int:
        """How many more nodes of template t the limits allow."""
        tpl = self.templates[t]
        left = BIG if tpl.max_nodes is None else tpl.max_nodes - self.nodes[t]
        if tpl.max_gpus is not None and tpl.gpus:
            left = min(left, (tpl.max_gpus - self.gpus[t]) // tpl.gpus)
        return max(left, 0)

    def add(self, t: int, n: int = 1) -> None:
        self.nodes[t] += n
        self.gpus[t] += n * self.templates[t].gpus


@dataclass(slots=True)
class Packing:
    rooms: list[Room] = field(default_factory=list)
    unplaceable: dict[PodUid, str] = field(default_factory=dict)


class Packer:
    def __init__(self, templates: Sequence[NodeTemplate], pool: Pool) -> None:
        self.templates = templates
        self.probes: list[NodeInfo] = [t.node_info(f"probe-{t.name}") for t in templates]
        self.empty = [Room(i, t) for i, t in enumerate(templates)]
        """An empty node of each template, never changed: a new node starts as a copy."""
        self.pool = pool
        self.out = Packing()
        self.gpu_open: list[list[int]] = [[] for _ in templates]
        """Per template, planned nodes that may still have GPU capacity."""
        self.cpu_open: list[list[int]] = [[] for _ in templates]
        """Per template, planned nodes that may still have a pod slot (for CPU-only pods)."""
        self._compat: dict[tuple[object, ...], list[int]] = {}
        self._prefer: Mapping[int, int] | None = None
        """While repairing: a rank per template; new nodes go to the class's highest-ranked templates."""
        self._saved: dict[int, Room] | None = None
        """While a gang is tried: each open node it changed, as it was before (for the rollback)."""

    # -- classes ----------------------------------------------------------------------------
    def compatible(self, pod: PodSpec) -> list[int]:
        """Templates whose empty node can host `pod` (cached per constraint key)."""
        key = constraint_key(pod)
        found = self._compat.get(key)
        if found is None:
            found = [i for i, (t, probe) in enumerate(zip(self.templates, self.probes))
                     if static_reason(t, probe, pod) is None]
            self._compat[key] = found
        return found

    def close_all(self, prefer: Mapping[int, int] | None = None) -> None:
        """Later units go onto fresh nodes only (used to repack what the check left out), of
        the templates ranked highest in `prefer` where their pool limits leave room."""
        self.gpu_open = [[] for _ in self.templates]
        self.cpu_open = [[] for _ in self.templates]
        self.out.unplaceable = {}
        self._prefer = prefer

    def _preferred(self, compat: list[int]) -> list[int]:
        if self._prefer is None or not compat:
            return compat
        rank = self._prefer
        best = max(rank.get(t, -1) for t in compat)
        return [t for t in compat if rank.get(t, -1) == best]

    def run(self, units: Sequence[Unit]) -> Packing:
        for unit in sorted(units, key=_order):
            if unit.gang is None:
                self.pack_class(unit.pods)
            else:
                self.pack_gang(unit)
        return self.out

    def _fill_open(self, d: Demand, compat: list[int], pods: list[PodSpec]) -> list[PodSpec]:
        """Put as many of `pods` as fit onto open nodes (first fit); return the rest.

        GPU demand looks only at nodes with GPU capacity left (`gpu_open`), CPU-only demand at
        nodes with a pod slot left (`cpu_open`); nodes found full are dropped from the list."""
        lists = self.cpu_open if d.kind is GpuKind.NONE else self.gpu_open
        done = 0
        for t in compat:
            kept: list[int] = []
            for r in lists[t]:
                room = self.out.rooms[r]
                if done < len(pods):
                    n = min(room.count(d), len(pods) - done)
                    if n:
                        if self._saved is not None and r not in self._saved:
                            self._saved[r] = room.copy()
                        room.take(d, [p.uid for p in pods[done:done + n]])
                        done += n
                if room.slots > 0 and (d.kind is GpuKind.NONE or room.has_gpu_left()):
                    kept.append(r)
            lists[t] = kept
            if done == len(pods):
                break
        return pods[done:]

    def _open(self, t: int, d: Demand, pods: list[PodSpec]) -> None:
        room = self.empty[t].copy()
        room.take(d, [p.uid for p in pods])
        self.out.rooms.append(room)
        r = len(self.out.rooms) - 1
        self.cpu_open[t].append(r)
        if room.has_gpu_left():
            self.gpu_open[t].append(r)
        self.pool.add(t)

    def pack_class(self, pods: list[PodSpec]) -> None:
        d = Demand.of(pods[0])
        compat = self.compatible(pods[0])
        if not compat:
            why = no_template_reason(pods[0], self.templates, self.probes)
            self.out.unplaceable.update({p.uid: why for p in pods})
            return
        pods = self._fill_open(d, compat, list(pods))
        preferred = self._preferred(compat)
        while pods:
            choice = self._cheapest(d, preferred, len(pods)) or self._cheapest(d, compat, len(pods))
            if choice is None:
                names = ", ".join(self.templates[t].name for t in compat)
                why = f"pool limits reached for every template that can host it ({names})"
                self.out.unplaceable.update({p.uid: why for p in pods})
                return
            t, per_node = choice
            full = min(len(pods) // per_node, self.pool.room(t)) if len(pods) >= per_node else 1
            for _ in range(max(full, 1)):
                self._open(t, d, pods[:per_node])
                pods = pods[per_node:]

    def _cheapest(self, d: Demand, compat: list[int], m: int) -> tuple[int, int] | None:
        """(template, pods per node) with the lowest price per pod served of `m` pods, within limits."""
        best: tuple[float, float, str] | None = None
        choice: tuple[int, int] | None = None
        for t in compat:
            if self.pool.room(t) < 1:
                continue
            per_node = self.empty[t].count(d)
            price = self.templates[t].price_per_hour
            key = (price / min(per_node, m), price, self.templates[t].name)
            if best is None or key < best:
                best, choice = key, (t, per_node)
        return choice

    # -- gangs ------------------------------------------------------------------------------
    def pack_gang(self, unit: Unit) -> None:
        # Checkpoint what a gang can touch: the open lists, the pool counts, and (as the gang
        # changes them, see `_fill_open`) the open nodes.
        saved_rooms: dict[int, Room] = {}
        self._saved = saved_rooms
        saved_lists = ([list(x) for x in self.gpu_open], [list(x) for x in self.cpu_open])
        saved_pool = (list(self.pool.nodes), list(self.pool.gpus))
        n_rooms = len(self.out.rooms)
        try:
            why = self._try_gang(unit)
        finally:
            self._saved = None
        if why is None:
            return
        for r, saved in saved_rooms.items():
            self.out.rooms[r].restore(saved)
        del self.out.rooms[n_rooms:]
        self.gpu_open, self.cpu_open = saved_lists
        self.pool.nodes, self.pool.gpus = saved_pool
        self.out.unplaceable.update({p.uid: why for p in unit.pods})

    def _try_gang(self, unit: Unit) -> str | None:
        """Place every member, or return why not (the caller rolls back)."""
        by_class: dict[tuple[object, ...], list[PodSpec]] = {}
        for p in unit.pods:
            by_class.setdefault(constraint_key(p), []).append(p)
        for members in by_class.values():
            d = Demand.of(members[0])
            compat = self.compatible(members[0])
            if not compat:
                return f"gang {unit.gang}: " + no_template_reason(members[0], self.templates, self.probes)
            rest = self._fill_open(d, compat, members)
            if not rest:
                continue
            choice = (self._gang_template(d, self._preferred(compat), len(rest))
                      or self._gang_template(d, compat, len(rest)))
            if choice is None:
                names = ", ".join(_limit_text(self.templates[t], self.pool, t) for t in compat)
                return (f"gang {unit.gang} of {len(unit.pods)} x {d.describe()} exceeds the pool limits "
                        f"({names})")
            t, per_node = choice
            while rest:
                self._open(t, d, rest[:per_node])
                rest = rest[per_node:]
        return None

    def _gang_template(self, d: Demand, compat: list[int], m: int) -> tuple[int, int] | None:
        best: tuple[float, int, str] | None = None
        choice: tuple[int, int] | None = None
        for t in compat:
            per_node = self.empty[t].count(d)
            nodes = -(-m // per_node)
            if self.pool.room(t) < nodes:
                continue
            key = (nodes * self.templates[t].price_per_hour, nodes, self.templates[t].name)
            if best is None or key < best:
                best, choice = key, (t, per_node)
        return choice


def _limit_text(t: NodeTemplate, pool: Pool, i: int) -> str:
    limits = []
    if t.max_nodes is not None:
        limits.append(f"max {t.max_nodes} nodes")
    if t.max_gpus is not None:
        limits.append(f"max {t.max_gpus} GPUs")
    return f"{t.name}: {', '.join(limits) or 'no limit'}, {pool.nodes[i]} nodes planned or existing"


def _order(unit: Unit) -> tuple[object, ...]:
    d = Demand.of(unit.pods[0])
    kind_rank = {GpuKind.WHOLE: 1, GpuKind.MIG: 2, GpuKind.FRACTION: 3, GpuKind.NONE: 4}[d.kind]
    if unit.gang is not None:
        return (0, -sum(Demand.of(p).gpu_milli() for p in unit.pods), -len(unit.pods), unit.gang)
    return (kind_rank, -d.gpu_milli(), -d.count, -d.cpu_milli, -d.mem_mib, unit.pods[0].uid)


def units_of(pods: Sequence[PodSpec]) -> list[Unit]:
    """Singles grouped by constraint key; each gang's pending members as one unit."""
    classes: dict[tuple[object, ...], list[PodSpec]] = {}
    gangs: dict[str, list[PodSpec]] = {}
    for p in pods:
        if p.pod_group is None:
            classes.setdefault(constraint_key(p), []).append(p)
        else:
            gangs.setdefault(p.pod_group, []).append(p)
    return [Unit(v) for v in classes.values()] + [Unit(v, g) for g, v in gangs.items()]
