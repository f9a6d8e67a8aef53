"""Which GPU nodes to remove: idle ones, then consolidatable ones, judged by GPU use.

A GPU node is a candidate when no pod of a gang that cannot move whole runs on it and no
non-preemptible pod (Karpenter's `do-not-disrupt`) runs on it. Candidates are tried in
order: least GPU use first (idle nodes, GPU use 0, come first however busy their CPUs are),
then the most expensive, then by name. A candidate is removed when every pod on it (its
CPU-only pods too) and every other member of a gang running on it can be placed on the
remaining nodes: `schedule()` runs on the snapshot with those pods released and the node
closed, and must bind them all. Accepted moves are applied before the next candidate, so
two removals never count on the same free GPU. A candidate with a pod that passes the filters
on no other node is kept without running `schedule()` (it could not bind that pod either).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterator, Mapping, Sequence

from gpufleet.autoscale import check as checking
from gpufleet.autoscale.template import TEMPLATE_LABEL, NodeTemplate
from gpufleet.core.cycle import schedule
from gpufleet.core.statement import constraint_key
from gpufleet.framework.profile import Profile
from gpufleet.model import (GPU_MILLI, NO_GPU, ClusterSnapshot, GpuRequest, NodeName, Placement, PodSpec, PodUid,
                            Toleration, TolerationOperator, gpu_fraction, mig_slices, whole_gpus)


@dataclass(frozen=True, slots=True)
class RemovalSettings:
    max_removals: int = 10
    """At most this many nodes removed per plan (Karpenter's disruption budget)."""
    max_checks: int = 50
    """At most this many candidates are checked with `schedule()` per plan (bounds the cost)."""


def gpu_use(snapshot: ClusterSnapshot, i: int) -> float:
    """Share of node i's GPU capacity in use: GPU-milli on whole/fractional devices, and for
    MIG devices the share of their carved slices in use."""
    c, u = snapshot.cluster, snapshot.usage
    n = int(c.gpu_count[i])
    used = float(u.gpu_used_milli[i, :n].sum())
    start, end = int(c.slice_start[i]), int(c.slice_end[i])
    if end > start:
        per_gpu: dict[int, int] = {}
        for s in range(start, end):
            per_gpu[int(c.slice_gpu[s])] = per_gpu.get(int(c.slice_gpu[s]), 0) + 1
        for s in range(start, end):
            if u.slice_used[s]:
                used += GPU_MILLI / per_gpu[int(c.slice_gpu[s])]
    return used / (n * GPU_MILLI)


def spec_of(p: Placement, snapshot: ClusterSnapshot) -> PodSpec:
    """A pending-pod spec for a running pod, when the caller has none: its resources, its
    node's GPU model as the only allowed model, and tolerations for its node's taints (so it
    may move only to a node like the one it is on; selectors are unknown and not required)."""
    c = snapshot.cluster
    i = c.index[p.node]
    node = c.nodes[i]
    gpu: GpuRequest = NO_GPU
    if p.mig_slices:
        profile = c.mig_profiles[int(c.slice_prof[int(c.slice_start[i]) + p.mig_slices[0]])]
        gpu = mig_slices(profile, len(p.mig_slices))
    elif p.gpus and p.milli >= GPU_MILLI:
        gpu = whole_gpus(len(p.gpus))
    elif p.gpus:
        gpu = gpu_fraction(p.milli, p.gpu_mem_mib)
    models = frozenset({node.gpu_model}) if gpu is not NO_GPU and node.gpu_model else frozenset()
    tolerations = tuple(Toleration(t.key, TolerationOperator.EQUAL, t.value, t.effect) for t in node.taints)
    return PodSpec(p.pod, str(p.pod), "running", p.cpu_milli, p.mem_mib, gpu, models, tolerations=tolerations,
                   priority=p.priority, queue=p.queue, pod_group=p.pod_group, preemptible=p.preemptible)


def node_prices(snapshot: ClusterSnapshot, templates: Sequence[NodeTemplate]) -> list[float]:
    """Price per hour of each node, from the template named by its TEMPLATE_LABEL (0 if none)."""
    price = {t.name: t.price_per_hour for t in templates}
    return [price.get(n.labels.get(TEMPLATE_LABEL, ""), 0.0) for n in snapshot.cluster.nodes]


class Remover:
    """Chooses removals on `snapshot` (the cluster once the pending pods that fit are bound)."""

    def __init__(self, snapshot: ClusterSnapshot, templates: Sequence[NodeTemplate], profile: Profile,
                 specs: Mapping[PodUid, PodSpec], settings: RemovalSettings, now: float) -> None:
        self.work = snapshot
        self.profile = profile
        self.specs = specs
        self.settings = settings
        self.now = now
        self.prices = node_prices(snapshot, templates)
        self.on_node: dict[NodeName, list[Placement]] = {}
        self.members: dict[str, list[Placement]] = {}
        for p in snapshot.placements.values():
            self.on_node.setdefault(p.node, []).append(p)
            if p.pod_group is not None:
                self.members.setdefault(p.pod_group, []).append(p)
        self.removed: list[int] = []

    def candidates(self) -> list[int]:
        c = self.work.cluster
        keyed = []
        for i in range(c.n_nodes):
            if c.gpu_count[i] == 0 or any(not p.preemptible for p in self.on_node.get(c.names[i], ())):
                continue
            keyed.append((gpu_use(self.work, i), -self.prices[i], c.names[i], i))
        return [k[3] for k in sorted(keyed)]

    def run(self) -> tuple[NodeName, ...]:
        checks = 0
        for i in self.candidates():
            if len(self.removed) >= self.settings.max_removals or checks >= self.settings.max_checks:
                break
            checks += 1
            self.try_remove(i)
        return tuple(self.work.cluster.names[i] for i in self.removed)

    def _moving(self, name: NodeName) -> list[Placement]:
        """Pods that must move if node `name` goes: its own, and every member of their gangs."""
        out: dict[PodUid, Placement] = {}
        for p in self.on_node.get(name, ()):
            out[p.pod] = p
            if p.pod_group is not None:
                out.update((m.pod, m) for m in self.members.get(p.pod_group, ()))
        return list(out.values())

    def try_remove(self, i: int) -> bool:
        moving = self._moving(self.work.cluster.names[i])
        specs = [self.specs.get(p.pod) or spec_of(p, self.work) for p in moving]
        trial = self._closed(self._released(moving), i)
        if not self._each_fits_somewhere(trial, specs):
            return False
        result = schedule(trial, specs, self.profile, now=self.now, rng=random.Random(0), explain=False)
        if len(result.binds) < len(specs):
            return False
        self.removed.append(i)
        self.work = self._closed(self.work.apply(binds=result.binds, releases=[p.pod for p in moving]), i)
        moved = {p.pod: p for p in result.binds}
        self._reindex(moved)
        return True

    def _released(self, moving: Sequence[Placement]) -> ClusterSnapshot:
        """The working snapshot with `moving` released. Most trials fail, so the running pods
        are a view of the working snapshot's, not a copy of every placement (`work.apply`)."""
        usage = self.work.usage.copy()
        index = self.work.cluster.index
        usage.place_all(((p, index[p.node]) for p in moving), sign=-1)
        placements = _Without(self.work.placements, frozenset(p.pod for p in moving))
        return ClusterSnapshot(self.work.cluster, usage, placements, self.work.pod_groups)

    def _each_fits_somewhere(self, trial: ClusterSnapshot, specs: Sequence[PodSpec]) -> bool:
        """Whether every moving pod passes the filters on some node of `trial` before any is
        placed. If one does not, `schedule()` cannot bind it either: placing the others only
        takes room."""
        reps = list({constraint_key(p): p for p in specs}.values())
        return bool(checking.feasible(self.profile, reps, trial.cluster, trial.usage, self.now).any(axis=1).all())

    def _closed(self, snapshot: ClusterSnapshot, i: int) -> ClusterSnapshot:
        """`snapshot` (a private copy) with node i and every node removed so far taking no pods."""
        for j in (*self.removed, i):
            snapshot.usage.free_pods[j] = 0
        return snapshot

    def _reindex(self, moved: Mapping[PodUid, Placement]) -> None:
        on_node: dict[NodeName, list[Placement]] = {}
        for p in self.work.placements.values():
            on_node.setdefault(p.node, []).append(p)
        self.on_node = on_node
        for group, members in self.members.items():
            self.members[group] = [moved.get(m.pod, m) for m in members]


class _Without(Mapping[PodUid, Placement]):
    """`base` without the pods in `gone` (all of which it holds), read-only."""

    def __init__(self, base: Mapping[PodUid, Placement], gone: frozenset[PodUid]) -> None:
        self.base = base
        self.gone = gone

    def __getitem__(self, uid: PodUid) -> Placement:
        if uid in self.gone:
            raise KeyError(uid)
        return self.base[uid]

    def __iter__(self) -> Iterator[PodUid]:
        return (uid for uid in self.base if uid not in self.gone)

    def __len__(self) -> int:
        return len(self.base) - len(self.gone)


def removals(snapshot: ClusterSnapshot, templates: Sequence[NodeTemplate], profile: Profile, *,
             specs: Mapping[PodUid, PodSpec] = MappingProxyType({}), settings: RemovalSettings = RemovalSettings(),
             now: float = 0.0) -> tuple[NodeName, ...]:
    """GPU nodes to remove, in the order chosen (see the module docstring)."""
    return Remover(snapshot, templates, profile, specs, settings, now).run()
