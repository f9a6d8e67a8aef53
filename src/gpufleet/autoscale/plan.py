"""`plan()`: which nodes to add for the pending pods, and which GPU nodes to remove.

Steps (pure: no I/O, no clock, randomness only from a fixed seed):
1. `schedule()` once on the real snapshot: what fits on the current nodes needs no new node;
2. the rest is packed onto new nodes by the fast greedy search (`packing`): gangs all or
   nothing, fractions by GPU-milli per GPU, MIG by slices of the template's layout, the
   cheapest template per pod served within its pool limits;
3. check: `schedule()` on the cluster with those binds applied plus the planned nodes. The
   plan reports exactly what the scheduler did there: the pods it bound on each new node.
   Planned pods it did not bind are packed again onto extra nodes (at most `CHECK_ROUNDS`
   times, of the templates the check filled last), planned nodes it left empty are dropped
   and the check is run again. Each check binds what a full `schedule()` would; `check`
   leaves out the work that cannot change that (queue accounting, current nodes no leftover
   pod fits, and the pods before the first one a change of the planned nodes can affect);
4. removals (`removal`): idle or consolidatable GPU nodes, judged by GPU use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from gpufleet.autoscale import check as checking
from gpufleet.autoscale.fit import Room
from gpufleet.autoscale.packing import Packer, Pool, units_of
from gpufleet.autoscale.removal import RemovalSettings, removals
from gpufleet.autoscale.template import TEMPLATE_LABEL, NodeTemplate
from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import Profile, build_for
from gpufleet.framework.profiles import builtin
from gpufleet.model import ClusterSnapshot, ModelError, NodeInfo, NodeName, PodSpec, PodUid

CHECK_ROUNDS = 1
"""Extra packing rounds for planned pods the check did not bind."""
REPAIR_COPIES = 3
"""A repair round packs room for the pods the check left out this many times over.

One round of three copies leaves about as many pods for the next plan as two rounds of two
(800 against 798 over seven seeds of `bench/planner.py`) at a cost per hour within 1 %
(lower on five of the seven), and redoes the check once instead of twice
(docs/performance.md)."""


GAVE_ROOM_AWAY = ("planned, but in the check the scheduler gave its room to other pods (it places pods in "
                  "priority and creation order); the next plan adds room for it")
"""Why a pod the search packed is unplaceable all the same."""


@dataclass(frozen=True, slots=True)
class NodeAdd:
    """`count` new nodes of `template`; `pods[k]` are the pending pods meant for the k-th
    (`names[k]` is the name it had in the check)."""

    template: NodeTemplate
    count: int
    pods: tuple[tuple[PodUid, ...], ...]
    names: tuple[NodeName, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    add: tuple[NodeAdd, ...] = ()
    remove: tuple[NodeName, ...] = ()
    unplaceable: Mapping[PodUid, str] = field(default_factory=lambda: MappingProxyType({}))
    """Pending pods that neither fit now nor on any planned node, with the reason."""
    fits_now: tuple[PodUid, ...] = ()
    """Pending pods that fit on the current nodes (no node needed)."""
    cost_per_hour_added: float = 0.0
    ready_after_s: float = 0.0
    """The longest start delay among the added templates (0 when nothing is added)."""

    @property
    def served(self) -> frozenset[PodUid]:
        """Pending pods the plan makes room for on new nodes."""
        return frozenset(uid for a in self.add for node in a.pods for uid in node)

    def nodes(self) -> list[NodeInfo]:
        """The planned nodes as the check built them."""
        return [a.template.node_info(name) for a in self.add for name in a.names]

    def summary(self) -> str:
        lines = [f"add {sum(a.count for a in self.add)} node(s), {self.cost_per_hour_added:.2f}/h, "
                 f"ready after {self.ready_after_s:g} s; remove {len(self.remove)}; "
                 f"{len(self.fits_now)} pod(s) fit now, {len(self.served)} on new nodes, "
                 f"{len(self.unplaceable)} unplaceable"]
        for a in self.add:
            pods = sum(len(p) for p in a.pods)
            lines.append(f"  + {a.count} x {a.template.name} ({a.template.price_per_hour:g}/h each) for {pods} pod(s)")
        for name in self.remove:
            lines.append(f"  - {name}")
        reasons: dict[str, int] = {}
        for why in self.unplaceable.values():
            reasons[why] = reasons.get(why, 0) + 1
        for why, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  ! {n} pod(s): {why}")
        return "\n".join(lines)


def plan(pending: Sequence[PodSpec], templates: Sequence[NodeTemplate], snapshot: ClusterSnapshot, *,
         profile: Profile | None = None, max_removals: int = 10, max_removal_checks: int = 50,
         running_specs: Mapping[PodUid, PodSpec] = MappingProxyType({}), now: float = 0.0,
         check: bool = True) -> Plan:
    """Nodes to add so that the pending pods can run, and GPU nodes to remove.

    `profile` is the scheduler's (default: the built-in default profile, with the typical-task
    mix of the pending and running pods given, as the live scheduler builds it). `running_specs`
    gives the constraints of running pods for consolidation; without them a running pod is
    assumed to need its node's GPU model and to tolerate only its node's taints.

    `check=False` skips step 3 and reports the search's own packing: several times faster,
    but a few percent of the pods it serves may then land elsewhere in the real scheduler
    (see docs/autoscaling.md)."""
    names = [t.name for t in templates]
    if len(set(names)) != len(names):
        raise ModelError("node templates: name", f"template names must be unique, got {names}")
    prof = profile if profile is not None else build_for(builtin("default"), [*pending, *running_specs.values()])
    first = schedule(snapshot, pending, prof, now=now, rng=random.Random(0),
                     explain=False)  # the pods left are packed, whatever the reason
    after = snapshot.apply(first.binds)
    bound_now = {p.pod for p in first.binds}
    left = [p for p in pending if p.uid not in bound_now]
    if check:
        adds, unplaceable, also_now = _plan_adds(left, templates, after, prof, now)
    else:
        adds, unplaceable, also_now = _search_only(left, templates, after)
    gone = removals(after, templates, prof, specs=running_specs,
                    settings=RemovalSettings(max_removals, max_removal_checks), now=now)
    cost = sum(a.count * a.template.price_per_hour for a in adds)
    delay = max((a.template.start_delay_s for a in adds), default=0.0)
    return Plan(tuple(adds), gone, MappingProxyType(unplaceable), tuple(sorted(bound_now | also_now)), cost, delay)


def _existing_pool(snapshot: ClusterSnapshot, templates: Sequence[NodeTemplate]) -> Pool:
    index = {t.name: i for i, t in enumerate(templates)}
    pool = Pool(templates, [0] * len(templates), [0] * len(templates))
    for node in snapshot.cluster.nodes:
        t = index.get(node.labels.get(TEMPLATE_LABEL, ""))
        if t is not None:
            pool.nodes[t] += 1
            pool.gpus[t] += len(node.gpus)
    return pool


def _plan_adds(left: list[PodSpec], templates: Sequence[NodeTemplate], after: ClusterSnapshot, profile: Profile,
               now: float) -> tuple[list[NodeAdd], dict[PodUid, str], set[PodUid]]:
    """Pack, check with `schedule()`, repack what the check did not bind, drop empty nodes.

    Every check after the first is `Check.rerun`: the same binds as a full `schedule()`,
    computed from the first pod the change of planned nodes can affect (`autoscale.check`)."""
    packer = Packer(templates, _existing_pool(after, templates))
    packing = packer.run(units_of(left))
    packed_out = dict(packing.unplaceable)
    taken: set[str] = {n.name for n in after.cluster.nodes}
    planned: list[tuple[NodeName, int]] = []  # (name, template index) per room
    check = checking.Check(after, left, templates, profile, now)
    outcome: checking.Outcome | None = None
    spec = {p.uid: p for p in left}
    for round_ in range(CHECK_ROUNDS + 1):
        for room in _flexible_first(packer, packing.rooms[len(planned):], spec):
            planned.append((_fresh_name(len(planned), templates[room.template].name, taken), room.template))
        outcome = check.run(planned) if outcome is None else check.rerun(outcome, planned)
        bound = {p.pod for p in outcome.result.binds}
        meant = {uid for room in packing.rooms for uid in room.pods}
        missing = [p for p in left if p.uid in meant and p.uid not in bound]
        if not missing or round_ == CHECK_ROUNDS:
            break
        # The scheduler packed differently from the search: what it left out goes onto fresh nodes.
        # Capacity for them REPAIR_COPIES times over: the scheduler's score ties and creation order
        # let other pods take part of any new node too; nodes left empty are dropped below. New nodes go
        # to the template the scheduler reached last among those a pod fits: a template whose
        # planned nodes it filled early hands a new node to the first pod after that which fits
        # (often not one left out), and the check must be redone from there.
        packer.close_all(prefer=checking.reached(outcome))
        packing = packer.run(units_of(missing) * REPAIR_COPIES)
        packed_out.update(packing.unplaceable)
    assert outcome is not None
    used = {p.node for p in outcome.result.binds}
    kept = [x for x in planned if x[0] in used]
    if len(kept) < len(planned):
        planned = kept
        outcome = check.rerun(outcome, planned)
    return _report(left, planned, templates, outcome.result, packed_out)


def _search_only(left: list[PodSpec], templates: Sequence[NodeTemplate], after: ClusterSnapshot
                 ) -> tuple[list[NodeAdd], dict[PodUid, str], set[PodUid]]:
    packing = Packer(templates, _existing_pool(after, templates)).run(units_of(left))
    taken: set[str] = {n.name for n in after.cluster.nodes}
    by_template: dict[int, list[tuple[NodeName, tuple[PodUid, ...]]]] = {}
    for k, room in enumerate(packing.rooms):
        name = _fresh_name(k, templates[room.template].name, taken)
        by_template.setdefault(room.template, []).append((name, tuple(room.pods)))
    adds = [NodeAdd(templates[t], len(rows), tuple(r[1] for r in rows), tuple(r[0] for r in rows))
            for t, rows in sorted(by_template.items())]
    return adds, dict(packing.unplaceable), set()


def _flexible_first(packer: Packer, rooms: Sequence[Room], spec: Mapping[PodUid, PodSpec]) -> list[Room]:
    """Rooms in naming order: those whose pods could go on many templates first.

    The scheduler breaks score ties by the lowest node name. Naming the nodes meant for
    flexible pods first makes a flexible pod (say, any GPU model) take one of those rather
    than a node meant for a pod that can run on that template only, which then finds it full."""
    def flexibility(room: Room) -> int:
        return min((len(packer.compatible(spec[u])) for u in room.pods), default=0)
    return sorted(rooms, key=lambda r: -flexibility(r))


def _fresh_name(k: int, template: str, taken: set[str]) -> NodeName:
    name = f"planned-{k:05d}-{template}"
    while name in taken:
        name += "-x"
    taken.add(name)
    return NodeName(name)


def _report(left: Sequence[PodSpec], planned: Sequence[tuple[NodeName, int]], templates: Sequence[NodeTemplate],
            result: CycleResult, packed_out: Mapping[PodUid, str]
            ) -> tuple[list[NodeAdd], dict[PodUid, str], set[PodUid]]:
    on_node: dict[NodeName, list[PodUid]] = {}
    for p in result.binds:
        on_node.setdefault(p.node, []).append(p.pod)
    by_template: dict[int, list[NodeName]] = {}
    for name, t in planned:
        by_template.setdefault(t, []).append(name)
    adds = [NodeAdd(templates[t], len(names), tuple(tuple(on_node.get(n, ())) for n in names), tuple(names))
            for t, names in sorted(by_template.items())]
    planned_names = {name for name, _ in planned}
    also_now = {p.pod for p in result.binds if p.node not in planned_names}
    bound = {p.pod for p in result.binds}
    unplaceable: dict[PodUid, str] = {}
    for pod in left:
        if pod.uid in bound:
            continue
        unplaceable[pod.uid] = packed_out.get(pod.uid, GAVE_ROOM_AWAY)
    return adds, unplaceable, also_now
