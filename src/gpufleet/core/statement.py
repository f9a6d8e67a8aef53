"""`Statement`: the one type through which a cycle changes what the cluster holds.

It places pods (filter all nodes at once, score the feasible ones, pick devices), evicts
running pods, and undoes any of that back to a checkpoint, as KAI-Scheduler's `Statement`
does. Plain scheduling, gangs (`core.placing`), queues (`core.queued`) and preemption
(`core.preemption`) use it through these methods only; none of them touches the usage
it keeps.

Every change is journalled: `checkpoint()` marks the journal and `rollback(mark)` undoes
the changes made since, newest first, and returns them so that a caller can undo its own
accounting (queue usage, victims chosen) in step.

Gangs with a required topology level stay inside one domain of it: `_feasible` adds the
mask `core.gang_topology` gives (the domain the gang's members are in), and `confine` keeps
the next pods inside a domain `core.placing` is trying for a gang.

The statement also keeps the cycle's filter-failure cache: a pod whose constraints equal
those of a pod that already found no node (under the same node mask) fails the same way,
until capacity is given back (a rollback or an eviction bumps `epoch`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from gpufleet.core import explain as explaining
from gpufleet.core.claims import ClaimAllocator
from gpufleet.core.gang_topology import GangTopology
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import View
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.framework.profile import Profile
from gpufleet.framework.status import Code, Status
from gpufleet.model import GPU_MILLI, NO_GPU, Cluster, ClusterSnapshot, GpuKind, Placement, PodSpec, Usage
from gpufleet.model.dra import ClaimAllocation

DRA = "DynamicResources"
"""The plugin name unschedulable reasons about claims carry (kube-scheduler's)."""


@dataclass(slots=True)
class _View:
    cluster: Cluster
    usage: Usage


@dataclass(frozen=True, slots=True)
class Change:
    """One journalled change: `pod` placed as `placement`, or (`pod` None) a running pod evicted."""

    placement: Placement
    pod: PodSpec | None

    @property
    def is_eviction(self) -> bool:
        return self.pod is None


def constraint_key(pod: PodSpec) -> tuple[object, ...]:
    """Pods with equal keys are interchangeable for filtering (not for gangs or priority)."""
    selector = tuple(sorted(pod.node_selector.items())) if pod.node_selector else ()
    return (pod.cpu_milli, pod.mem_mib, pod.gpu, pod.gpu_models, selector, pod.affinity, pod.tolerations)


class Statement:
    """A cycle's private copy of the cluster's usage and every change made to it."""

    def __init__(self, snapshot: ClusterSnapshot, profile: Profile, now: float, rng: random.Random,
                 explain: bool = True) -> None:
        self.snapshot = snapshot
        self.profile = profile
        self.explain = explain
        """Whether a pod that fits nowhere gets the count per filter reason (costs another filter pass)."""
        self.view = _View(snapshot.cluster, snapshot.usage.copy())
        """The cluster and the usage as this statement has changed it; read it, change it through the methods."""
        self.state = CycleState(rng, now)
        self.claims = (ClaimAllocator(snapshot) if snapshot.cluster.devices.n_devices or snapshot.dra.claims
                       else None)
        """Allocates pods' DRA claims (None when the cluster has neither devices nor claims)."""
        self._journal: list[Change] = []
        self._in_group: dict[str, int] = {}
        self._failed: dict[tuple[object, ...], tuple[int, Status]] = {}
        self._epoch = 0
        self._mask: np.ndarray | None = None
        self._mask_key: object = None
        self._confined: np.ndarray | None = None
        self._confined_key: object = None
        self.gangs = GangTopology(snapshot, profile.topology)
        """Topology domains and where each gang's members are (`core.gang_topology`)."""
        self._uniform: list[tuple[int, Callable[[CycleState, PodSpec, View], bool] | None]] = [
            (k, plugin.uniform if profile.uniform[k] else None)  # type: ignore[attr-defined]
            for k, (plugin, _) in enumerate(profile.scores)]
        """Per scorer: its `uniform` (may it say it has no preference for a pod), None if it has none."""

    @property
    def epoch(self) -> int:
        """Bumped whenever capacity is given back (a rollback, an eviction): failures seen before may not hold."""
        return self._epoch

    def restrict(self, mask: np.ndarray | None, key: object = None) -> None:
        """Place the next pods only on the nodes where `mask` is true (None: anywhere).
        `key` names the mask in the failure cache: pods fail alike only under the same key."""
        self._mask, self._mask_key = mask, key

    def confine(self, mask: np.ndarray | None, key: object = None) -> None:
        """Place the next pods only inside `mask` too (a topology domain tried for a gang; None:
        anywhere). Independent of `restrict`, which the queue layer sets per pod."""
        self._confined, self._confined_key = mask, key

    # -- placing -----------------------------------------------------------------------------
    def place(self, pod: PodSpec) -> Placement | Status:
        """Find `pod` a node and devices and place it, or say why it fits nowhere.
        Permit plugins see it placed; a denial undoes the placement and is returned."""
        as_gpus = None
        if pod.claims:
            why_not = self.claims.check(pod) if self.claims is not None else (
                f"resourceclaim {pod.claims[0]} not found")
            if why_not is not None:
                return Status(Code.UNSCHEDULABLE, (why_not,), DRA)
            assert self.claims is not None
            as_gpus = self.claims.as_gpus(pod)
            if as_gpus is not None:
                pod = replace(pod, gpu=as_gpus)  # placed as the GPUs its claims amount to
        gang_mask, gang_key = self.gangs.constraint(pod) if pod.pod_group else (None, None)
        key: tuple[object, ...] = (constraint_key(pod), self._mask_key, self._confined_key, gang_key)
        if pod.claims:
            key += (self.claims.key(pod),)  # type: ignore[union-attr]
        hit = self._failed.get(key)
        if hit is not None and hit[0] == self._epoch:
            return self._with_claim_reason(pod, hit[1])
        status = self._pre_filter(pod) if self.profile.pre_filters else None
        if status is not None:
            return status  # not cached: a pre-filter sees the whole pod, not only its constraint key
        nodes = self._feasible(pod, gang_mask)
        if len(nodes) == 0:
            why = (explaining.explain(self.state, pod, self.view, self.profile.filters) if self.explain
                   else f"0/{self.view.cluster.n_nodes} nodes are available.")
            status = Status(Code.UNSCHEDULABLE, (why,))
            self._failed[key] = (self._epoch, status)
            return self._with_claim_reason(pod, status)
        mark = self.checkpoint()
        while True:
            node = self._select(pod, nodes)
            placed = self.place_on(pod, node, claims_as_gpus=as_gpus is not None)
            if isinstance(placed, Placement):
                placement = placed
                break
            nodes = nodes[nodes != node]  # the claims' devices did not fit together on it: the next best
            if len(nodes) == 0:
                return placed
        denied = self._permit(pod) if self.profile.permits else None
        if denied is not None:
            self.rollback(mark)
            return denied
        return placement

    def _with_claim_reason(self, pod: PodSpec, status: Status) -> Status:
        """`status` with why the pod's own claims fit nowhere added, naming them (pods alike share
        the cached node reasons, not their claims' names)."""
        claim_why = self.claims.explain(pod, self.view.usage) if pod.claims and self.claims is not None else None
        return Status(status.code, status.reasons + (claim_why,), DRA) if claim_why else status

    def place_on(self, pod: PodSpec, node: int, *, claims_as_gpus: bool = False) -> Placement | Status:
        """Place `pod` on node index `node`, which the caller knows it fits (preemption, once the
        victims are evicted): devices are picked and claims allocated here, filters and permits
        are not asked. A Status when the pod's claims cannot be allocated together on the node.
        `claims_as_gpus`: `pod.gpu` is what its claims amount to (`place`), not a request of its own."""
        placement = None
        if pod.claims and self.claims is not None:
            if claims_as_gpus:  # the claims get the devices of the GPUs chosen
                placement = self._placement(pod, node)
                found = self.claims.devices_for(pod, node, placement.gpus, self.view.usage)
                if found is not None:
                    placement = replace(placement, claims=found)
                else:  # the chosen GPUs' devices do not all match: the allocator chooses, not the GPUs
                    pod, placement = replace(pod, gpu=NO_GPU), None
            if placement is None:
                own = self._placement(pod, node)  # the pod's own GPUs, if it asks for any besides its claims
                got = self.claims.allocate(pod, node, self.view.usage, avoid=own.gpus)
                if isinstance(got, str):
                    return Status(Code.UNSCHEDULABLE, (got,), DRA)
                placement = replace(own, claims=got)
        if placement is None:
            placement = self._placement(pod, node)
        claims = placement.claims
        self.view.usage.place(placement, node)
        if claims and self.claims is not None:
            self.claims.placed(claims, 1)
        if pod.pod_group:
            self._in_group[pod.pod_group] = self._in_group.get(pod.pod_group, 0) + 1
            self.gangs.add(pod.pod_group, node, 1)
        for plugin in self.profile.reserves:
            plugin.reserve(self.state, pod, self.view, node)
        self._journal.append(Change(placement, pod))
        return placement

    def evict(self, placement: Placement) -> None:
        """Take a running pod's holdings off its node."""
        node = self.view.cluster.index[placement.node]
        self.view.usage.place(placement, node, sign=-1)
        if placement.pod_group is not None:
            self.gangs.add(placement.pod_group, node, -1)
        self._journal.append(Change(placement, None))
        self._epoch += 1

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoint(self) -> int:
        """A mark to roll back to."""
        return len(self._journal)

    def rollback(self, mark: int) -> list[Change]:
        """Undo every change made since `mark`, newest first; returns them in that order."""
        undone = self._journal[mark:]
        undone.reverse()
        del self._journal[mark:]
        gave_back = False
        for change in undone:
            node = self.view.cluster.index[change.placement.node]
            pod = change.pod
            if pod is None:
                self.view.usage.place(change.placement, node)
                if change.placement.pod_group is not None:
                    self.gangs.add(change.placement.pod_group, node, 1)
                continue
            self.view.usage.place(change.placement, node, sign=-1)
            if change.placement.claims and self.claims is not None:
                self.claims.placed(change.placement.claims, -1)
            if pod.pod_group:
                self._in_group[pod.pod_group] -= 1
                self.gangs.add(pod.pod_group, node, -1)
            for plugin in self.profile.reserves:
                plugin.unreserve(self.state, pod, self.view, node)
            gave_back = True
        if gave_back:
            self._epoch += 1
        return undone

    # -- what-if -----------------------------------------------------------------------------
    def feasible_under(self, pod: PodSpec, usage: Usage) -> np.ndarray:
        """The node indexes where `pod` passes every filter if the usage were `usage`."""
        real = self.view.usage
        self.view.usage = usage
        try:
            return self._feasible(pod)
        finally:
            self.view.usage = real

    def feasible_unmasked(self, pod: PodSpec) -> np.ndarray:
        """The node indexes where `pod` passes every filter now, whatever `restrict` and `confine`
        last set (the queue layer sets its mask per pod: the one left over is another pod's)."""
        saved = self._mask, self._confined
        self._mask = self._confined = None
        try:
            return self._feasible(pod)
        finally:
            self._mask, self._confined = saved

    def fits(self, pod: PodSpec, node: int, usage: Usage) -> bool:
        """Whether `pod` passes every filter on `node` if the usage were `usage`."""
        return bool((self.feasible_under(pod, usage) == node).any())

    # -- the steps ---------------------------------------------------------------------------
    def _permit(self, pod: PodSpec) -> Status | None:
        placed = self._in_group.get(pod.pod_group, 0) if pod.pod_group else 0
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

    def _feasible(self, pod: PodSpec, gang_mask: np.ndarray | None | bool = False) -> np.ndarray:
        """The nodes where `pod` passes every filter, the queue layer's mask, the domain it is
        confined to and its gang's required domain (`gang_mask`: as `place` computed it; False:
        compute it here)."""
        mask = self._mask
        owned = False  # whether `mask` is this call's own array (a plugin's or the queue layer's is never changed)
        if gang_mask is False:
            gang_mask = self.gangs.constraint(pod)[0] if pod.pod_group else None
        for extra in (self._confined, gang_mask):
            if isinstance(extra, np.ndarray):
                mask = extra if mask is None else mask & extra
                owned = mask is not extra and mask is not self._mask
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
        if pod.claims and self.claims is not None:
            m = self.claims.node_mask(pod, self.view.usage)
            mask = m if mask is None else mask & m
        if mask is None:
            return np.arange(self.view.cluster.n_nodes)
        return mask.nonzero()[0]

    def _select(self, pod: PodSpec, nodes: np.ndarray) -> int:
        p = self.profile
        if pod.claims and self.claims is not None and pod.gpu.kind is GpuKind.NONE:
            return self._select_with_claims(pod, nodes)
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
        total = self._weighted(pod, nodes, active)
        if total is None:
            return int(nodes[0])
        return int(nodes[int(total.argmax())])  # argmax returns the first: the lowest node name

    def _weighted(self, pod: PodSpec, nodes: np.ndarray, scorers: Sequence[int]) -> np.ndarray | None:
        """The weighted sum of `scorers`' (normalised) scores over `nodes`; None without scorers."""
        p = self.profile
        total: np.ndarray | None = None
        for k in scorers:
            plugin, weight = p.scores[k]
            scores = plugin.score(self.state, pod, self.view, nodes)
            if p.normalizing[k]:
                scores = plugin.normalize_score(scores)  # type: ignore[attr-defined]
            if weight != 1:
                scores = weight * scores
            total = scores if total is None else total + scores
        return total

    def _select_with_claims(self, pod: PodSpec, nodes: np.ndarray) -> int:
        """Among the nodes where the earliest `firstAvailable` entries fit, the profile's weighted
        score plus a best-fit term for the claims' devices (0-100: 100 on the nodes left with the
        fewest free devices the claims match), ties to the lowest name."""
        assert self.claims is not None
        rank = self.claims.alternative_rank(pod, nodes, self.view.usage)
        if rank.any():
            nodes = nodes[rank == rank.min()]  # where an earlier firstAvailable entry fits
        free = self.claims.free_after(pod, nodes, self.view.usage)
        spread = int(free.max() - free.min()) if len(free) else 0
        total = (100.0 * (free.max() - free) / spread if spread else np.zeros(len(nodes)))
        scores = self._weighted(pod, nodes, range(len(self.profile.scores)))
        if scores is not None:
            total = total + scores
        return int(nodes[int(np.argmax(total))])

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
