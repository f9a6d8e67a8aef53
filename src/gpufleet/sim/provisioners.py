"""Autoscalers for the simulator: a fixed cluster, a Karpenter-like provisioner, the gpufleet planner.

Each is a `scaling.Scaler`: the replay calls `step(now, snapshot, pending, launching)` and
gets nodes to request and nodes to remove. The two autoscalers share the timing, so that
the comparison is about *what* they decide, not *when*:

- **Batching**: the replay calls `step` every `interval_s` (10 s), after its scheduling cycle;
  the pods that became pending during that interval are one batch (Karpenter batches pending
  pods for 1 s of quiet, 10 s at most, so under steady arrivals it too reacts within 10 s).
  A run happens when a pod became pending or a node joined since the last step while pods
  wait, and again every `resync_s` while pods stay pending (in a cluster the scheduler's
  status updates re-trigger Karpenter). Each run looks at every pending pod afresh, against
  the nodes that exist and the ones still launching (they count as empty capacity).
- **Consolidation delay**: a node is removed only after it has been removable for
  `consolidate_after_s` (Karpenter's `consolidateAfter`; its API default is 0 s, which with
  GPU nodes that take minutes to start gives the node away between two jobs; we use 60 s and
  show the trade-off over this knob). Removals are judged every `disruption_every_s` (10 s, the
  poll of Karpenter's disruption controller), at most `budget` of the nodes at once (10 %,
  Karpenter's default disruption budget). Launching nodes are never removed.

`KarpenterLike` models what Karpenter (v1, `pkg/controllers/provisioning/scheduling`) does
for pods it can only see through the standard resources: a fraction of a GPU or a MIG slice
counts as one whole `nvidia.com/gpu`, gang members are separate pods, and nodes are
consolidated only when empty (`consolidationPolicy: WhenEmpty`). Per batch
(`karpenter_batch`): pods sorted by CPU then memory, largest first (Karpenter's queue
order); each goes on the first existing or launching node with room, else on the new node of
this batch with the fewest pods that can still take it, else on a new node; a new node keeps
the set of templates that could hold all its pods (adding a pod narrows it) and launches as
the cheapest of them. In Karpenter's view a node's GPUs are used by the GPU count its pods
ask for, so four fractions on one GPU use four. Nodes that received pods in the latest
batch are not empty for consolidation.

`GpufleetPlanner` calls `autoscale.plan()` on the cluster with the launching nodes added
(empty), so pods that fit on them need no new node. Removals are judged after the pending
pods that fit (on joined or launching nodes) are placed, so a node a waiting gang needs is
not idle. Two consolidation modes: `idle` (default) removes GPU nodes with nothing on them,
most expensive first; `underutilized` uses `autoscale.removal`'s choice (idle, then
consolidatable GPU nodes by GPU use, whose pods can all be placed elsewhere): their running
pods are evicted and their jobs restart from their last checkpoint, which in a simulation of
training jobs costs the work since then (see docs/autoscaling.md, "In the simulator").

`FixedCluster` requests its nodes at the first step, billed from then on, and never changes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Collection, Mapping, Sequence

from gpufleet.autoscale import NodeTemplate, plan
from gpufleet.autoscale.fit import Demand, Room, no_template_reason, static_reason
from gpufleet.autoscale.removal import RemovalSettings, node_prices, removals
from gpufleet.autoscale.template import TEMPLATE_LABEL
from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import Profile, ProfileForMix
from gpufleet.framework.profiles import builtin
from gpufleet.model import (Cluster, ClusterSnapshot, GpuKind, ModelError, NodeInfo, NodeName, PodSpec, PodUid,
                            Usage, mig, whole_gpus)
from gpufleet.sim.scaling import NewNode, ScaleStep


@dataclass(frozen=True, slots=True)
class ScalerSettings:
    """Timing shared by both autoscalers (seconds)."""

    interval_s: float = 10.0
    """How often the replay calls `step`: the batch window, and the resolution of everything below."""
    resync_s: float = 60.0
    consolidate_after_s: float = 60.0
    disruption_every_s: float = 10.0
    budget: float = 0.1
    """Share of the nodes that may be removed at one time (at least one)."""

    def __post_init__(self) -> None:
        for name in ("interval_s", "resync_s", "consolidate_after_s",
                     "disruption_every_s", "budget"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0) or (name == "interval_s" and value == 0):
                raise ModelError(f"scaler settings: {name}", f"must be a finite non-negative number, got {value!r}")


def check_templates(templates: Sequence[NodeTemplate]) -> None:
    """Templates an autoscaler can use: at least one, unique names, each able to host a pod."""
    if not templates:
        raise ModelError("node templates", "an autoscaler needs at least one template")
    names = [t.name for t in templates]
    if len(set(names)) != len(names):
        raise ModelError("node templates: name", f"template names must be unique, got {names}")
    for t in templates:
        if t.max_pods < 1 or (t.cpu_milli == 0 and t.mem_mib == 0 and t.gpus == 0):
            raise ModelError(f"node template {t.name!r}", "can host nothing (no CPU, memory or GPUs)")


# -- shared timing ---------------------------------------------------------------------------
@dataclass(slots=True)
class _Batcher:
    settings: ScalerSettings
    pending: frozenset[PodUid] = frozenset()
    launching: frozenset[NodeName] = frozenset()
    last_run: float = -math.inf

    def due(self, now: float, pending: Sequence[PodSpec], launching: Sequence[NewNode]) -> bool:
        uids = frozenset(p.uid for p in pending)
        names = frozenset(n.node.name for n in launching)
        changed = bool(uids - self.pending) or bool(self.launching - names)
        self.pending, self.launching = uids, names
        if uids and (changed or now - self.last_run >= self.settings.resync_s):
            self.last_run = now
            return True
        return False


@dataclass(slots=True)
class _Consolidation:
    settings: ScalerSettings
    since: dict[NodeName, float] = field(default_factory=dict)
    last: float = -math.inf

    def due(self, now: float) -> bool:
        if now - self.last < self.settings.disruption_every_s:
            return False
        self.last = now
        return True

    def ripe(self, now: float, removable: Sequence[NodeName], n_nodes: int) -> tuple[NodeName, ...]:
        """Of `removable` (in order), those removable for `consolidate_after_s`, within the budget."""
        self.since = {n: self.since.get(n, now) for n in removable}
        ready = [n for n in removable if now - self.since[n] >= self.settings.consolidate_after_s]
        cap = max(1, math.ceil(self.settings.budget * n_nodes))
        for n in ready[:cap]:
            del self.since[n]
        return tuple(ready[:cap])


class _Namer:
    def __init__(self) -> None:
        self.count = 0

    def new(self, template: NodeTemplate, taken: Collection[str]) -> NewNode:
        while True:
            self.count += 1
            name = f"{template.name}-{self.count:05d}"
            if name not in taken:
                return NewNode(template.node_info(name), template.price_per_hour, template.start_delay_s)


def _taken(snapshot: ClusterSnapshot, launching: Sequence[NewNode]) -> set[str]:
    return {*snapshot.cluster.names, *(n.node.name for n in launching)}


# -- no autoscaling ----------------------------------------------------------------------------
class FixedCluster:
    """A billed cluster of `counts` nodes per template, requested at the first step (joining at once)."""

    def __init__(self, counts: Sequence[tuple[NodeTemplate, int]]) -> None:
        items = list(counts)
        check_templates([t for t, _ in items])
        if any(n < 0 for _, n in items):
            raise ModelError("fixed cluster", "node counts must be non-negative")
        self.counts = items
        self.interval_s = 300.0
        """Nothing changes after the first step; the replay's ticks only sample the cluster."""
        self.started = False

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep:
        if self.started:
            return ScaleStep()
        self.started = True
        namer, taken = _Namer(), _taken(snapshot, launching)
        out = []
        for t, n in self.counts:
            for _ in range(n):
                new = namer.new(t, taken)
                taken.add(new.node.name)
                out.append(replace(new, start_delay_s=0.0))
        return ScaleStep(add=tuple(out))


# -- Karpenter-like ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ExistingNode:
    """A node as Karpenter sees it: room left in whole GPUs, CPU, memory and pod slots."""

    name: NodeName
    template: NodeTemplate
    probe: NodeInfo
    room: Room


@dataclass(slots=True)
class _Claim:
    options: dict[int, Room]
    pods: list[PodUid] = field(default_factory=list)

    def add(self, ok: Collection[int], d: Demand, uid: PodUid) -> bool:
        fits = [t for t, r in self.options.items() if t in ok and r.count(d) > 0]
        if not fits:
            return False
        self.options = {t: self.options[t] for t in fits}
        for r in self.options.values():
            r.take(d, [uid])
        self.pods.append(uid)
        return True

    def has_gpu_left(self) -> bool:
        return any(r.has_gpu_left() for r in self.options.values())

    def cheapest(self, templates: Sequence[NodeTemplate]) -> int:
        return min(self.options, key=lambda t: (templates[t].price_per_hour, templates[t].name))


@dataclass(frozen=True, slots=True)
class KarpenterBatch:
    new: tuple[tuple[NodeTemplate, tuple[PodUid, ...]], ...]
    """One entry per new node: its template and the pods meant for it."""
    on_existing: Mapping[NodeName, tuple[PodUid, ...]]
    unplaced: Mapping[PodUid, str]

    def summary(self) -> dict[str, float]:
        return {"nodes": len(self.new), "gpus": sum(t.gpus for t, _ in self.new),
                "cost_per_hour": round(sum(t.price_per_hour for t, _ in self.new), 2),
                "unplaced": len(self.unplaced)}


def karpenter_view(pod: PodSpec, models: Collection[str]) -> PodSpec:
    """The pod as Karpenter counts it: a fraction or MIG slice is one whole GPU (of a model
    that has the slice's profile, for MIG; `models` are the templates' GPU models)."""
    g = pod.gpu
    if g.kind is GpuKind.FRACTION:
        return replace(pod, gpu=whole_gpus(1))
    if g.kind is GpuKind.MIG:
        able = {m for m in models if g.mig_profile in mig.profiles_for(m)}
        return replace(pod, gpu=whole_gpus(1), gpu_models=frozenset(able & (pod.gpu_models or able)))
    return pod


def karpenter_batch(pods: Sequence[PodSpec], templates: Sequence[NodeTemplate],
                    existing: Sequence[ExistingNode] = ()) -> KarpenterBatch:
    """One Karpenter-like provisioning run (see the module docstring). `existing` rooms are used up."""
    probes = [t.node_info(f"probe-{t.name}") for t in templates]
    models = {t.gpu_model for t in templates if t.gpu_model}
    compat_cache: dict[tuple[object, ...], list[int]] = {}
    claims: list[_Claim] = []
    open_gpu: list[_Claim] = []
    """New nodes with a free GPU left in some option (only those can take a GPU pod)."""
    on_existing: dict[NodeName, list[PodUid]] = {}
    unplaced: dict[PodUid, str] = {}
    limited = any(t.max_nodes is not None or t.max_gpus is not None for t in templates)
    for pod in sorted(pods, key=lambda p: (-p.cpu_milli, -p.mem_mib, p.created_s, p.uid)):
        view = karpenter_view(pod, models)
        d = Demand.of(view)
        host = next((e for e in existing if e.room.count(d) > 0 and static_reason(e.template, e.probe, view) is None),
                    None)
        if host is not None:
            host.room.take(d, [pod.uid])
            on_existing.setdefault(host.name, []).append(pod.uid)
            continue
        key = (view.cpu_milli, view.mem_mib, view.gpu, view.gpu_models, tuple(sorted(view.node_selector.items())),
               view.affinity, view.tolerations)
        ok = compat_cache.get(key)
        if ok is None:
            ok = compat_cache[key] = [i for i, (t, pr) in enumerate(zip(templates, probes))
                                      if static_reason(t, pr, view) is None]
        gpu = d.kind is not GpuKind.NONE
        took = next((c for c in sorted(open_gpu if gpu else claims, key=lambda c: len(c.pods))
                     if c.add(ok, d, pod.uid)), None)
        if took is not None:
            if gpu and not took.has_gpu_left():
                open_gpu.remove(took)
            continue
        room_ok = _within_limits(ok, templates, existing, claims) if limited else ok
        if not room_ok:
            unplaced[pod.uid] = (no_template_reason(view, templates, probes) if not ok else
                                 "pool limits reached for every template that can host it")
            continue
        claim = _Claim({t: Room(t, templates[t]) for t in room_ok})
        if not claim.add(room_ok, d, pod.uid):  # pragma: no cover - a compatible empty node hosts one pod
            raise AssertionError(f"no empty template hosts pod {pod.uid}")
        claims.append(claim)
        if claim.has_gpu_left():
            open_gpu.append(claim)
    new = tuple((templates[c.cheapest(templates)], tuple(c.pods)) for c in claims)
    return KarpenterBatch(new, MappingProxyType({k: tuple(v) for k, v in on_existing.items()}),
                          MappingProxyType(unplaced))


def _within_limits(ok: Sequence[int], templates: Sequence[NodeTemplate], existing: Sequence[ExistingNode],
                   claims: Sequence[_Claim]) -> list[int]:
    nodes = [0] * len(templates)
    index = {t.name: i for i, t in enumerate(templates)}
    for e in existing:
        if e.template.name in index:
            nodes[index[e.template.name]] += 1
    for c in claims:
        nodes[c.cheapest(templates)] += 1
    out = []
    for t in ok:
        tpl = templates[t]
        if tpl.max_nodes is not None and nodes[t] >= tpl.max_nodes:
            continue
        if tpl.max_gpus is not None and (nodes[t] + 1) * tpl.gpus > tpl.max_gpus:
            continue
        out.append(t)
    return out


def existing_nodes(snapshot: ClusterSnapshot, launching: Sequence[NewNode],
                   templates: Sequence[NodeTemplate]) -> list[ExistingNode]:
    """Karpenter's view of the joined nodes (their free CPU, memory, slots; GPUs minus the GPU
    count their pods ask for) followed by the launching ones (empty)."""
    by_name = {t.name: t for t in templates}
    c, u = snapshot.cluster, snapshot.usage
    asked = [0] * c.n_nodes
    for p in snapshot.placements.values():
        asked[c.index[p.node]] += len(p.mig_slices) + (len(p.gpus) if p.gpus else 0)
    out = []
    for i, node in enumerate(c.nodes):
        t = by_name.get(node.labels.get(TEMPLATE_LABEL, "")) or _pseudo_template(node)
        room = Room(-1, t)
        room.cpu, room.mem, room.slots = int(u.free_cpu[i]), int(u.free_mem[i]), int(u.free_pods[i])
        for j in range(min(asked[i], len(room.milli))):
            room.milli[j], room.gmem[j] = 0, 0
        out.append(ExistingNode(node.name, t, node, room))
    for new in launching:
        t = by_name.get(new.node.labels.get(TEMPLATE_LABEL, "")) or _pseudo_template(new.node)
        out.append(ExistingNode(new.node.name, t, new.node, Room(-1, t)))
    return out


def _pseudo_template(node: NodeInfo) -> NodeTemplate:
    """A template describing an existing node that no template made (its first GPU stands for all)."""
    g = node.gpus[0] if node.gpus else None
    return NodeTemplate(f"node:{node.name}", node.cpu_milli, node.mem_mib, 0.0, g.model if g else None,
                        len(node.gpus), (g.mem_mib or 1) if g else 0, tuple(g.mig_slices) if g else (),
                        node.max_pods, node.labels, node.taints)


class KarpenterLike:
    """Karpenter-like autoscaler (see the module docstring)."""

    def __init__(self, templates: Sequence[NodeTemplate], settings: ScalerSettings = ScalerSettings()) -> None:
        check_templates(templates)
        self.templates = list(templates)
        self.settings = settings
        self.interval_s = settings.interval_s
        self.batcher = _Batcher(settings)
        self.consolidation = _Consolidation(settings)
        self.namer = _Namer()
        self.nominated: dict[NodeName, float] = {}
        """When each node last received pods in a batch; it is not empty for consolidation for
        two intervals after (Karpenter's nomination window is twice its 10 s batch)."""

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep:
        add: tuple[NewNode, ...] = ()
        if self.batcher.due(now, pending, launching):
            batch = karpenter_batch(pending, self.templates, existing_nodes(snapshot, launching, self.templates))
            self.nominated.update((name, now) for name in batch.on_existing)
            taken = _taken(snapshot, launching)
            nodes = []
            for template, _ in batch.new:
                nodes.append(self.namer.new(template, taken))
                taken.add(nodes[-1].node.name)
            add = tuple(nodes)
        remove: tuple[NodeName, ...] = ()
        if self.consolidation.due(now):
            u, c = snapshot.usage, snapshot.cluster
            window = 2 * self.settings.interval_s
            self.nominated = {n: t for n, t in self.nominated.items() if now - t < window}
            empty = [c.names[i] for i in range(c.n_nodes)
                     if u.free_pods[i] == c.cap_pods[i] and c.names[i] not in self.nominated]
            remove = self.consolidation.ripe(now, empty, c.n_nodes)
        return ScaleStep(add, remove)


# -- the gpufleet planner ----------------------------------------------------------------------------
def with_launching(snapshot: ClusterSnapshot, launching: Sequence[NewNode]) -> ClusterSnapshot:
    """`snapshot` plus the launching nodes, empty (a fresh snapshot; `snapshot` is not touched)."""
    if not launching:
        return snapshot
    cluster = Cluster([*snapshot.cluster.nodes, *(n.node for n in launching)])
    usage = Usage(cluster)
    usage.place_all((p, cluster.index[p.node]) for p in snapshot.placements.values())
    return ClusterSnapshot(cluster, usage, snapshot.placements, snapshot.pod_groups)


CONSOLIDATION_MODES = ("idle", "underutilized")


def _idle_gpu_nodes(snapshot: ClusterSnapshot, templates: Sequence[NodeTemplate]) -> tuple[NodeName, ...]:
    """GPU nodes with no pod on them, most expensive first, then by name."""
    c, u = snapshot.cluster, snapshot.usage
    price = node_prices(snapshot, templates)
    idle = [i for i in range(c.n_nodes) if c.gpu_count[i] and u.free_pods[i] == c.cap_pods[i]]
    return tuple(c.names[i] for i in sorted(idle, key=lambda i: (-price[i], c.names[i])))


class GpufleetPlanner:
    """The gpufleet planner as an autoscaler (see the module docstring)."""

    def __init__(self, templates: Sequence[NodeTemplate], settings: ScalerSettings = ScalerSettings(), *,
                 profile: Profile | None = None, consolidation: str = "idle", max_removal_checks: int = 20) -> None:
        check_templates(templates)
        if consolidation not in CONSOLIDATION_MODES:
            raise ModelError("planner consolidation", f"unknown mode {consolidation!r}; known: "
                                                      f"{', '.join(CONSOLIDATION_MODES)}")
        self.consolidation_mode = consolidation
        self.templates = list(templates)
        self.settings = settings
        self.interval_s = settings.interval_s
        self.profile = profile
        """The simulated scheduler's; None: the default profile with the typical-task mix of the
        running and pending pods, as the live scheduler builds it."""
        self._default = ProfileForMix(builtin("default"))
        self.max_removal_checks = max_removal_checks
        self.batcher = _Batcher(settings)
        self.consolidation = _Consolidation(settings)
        self.namer = _Namer()
        self.specs: dict[PodUid, PodSpec] = {}
        """Specs of pods seen pending, so that consolidation moves running pods with their real constraints."""

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep:
        self.specs.update((p.uid, p) for p in pending)
        waiting = {p.uid for p in pending}
        profile = self.profile if self.profile is not None else self._default.get(
            lambda: [s for uid, s in self.specs.items() if uid in snapshot.placements or uid in waiting])
        add: tuple[NewNode, ...] = ()
        if self.batcher.due(now, pending, launching):
            result = plan(pending, self.templates, with_launching(snapshot, launching), profile=profile,
                          max_removals=0, now=now)
            taken = _taken(snapshot, launching)
            nodes = []
            for a in result.add:
                for _ in range(a.count):
                    nodes.append(self.namer.new(a.template, taken))
                    taken.add(nodes[-1].node.name)
            add = tuple(nodes)
        remove: tuple[NodeName, ...] = ()
        if self.consolidation.due(now):
            remove = self.consolidation.ripe(now, self._removable(now, snapshot, pending, launching, profile),
                                             snapshot.cluster.n_nodes)
        return ScaleStep(add, remove)

    def _removable(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
                   launching: Sequence[NewNode], profile: Profile) -> tuple[NodeName, ...]:
        if not any(snapshot.cluster.gpu_count):
            return ()
        after = snapshot
        if pending:
            first = schedule(with_launching(snapshot, launching), pending, profile, now=now,
                             rng=random.Random(0))
            after = snapshot.apply([b for b in first.binds if b.node in snapshot.cluster.index])
        if self.consolidation_mode == "idle":
            return _idle_gpu_nodes(after, self.templates)
        running, waiting = after.placements, {p.uid for p in pending}
        self.specs = {uid: s for uid, s in self.specs.items() if uid in running or uid in waiting}
        settings = RemovalSettings(max_removals=snapshot.cluster.n_nodes, max_checks=self.max_removal_checks)
        return removals(after, self.templates, profile, specs=self.specs, settings=settings, now=now)
