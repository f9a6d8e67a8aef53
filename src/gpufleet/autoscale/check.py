"""The planner's check: what `schedule()` does with the leftover pending pods on the current
nodes plus the planned ones, computed without the parts of the work that cannot change it.

`plan()` runs the check once per repair round and once more after dropping the planned nodes
that stayed empty. One check is a `schedule()` of every leftover pod (~8,000 in
`bench/planner.py`), so the checks were most of a plan's time. Four savings, each exact
(the binds are those of a full `schedule()` of the leftover pods on the current cluster plus
the planned nodes; `tests/autoscale/test_check.py` compares them on random cases):

1. **Queueing.** The planner passes no queues, so every pod runs in the `default` queue. With
   one queue the fair order is the priority order, no queue limit applies, and reclaim finds
   no victim (it takes only from other queues), so a profile whose queueing is fair or
   priority order, with reclaim but without priority preemption and with no pod past the
   starvation bound, binds exactly what the plain kube-scheduler loop binds
   (`core.cycle.plain_without_queues`), and `schedule()` without queues takes that loop. It
   skips the queue accounting and the victim index, which cost a few ms per `schedule()`
   whatever its size: most of the removal checks' time.
2. **Current nodes no leftover pod can use.** A current node on which no leftover pod fits
   when the check starts (the profile's own filters, on the cluster after the pods that fit
   now are bound) never gets a pod in the check: filters judge a node on its own state, and
   that state changes only when a pod is placed there. Such nodes are left out. Nodes that
   run members of a pending gang stay in (they count towards its minMember).
3. **Changes of the planned nodes.** A planned node is *fresh* until the scheduler places its
   first pod there. Two fresh nodes of one template look the same to every filter and
   scorer (different names only), so while a fresh node of the template is left, dropping
   another one (that got no pod) or adding one named after every other node changes no
   decision: feasibility is the same, the raw scores of the other nodes are the same, min-max
   normalisation sees the same minimum and maximum, and a tie still goes to the lower name.
   A change can first matter at the first pod that fits on a fresh node of a changed template
   when, in the old check, no fresh node of it was left (added nodes) or only dropped ones
   were (dropped nodes); a gang that was rolled back counts as soon as a member fits on one.
   Everything before that pod is kept and only the units from there on are scheduled again,
   on the snapshot with the kept binds applied (the core is a loop over units; what carries
   from one unit to the next is the usage and, as a cache, the failed constraint keys, which
   a new run recomputes to the same answer since usage only grew). When the change only
   drops nodes, that snapshot is the last run's with its binds up to there placed, the
   dropped nodes hidden by `FreshFirst`, rather than a new one (`Check.narrowed`).
4. **Copies of an empty node.** For the same reason, of the fresh nodes of one template only
   the lowest-named can be chosen; the filter `FreshFirst` lets only that one pass, so the
   scorers see one empty node per template instead of hundreds (~10 % of a plan's time).

Savings 2, 3 and 4 need plugins that judge and score each node on its own state, do not draw
random numbers and normalise (if at all) by min-max: the in-tree filters, `BestFit`,
`DotProduct`, `GpuPacking`, `GpuClustering`, `MostAllocated`, `LeastAllocated`, `Topology`,
`PreferUsedNodes`, `RecentFaults`, and `FGD` and `FragAware` (a node's score is a function of
its own state and the fixed typical-task mix; they do not normalise). With any other plugin
(`Random`, an out-of-tree one) or with pre-filter or permit plugins every check is a full
`schedule()`.

Checks do not explain why a pod is unschedulable (`schedule(explain=False)`): the plan
reads only who was bound where.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.autoscale.template import NodeTemplate
from gpufleet.core import ordering
from gpufleet.core.cycle import plain_without_queues, schedule
from gpufleet.core.statement import constraint_key
from gpufleet.core.result import CycleResult
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FilterPlugin, ReservePlugin, View
from gpufleet.framework.plugins.fgd import Fgd
from gpufleet.framework.plugins.fgd_baselines import BestFit, DotProduct, GpuClustering, GpuPacking
from gpufleet.framework.plugins.frag_aware import FragAware
from gpufleet.framework.plugins.gpu_fit import GpuFit
from gpufleet.framework.plugins.node_affinity import NodeAffinity
from gpufleet.framework.plugins.node_resources import NodeResourcesFit
from gpufleet.framework.plugins.prefer_used import PreferUsedNodes
from gpufleet.framework.plugins.recent_faults import RecentFaults
from gpufleet.framework.plugins.resource_alloc import LeastAllocated, MostAllocated
from gpufleet.framework.plugins.taint_toleration import TaintTolerationFilter
from gpufleet.framework.plugins.topology import Topology
from gpufleet.framework.profile import Profile
from gpufleet.model import Cluster, ClusterSnapshot, NodeInfo, NodeName, Placement, PodSpec, PodUid, Usage

NODE_LOCAL_FILTERS: frozenset[type] = frozenset({NodeResourcesFit, TaintTolerationFilter, NodeAffinity, GpuFit})
"""Filters that judge a node on its own state only."""
NODE_LOCAL_SCORES: frozenset[type] = frozenset({BestFit, DotProduct, GpuPacking, GpuClustering, MostAllocated,
                                                LeastAllocated, Topology, PreferUsedNodes, RecentFaults, Fgd,
                                                FragAware})
"""Scorers that score a node on its own state (and the gang's chosen nodes; FGD's and
FragAware's also on the typical-task mix, fixed when the profile is built), draw no random
numbers and normalise, if at all, by min-max over the feasible nodes (BestFit)."""
NODE_LOCAL_OTHERS: frozenset[type] = frozenset({Topology, BestFit, DotProduct, GpuPacking, GpuFit, Fgd, FragAware})
"""Reserve plugins and device pickers that keep to the chosen node (and the gang's state)."""

NEVER = 1 << 62
"""First use of a planned node that got no pod."""

BoolArray = npt.NDArray[np.bool_]


def node_local(profile: Profile) -> bool:
    """Whether every plugin of `profile` judges and scores nodes one by one (see the module doc)."""
    return (not profile.pre_filters and not profile.permits
            and all(type(p) in NODE_LOCAL_FILTERS for p in profile.filters)
            and all(type(p) in NODE_LOCAL_SCORES for p, _ in profile.scores)
            and all(type(p) in NODE_LOCAL_OTHERS for p in profile.reserves)
            and (profile.device_picker is None or type(profile.device_picker) in NODE_LOCAL_OTHERS))


@dataclass(slots=True)
class _View:
    cluster: Cluster
    usage: Usage


def feasible(profile: Profile, pods: Sequence[PodSpec], cluster: Cluster, usage: Usage, now: float) -> BoolArray:
    """[pod, node]: whether the profile's filters pass `pods[k]` on node i at `usage`."""
    view = _View(cluster, usage)
    state = CycleState(random.Random(0), now)
    out = np.ones((len(pods), cluster.n_nodes), dtype=np.bool_)
    for k, pod in enumerate(pods):
        for plugin in profile.filters:
            mask = plugin.filter(state, pod, view)
            if mask is not None:
                out[k] &= mask
    return out


class FreshFirst:
    """A filter the check adds to node-local profiles: of the planned nodes of one template
    that have no pod yet (fresh), only the lowest-named passes; the next one passes once
    that one gets a pod. Nodes in `hidden` (planned nodes a later check dropped, still in
    the snapshot it reuses) never pass.

    It changes no decision and no explanation. Fresh nodes of one template are the same to
    every node-local filter and scorer, and min-max normalisation sees the same lowest and
    highest raw score while one of them is left, so the node chosen is the one a plain
    `schedule()` chooses: the lowest-named of the equals. An unschedulable pod fits on no
    visible node, so every hidden node fails an earlier filter, and `explain` attributes it
    there as before. What it saves is scoring hundreds of copies of an empty node for every
    pod (docs/performance.md)."""

    name = "FreshFirst"

    def __init__(self, groups: Sequence[Sequence[int]], hidden: Sequence[int] = ()) -> None:
        self.groups = groups
        """Per template: its planned nodes' indices, ascending (name order)."""
        self.hidden = hidden

    def _state(self, state: CycleState, view: View) -> tuple[BoolArray, dict[int, list[int]]]:
        """(which nodes pass, per planned node its template's fresh nodes in name order)."""
        found: tuple[BoolArray, dict[int, list[int]]] | None = state.data.get(self)
        if found is None:
            u, c = view.usage, view.cluster
            passing = np.ones(c.n_nodes, dtype=np.bool_)
            passing[list(self.hidden)] = False
            fresh_of: dict[int, list[int]] = {}
            for nodes in self.groups:
                fresh = [i for i in nodes if u.free_pods[i] == c.cap_pods[i]]
                passing[fresh[1:]] = False
                for i in nodes:
                    fresh_of[i] = fresh
            found = state.data[self] = (passing, fresh_of)
        return found

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray:
        return self._state(state, view)[0]

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        return []  # never the first filter a node fails when a pod is unschedulable (class docstring)

    def reserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        passing, fresh_of = self._state(state, view)
        fresh = fresh_of.get(node)
        if fresh and fresh[0] == node:
            fresh.pop(0)
            if fresh:
                passing[fresh[0]] = True

    def unreserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        passing, fresh_of = self._state(state, view)
        fresh = fresh_of.get(node)
        if fresh is None or view.usage.free_pods[node] != view.cluster.cap_pods[node]:
            return
        if fresh:
            passing[fresh[0]] = False
        bisect.insort(fresh, node)
        passing[fresh[0]] = True


_f: FilterPlugin = FreshFirst(())
_r: ReservePlugin = FreshFirst(())


@dataclass(frozen=True, slots=True)
class Outcome:
    """One check: the planned nodes `(name, template index)` and what `schedule()` did."""

    planned: tuple[tuple[NodeName, int], ...]
    result: CycleResult
    first_use: Mapping[NodeName, int]
    """Per node that got a pod: the position (in scheduling order) of the first pod bound there."""
    runs: int = 1
    """How many `schedule()` calls made it, counting the ones of the outcomes it was rebuilt from."""
    scheduled: int = 0
    """How many pods those calls were given in all."""
    base: ClusterSnapshot | None = None
    """The snapshot the last of those calls ran on: the binds of the pods before `base_start` applied."""
    base_start: int = 0
    """The position (in scheduling order) of the first pod that call was given."""


def reached(outcome: Outcome) -> dict[int, int]:
    """Per template with planned nodes: the position (in scheduling order) of the first pod
    bound on the last of its nodes to get one, NEVER while one of them got none. From there
    on the check has no fresh node of the template left; a node of it added later changes the
    check from the first pod after that position that fits on it."""
    out: dict[int, int] = {}
    for name, t in outcome.planned:
        out[t] = max(out.get(t, -1), outcome.first_use.get(name, NEVER))
    return out


class Check:
    """Checks of planned node sets for one plan: `run` schedules every leftover pod, `rerun`
    only what a change of the planned nodes can affect (see the module docstring)."""

    def __init__(self, after: ClusterSnapshot, left: Sequence[PodSpec], templates: Sequence[NodeTemplate],
                 profile: Profile, now: float, *, incremental: bool = True) -> None:
        self.after = after
        self.left = list(left)
        self.templates = templates
        self.now = now
        self.profile = profile
        self.incremental = incremental and node_local(profile) and plain_without_queues(profile.queueing, left, now)
        self._infos: dict[tuple[NodeName, int], NodeInfo] = {}
        self._prototypes: dict[int, NodeInfo] = {}
        units = ordering.order(self.left)
        self.order: list[PodSpec] = [p for u in units for p in u]
        self.pos: dict[PodUid, int] = {p.uid: i for i, p in enumerate(self.order)}
        self.unit_start: list[int] = []
        """Per position: where its unit starts."""
        self.gangs: list[tuple[int, list[PodSpec]]] = []
        for u in units:
            start = len(self.unit_start)
            self.unit_start.extend([start] * len(u))
            if u[0].pod_group is not None:
                self.gangs.append((start, u))
        self._reps, self._class_of = self._classes(self.order) if self.incremental else ([], [])
        """One pod per constraint key, and per position the index of its key."""
        self.existing = self._existing_nodes() if self.incremental else list(range(after.cluster.n_nodes))
        self._positions: dict[int, list[int]] = {}
        self._fresh_ok: BoolArray | None = None

    # -- building blocks ------------------------------------------------------------------
    def _classes(self, pods: Sequence[PodSpec]) -> tuple[list[PodSpec], list[int]]:
        """One pod per constraint key, and the key's index for each of `pods`."""
        reps: dict[tuple[object, ...], int] = {}
        out: list[PodSpec] = []
        index = []
        for p in pods:
            key = constraint_key(p)
            k = reps.get(key)
            if k is None:
                k = reps[key] = len(out)
                out.append(p)
            index.append(k)
        return out, index

    def _existing_nodes(self) -> list[int]:
        """Current nodes some leftover pod fits on now, and nodes running members of a pending gang."""
        c, u = self.after.cluster, self.after.usage
        keep: BoolArray = np.zeros(c.n_nodes, dtype=np.bool_)
        if self._reps:
            keep |= feasible(self.profile, self._reps, c, u, self.now).any(axis=0)
        groups = {p.pod_group for p in self.left if p.pod_group is not None}
        if groups:
            for p in self.after.placements.values():
                if p.pod_group in groups:
                    keep[c.index[p.node]] = True
        return [int(i) for i in np.flatnonzero(keep)]

    def _fresh(self) -> BoolArray:
        """[pod position, template]: whether the pod fits on an empty node of the template."""
        if self._fresh_ok is None:
            probes = Cluster([t.node_info(f"probe-{i:06d}") for i, t in enumerate(self.templates)])
            fits = feasible(self.profile, self._reps, probes, Usage(probes), self.now)
            self._fresh_ok = fits[self._class_of] if self._reps else np.zeros((0, len(self.templates)), np.bool_)
        return self._fresh_ok

    def _compatible(self, t: int) -> list[int]:
        """Positions of the pods that fit on an empty node of template t, ascending."""
        found = self._positions.get(t)
        if found is None:
            found = self._positions[t] = [int(i) for i in np.flatnonzero(self._fresh()[:, t])]
        return found

    def _node(self, name: NodeName, t: int) -> NodeInfo:
        """Planned node `name` of template t. The check's nodes of one template share one
        tuple of GPUs (whose UUIDs nothing in a check reads): building eight GPUs per node
        was most of the cost of a planned node (`Plan.nodes()` builds each node whole)."""
        info = self._infos.get((name, t))
        if info is None:
            like = self._prototypes.get(t)
            if like is None:
                like = self._prototypes[t] = self.templates[t].node_info(f"{self.templates[t].name}-{t}")
            info = self._infos[(name, t)] = NodeInfo(name, like.cpu_milli, like.mem_mib, like.max_pods, like.labels,
                                                     like.taints, like.gpus)
        return info

    def snapshot(self, planned: Sequence[tuple[NodeName, int]], binds: Sequence[Placement] = ()) -> ClusterSnapshot:
        """The checked cluster: the current nodes kept (as they are in `after`: running pods,
        GPU health, readiness) plus the planned ones, with `binds` applied."""
        old_c, old_u = self.after.cluster, self.after.usage
        current = [old_c.nodes[i] for i in self.existing]
        cluster = Cluster(current + [self._node(name, t) for name, t in planned])
        usage = Usage(cluster)
        rows = [(cluster.index[old_c.names[i]], i) for i in self.existing]
        for new, old in rows:
            g = int(old_c.gpu_count[old])
            usage.gpu_healthy[new, :g] = old_u.gpu_healthy[old, :g]
            usage.node_ready[new] = old_u.node_ready[old]
            usage.fault_at[new] = old_u.fault_at[old]
        kept = {old_c.names[i] for i in self.existing}
        placements = {uid: p for uid, p in self.after.placements.items() if p.node in kept}
        usage.place_all((p, cluster.index[p.node]) for p in placements.values())
        for new, _ in rows:
            usage.refresh_row(new)
        for p in binds:
            placements[p.pod] = p
        usage.place_all((p, cluster.index[p.node]) for p in binds)
        return ClusterSnapshot(cluster, usage, MappingProxyType(placements), self.after.pod_groups)

    def narrowed(self, old: Outcome, planned: Sequence[tuple[NodeName, int]], start: int) -> ClusterSnapshot | None:
        """The snapshot for the check of `planned` from position `start`, made from the one
        `old`'s last `schedule()` ran on, when `planned` only drops nodes of `old` (that got no
        pod before `start`; `parting` ensures it): its binds up to `start` are placed, and
        `checking_profile` hides the dropped nodes. Cheaper than a new snapshot, which builds
        every node and places every kept bind again. None when it does not apply."""
        base = old.base
        if base is None or start < old.base_start or not {n for n, _ in planned} <= {n for n, _ in old.planned}:
            return None
        if any(name not in base.cluster.index for name, _ in planned):
            return None  # `old` kept an older run's snapshot while adding nodes that changed nothing
        binds = [b for b in old.result.binds if old.base_start <= self.pos[b.pod] < start]
        usage = base.usage.copy()
        usage.place_all((p, base.cluster.index[p.node]) for p in binds)
        placements = dict(base.placements)
        placements.update((p.pod, p) for p in binds)
        return ClusterSnapshot(base.cluster, usage, MappingProxyType(placements), base.pod_groups)

    def checking_profile(self, snap: ClusterSnapshot, planned: Sequence[tuple[NodeName, int]]) -> Profile:
        """The profile a check of `planned` runs on `snap`: with `FreshFirst` when incremental
        (hiding the nodes of `snap` that are neither current nodes kept nor in `planned`)."""
        if not self.incremental:
            return self.profile
        groups: dict[int, list[int]] = {}
        for name, t in planned:
            groups.setdefault(t, []).append(snap.cluster.index[name])
        hidden: list[int] = []
        if snap.cluster.n_nodes > len(self.existing) + len(planned):
            shown = {name for name, _ in planned} | {self.after.cluster.names[i] for i in self.existing}
            hidden = [i for i, name in enumerate(snap.cluster.names) if name not in shown]
        fresh = FreshFirst([sorted(nodes) for nodes in groups.values()], hidden)
        return dataclasses.replace(self.profile, filters=self.profile.filters + (fresh,),
                                   reserves=self.profile.reserves + (fresh,))

    def _schedule(self, snap: ClusterSnapshot, pods: Sequence[PodSpec],
                  planned: Sequence[tuple[NodeName, int]]) -> CycleResult:
        return schedule(snap, pods, self.checking_profile(snap, planned), now=self.now, rng=random.Random(0),
                        explain=False)

    def _outcome(self, planned: Sequence[tuple[NodeName, int]], result: CycleResult, runs: int,
                 scheduled: int, base: ClusterSnapshot | None, base_start: int) -> Outcome:
        first: dict[NodeName, int] = {}
        for b in result.binds:
            i = self.pos[b.pod]
            if i < first.get(b.node, NEVER):
                first[b.node] = i
        return Outcome(tuple(planned), result, MappingProxyType(first), runs, scheduled, base, base_start)

    # -- checks ---------------------------------------------------------------------------
    def run(self, planned: Sequence[tuple[NodeName, int]]) -> Outcome:
        """`schedule()` of every leftover pod on the kept current nodes plus `planned`."""
        snap = self.snapshot(planned)
        result = self._schedule(snap, self.order, planned)  # the same pods, sorted already
        return self._outcome(planned, result, 1, len(self.left), snap, 0)

    def rerun(self, old: Outcome, planned: Sequence[tuple[NodeName, int]]) -> Outcome:
        """The check of `planned`, reusing `old` up to the first pod the change can affect."""
        start = self.parting(old, planned) if self.incremental else 0
        if start == 0:
            done = self.run(planned)
            return dataclasses.replace(done, runs=old.runs + 1, scheduled=old.scheduled + done.scheduled)
        if start >= len(self.order):
            result = CycleResult(old.result.binds, (), dict(old.result.unschedulable), ())
            return self._outcome(planned, result, old.runs, old.scheduled, old.base, old.base_start)
        kept = [b for b in old.result.binds if self.pos[b.pod] < start]
        rest = self.order[start:]
        snap = self.narrowed(old, planned, start) or self.snapshot(planned, kept)
        tail = self._schedule(snap, rest, planned)
        unschedulable = {uid: s for uid, s in old.result.unschedulable.items() if self.pos[uid] < start}
        unschedulable.update(tail.unschedulable)
        result = CycleResult(tuple(kept) + tail.binds, (), unschedulable, ())
        return self._outcome(planned, result, old.runs + 1, old.scheduled + len(rest), snap, start)

    def parting(self, old: Outcome, planned: Sequence[tuple[NodeName, int]]) -> int:
        """Where a check of `planned` may first decide differently from `old`: the start of
        the unit of the first pod a change can affect (len(order) when none; 0 = from scratch)."""
        before = {name for name, _ in old.planned}
        after = {name for name, _ in planned}
        dropped = [(n, t) for n, t in old.planned if n not in after]
        added = [(n, t) for n, t in planned if n not in before]
        if any(n in old.first_use for n, _ in dropped):
            return 0  # a node that got a pod is gone: nothing carries over
        if added:
            highest = max([*(self.after.cluster.names[i] for i in self.existing), *before], default="")
            if min(n for n, _ in added) <= highest:
                return 0  # a new node would win ties against older ones
        grown = {t for _, t in added}
        first = len(self.order)
        for t in sorted(grown | {t for _, t in dropped}):
            last_old = max((old.first_use.get(n, NEVER) for n, u in old.planned if u == t), default=-1)
            if t in grown:
                lo, hi = last_old, NEVER  # no fresh node of t was left: now there is one
            else:
                last_new = max((old.first_use.get(n, NEVER) for n, u in planned if u == t), default=-1)
                lo, hi = last_new, last_old  # a fresh one was left, but only among the dropped
            compatible = self._compatible(t)
            j = bisect.bisect_right(compatible, lo)
            if j < len(compatible) and compatible[j] <= hi:
                first = min(first, compatible[j])
        changed = sorted(grown | {t for _, t in dropped})
        if changed:
            fresh = self._fresh()
            bound = {b.pod for b in old.result.binds}
            for start, unit in self.gangs:
                if start >= first:
                    break
                rolled_back = not any(p.uid in bound for p in unit)
                if rolled_back and fresh[start:start + len(unit)][:, changed].any():
                    first = start
                    break
        return self.unit_start[first] if first < len(self.order) else first
