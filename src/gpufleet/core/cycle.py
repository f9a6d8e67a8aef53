"""`schedule()`: one scheduling cycle as a pure function of a snapshot.

Steps, per unit of work (a pod, or a gang) in `ordering` order (permit plugins may veto a
tentative placement after step 3, which rolls it back):
1. reuse: a pod whose constraints equal those of a pod that already failed the filters this
   cycle (under the same queue mask) fails the same way, unless capacity was given back
   since (a gang rolled back); a pre-filter's rejection is not reused (it sees the whole pod);
2. filter all nodes at once (NumPy masks), then score the feasible ones and take the
   highest weighted score, ties to the lowest node name;
3. choose devices inside the node (the profile's device picker) and place the pod on the
   cycle's private copy of usage, updating only that node's aggregates;
4. gangs: members are placed tentatively; if fewer than minMember (counting members
   already running) fit, every tentative placement is rolled back and each member says why.

No I/O, no wall clock, no global randomness: `now` and `rng` are parameters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from gpufleet.core import explain as explaining
from gpufleet.core import ordering
from gpufleet.core import queued
from gpufleet.core.queued import QueueContext
from gpufleet.core.result import CycleResult, Eviction
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import View
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.framework.profile import Profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.status import Code, Status
from gpufleet.model import (GPU_MILLI, Cluster, ClusterSnapshot, GpuKind, Placement, PodSpec, PodUid,
                            Usage)


@dataclass(slots=True)
class _View:
    cluster: Cluster
    usage: Usage


def constraint_key(pod: PodSpec) -> tuple[object, ...]:
    """Pods with equal keys are interchangeable for filtering (not for gangs or priority)."""
    selector = tuple(sorted(pod.node_selector.items())) if pod.node_selector else ()
    return (pod.cpu_milli, pod.mem_mib, pod.gpu, pod.gpu_models, selector, pod.affinity, pod.tolerations)


class Admission(Protocol):
    """What the layer above says about each pod of a unit as it is placed (`core.queued`: queue limits)."""

    def admit(self, pod: PodSpec) -> Status | None:
        """None to try `pod` (the admission may set the cycle's node mask for it), else why not."""

    def placed(self, placement: Placement) -> None:
        """`placement` was made, tentatively for a gang member."""

    def removed(self, placement: Placement) -> None:
        """A tentative `placement` was rolled back."""

    def explain(self, pod: PodSpec, status: Status) -> Status:
        """`status` (why `pod` found no node) with the admission's own part in it added."""


class _Cycle:
    def __init__(self, snapshot: ClusterSnapshot, profile: Profile, now: float, rng: random.Random,
                 explain: bool = True) -> None:
        self.snapshot = snapshot
        self.profile = profile
        self.explain = explain
        self.view = _View(snapshot.cluster, snapshot.usage.copy())
        self.state = CycleState(rng, now)
        self.binds: list[Placement] = []
        self.unschedulable: dict[PodUid, Status] = {}
        self.failed: dict[tuple[object, ...], tuple[int, Status]] = {}
        self.in_group: dict[str, int] = {}
        """Members of each pod group placed in this cycle so far, tentative ones included."""
        self.epoch = 0
        """Bumped when capacity is given back (rollback), invalidating `failed`."""
        self.mask: np.ndarray | None = None
        """Extra node mask set by the queue layer (held nodes, per-model queue limits)."""
        self.mask_key: object = None
        """Identifies `mask` in the failure cache: pods fail alike only under the same mask."""
        self._running_groups: dict[str, int] | None = None
        self.nominated: list[Placement] = []
        self.evictions: list[Eviction] = []
        self._uniform: list[tuple[int, Callable[[CycleState, PodSpec, View], bool] | None]] = [
            (k, plugin.uniform if profile.uniform[k] else None)  # type: ignore[attr-defined]
            for k, (plugin, _) in enumerate(profile.scores)]
        """Per scorer: its `uniform` (may it say it has no preference for a pod), None if it has none."""

    # -- one pod ----------------------------------------------------------------------------
    def place(self, pod: PodSpec) -> Placement | Status:
        key = (constraint_key(pod), self.mask_key)
        hit = self.failed.get(key)
        if hit is not None and hit[0] == self.epoch:
            return hit[1]
        status = self._pre_filter(pod) if self.profile.pre_filters else None
        if status is not None:
            return status  # not cached: a pre-filter sees the whole pod, not only its constraint key
        nodes = self._feasible(pod)
        if len(nodes) == 0:
            why = (explaining.explain(self.state, pod, self.view, self.profile.filters) if self.explain
                   else f"0/{self.view.cluster.n_nodes} nodes are available.")
            status = Status(Code.UNSCHEDULABLE, (why,), "")
            self.failed[key] = (self.epoch, status)
            return status
        node = self._select(pod, nodes)
        placement = self._placement(pod, node)
        self._commit(pod, placement, node)
        denied = self._permit(pod) if self.profile.permits else None
        if denied is not None:
            self._rollback(pod, placement)
            return denied
        return placement

    def _permit(self, pod: PodSpec) -> Status | None:
        """Permit plugins see the pod tentatively placed; a denial rolls the placement back."""
        placed = self.in_group.get(pod.pod_group, 0) if pod.pod_group else 0
        for plugin in self.profile.permits:
            status = plugin.permit(self.state, pod, placed, self.view)
            if not status.ok:
                return status
        return None

    def _pre_filter(self, pod: PodSpec) -> Status | None:
        for plugin in self.profile.pre_filters:
            status = plugin.pre_filter(self.state, pod, self.view)
            if not status.ok:
                return status
        return None

    def _feasible(self, pod: PodSpec) -> np.ndarray:
        mask = self.mask
        owned = False  # whether `mask` is this call's own array (a plugin's or the queue layer's is never changed)
        for plugin in self.profile.filters:
            m = plugin.filter(self.state, pod, self.view)
            if m is None:
                continue
            if mask is None:
                mask = m
            elif owned:
                mask &= m
            else:
                mask, owned = mask & m, True
        if mask is None:
            return np.arange(self.view.cluster.n_nodes)
        return mask.nonzero()[0]

    def _select(self, pod: PodSpec, nodes: np.ndarray) -> int:
        p = self.profile
        if not p.scores:
            return int(nodes[0])
        # Score even a single feasible node: a scorer may also be the device picker (FGD).
        # A scorer with no preference for this pod adds the same value to every node: left out.
        active = [k for k, uniform in self._uniform if uniform is None or not uniform(self.state, pod, self.view)]
        if len(active) == 1:
            k = active[0]
            plugin, weight = p.scores[k]
            if (p.keeps_first_max[k] and weight > 0) or (not p.normalizing[k] and weight == 1):
                # One scorer decides, and its first highest raw score is the sum's first highest.
                return int(nodes[int(plugin.score(self.state, pod, self.view, nodes).argmax())])
        total: np.ndarray | None = None
        for k in active:
            plugin, weight = p.scores[k]
            scores = plugin.score(self.state, pod, self.view, nodes)
            if p.normalizing[k]:
                scores = plugin.normalize_score(scores)  # type: ignore[attr-defined]
            if weight != 1:
                scores = weight * scores
            total = scores if total is None else total + scores
        if total is None:
            return int(nodes[0])
        return int(nodes[int(total.argmax())])  # argmax returns the first: the lowest node name

    def _placement(self, pod: PodSpec, node: int) -> Placement:
        g = pod.gpu
        picker = self.profile.device_picker
        devices = None
        if g.kind is not GpuKind.NONE:
            devices = picker.pick_devices(self.state, pod, self.view, node) if picker else None
            if devices is None:
                devices = default_devices(pod, self.view, node)
        gpus: tuple[int, ...] = ()
        slices: tuple[int, ...] = ()
        milli = mem = 0
        if g.kind is GpuKind.MIG:
            slices = tuple(devices or ())
        elif g.kind is not GpuKind.NONE:
            gpus = tuple(devices or ())
            milli = g.milli if g.kind is GpuKind.FRACTION else GPU_MILLI
            mem = int(self.view.cluster.gpu_mem[node, gpus[0]]) if g.kind is GpuKind.WHOLE and gpus else g.mem_mib
        return Placement(pod.uid, self.view.cluster.names[node], pod.cpu_milli, pod.mem_mib, gpus, milli, mem,
                         slices, pod.pod_group, pod.queue, pod.priority, pod.preemptible, self.state.now)

    def _commit(self, pod: PodSpec, placement: Placement, node: int) -> None:
        self.view.usage.place(placement, node)
        if pod.pod_group:
            self.in_group[pod.pod_group] = self.in_group.get(pod.pod_group, 0) + 1
        for plugin in self.profile.reserves:
            plugin.reserve(self.state, pod, self.view, node)

    def _rollback(self, pod: PodSpec, placement: Placement) -> None:
        node = self.view.cluster.index[placement.node]
        self.view.usage.place(placement, node, sign=-1)
        if pod.pod_group:
            self.in_group[pod.pod_group] -= 1
        for plugin in self.profile.reserves:
            plugin.unreserve(self.state, pod, self.view, node)
        self.epoch += 1

    def running_members(self, group_key: str) -> int:
        """Members of a pod group running before this cycle (counted once per cycle)."""
        if self._running_groups is None:
            counts: dict[str, int] = {}
            for p in self.snapshot.placements.values():
                if p.pod_group is not None:
                    counts[p.pod_group] = counts.get(p.pod_group, 0) + 1
            self._running_groups = counts
        return self._running_groups.get(group_key, 0)

    # -- units ------------------------------------------------------------------------------
    def fits(self, pod: PodSpec, node: int, usage: Usage) -> bool:
        """Whether `pod` passes every filter on `node` if the usage were `usage` (preemption's what-if)."""
        real = self.view.usage
        self.view.usage = usage
        try:
            return bool((self._feasible(pod) == node).any())
        finally:
            self.view.usage = real

    def feasible_under(self, pod: PodSpec, usage: Usage) -> np.ndarray:
        real = self.view.usage
        self.view.usage = usage
        try:
            return self._feasible(pod)
        finally:
            self.view.usage = real

    def run_unit(self, unit: list[PodSpec], admission: Admission | None = None) -> list[Placement]:
        if unit[0].pod_group is None:
            return self.run_single(unit[0], admission)
        return self.run_gang(unit, admission)

    def _try(self, pod: PodSpec, admission: Admission | None) -> Placement | Status:
        denied = admission.admit(pod) if admission is not None else None
        if denied is not None:
            return denied
        result = self.place(pod)
        if admission is not None:
            if isinstance(result, Placement):
                admission.placed(result)
            else:
                result = admission.explain(pod, result)
        return result

    def run_single(self, pod: PodSpec, admission: Admission | None = None) -> list[Placement]:
        result = self._try(pod, admission)
        if isinstance(result, Placement):
            self.binds.append(result)
            return [result]
        self.unschedulable[pod.uid] = result
        return []

    def run_gang(self, members: list[PodSpec], admission: Admission | None = None) -> list[Placement]:
        """Each member is admitted and placed in turn, counting the members placed before it,
        so an elastic gang takes extra members only while its admission (queue limits) allows."""
        group_key = members[0].pod_group or ""
        group = self.snapshot.pod_groups.get(group_key)
        running = self.running_members(group_key)
        # Without a PodGroup object the gang is the pending members themselves: all of them.
        need = group.min_member - running if group else len(members)
        placed: list[tuple[PodSpec, Placement]] = []
        failures: dict[PodUid, Status] = {}
        if group is not None and group.max_member is not None:
            room = max(group.max_member - running, 0)
            for pod in members[room:]:
                failures[pod.uid] = Status(Code.UNSCHEDULABLE, (
                    f"pod group {group_key} already has maxMember {group.max_member} pods running or placed",), "Gang")
            members = members[:room]
        for pod in members:
            result = self._try(pod, admission)
            if isinstance(result, Placement):
                placed.append((pod, result))
            else:
                failures[pod.uid] = result
        if len(placed) >= need:
            self.binds.extend(p for _, p in placed)
            self.unschedulable.update(failures)
            return [p for _, p in placed]
        for pod, placement in reversed(placed):
            self._rollback(pod, placement)
            if admission is not None:
                admission.removed(placement)
        why = (f"pod group {group_key}: only {len(placed) + running} of minMember "
               f"{need + running} pods could be placed together")
        self.unschedulable.update(failures)  # members beyond maxMember keep their own reason
        for pod in members:
            inner = failures.get(pod.uid)
            reasons = (why,) + (inner.reasons if inner else ())
            self.unschedulable[pod.uid] = Status(Code.UNSCHEDULABLE, reasons, "Gang")
        return []


def schedule(snapshot: ClusterSnapshot, pending: Sequence[PodSpec], profile: Profile, *,
             now: float, rng: random.Random, queues: QueueContext | None = None, explain: bool = True) -> CycleResult:
    """Place as many `pending` pods as the profile allows; never mutates `snapshot`.

    Without queues, and with queueing that binds the same with one queue (`plain_without_queues`),
    this is kube-scheduler's loop; otherwise `core.queued` orders units across queues,
    enforces queue limits, holds nodes for starving units and preempts (see its docstring).

    `explain=False` is for callers that use only the binds (the planner's what-if runs): an
    unschedulable pod's reason is then the bare "0/N nodes are available." without the count
    per filter reason, which takes each filter again over every node.
    """
    cycle = _Cycle(snapshot, profile, now, rng, explain)
    if queues is None and plain_without_queues(profile.queueing, pending, now):
        for unit in ordering.order(pending):
            cycle.run_unit(unit)
    else:
        queued.run(cycle, pending, profile.queueing, queues or QueueContext())
    return CycleResult(tuple(cycle.binds), tuple(cycle.evictions), dict(cycle.unschedulable),
                       tuple(cycle.nominated))


def plain_without_queues(q: QueueingConfig, pending: Iterable[PodSpec], now: float) -> bool:
    """Whether, without a `QueueContext`, kube-scheduler's loop binds, marks unschedulable,
    evicts and nominates exactly what the queue-aware path does with `q`.

    Without queues every pod is in the `default` queue: fair order is then priority order,
    no queue limit or guarantee applies and reclaim has no other queue to take from. So it
    does, unless priority preemption is on (victims in the same queue), the order is fifo or
    las (another key), or a pod has waited past the starvation bound (nodes are held for it).
    The queue-aware path's accounting costs about a quarter of a cycle's time
    (docs/performance.md), which a cluster without Queue objects need not pay."""
    if q == QueueingConfig():
        return True
    if q.order not in ("fair", "priority") or q.preemption:
        return False
    bound = q.starvation_bound_seconds
    return not (bound > 0 and any(now - p.created_s >= bound for p in pending))
