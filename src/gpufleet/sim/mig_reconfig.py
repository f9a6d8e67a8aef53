"""MIG layouts in the replay: where each instance sits, demand-driven changes, and the meter.

`replay(..., mig=MigReconfigurer(...))` calls `step` after every batch's scheduling cycle and
`ready` when a change's new instances come up. The reconfigurer knows every MIG GPU's placed
layout (`model.mig_placement`; `Gpu.mig_slices` lists the same instances in the same order,
so a placement's slice indices stay meaningful), reads which instances pods hold from the
snapshot, and, when it plans (`plan=True`), hands the still-pending MIG requests to the pure
`core.mig_planner`.

A change is applied in two steps. At the scheduling step that plans it, the destroyed (free)
instances disappear; `delay_s` later the created ones appear. The GPU is frozen in between
(the planner leaves it alone); its other instances keep serving. One reconfiguration is
counted per GPU changed per plan.

`RECONFIG_DELAY_S` is an ASSUMPTION, not a measurement: NVML creates or destroys a GPU and a
compute instance in about a second, and the agent must then update its device-plugin lists and
the kubelet re-advertise the node's MIG resources; 30 s stands for all of it. The GPU lent to
this project may not be repartitioned (docs/hardware.md), so it was never timed here.

The meter (`MigMeter`) integrates, over the window from the first to the last arrival, the MIG
GPUs' compute slices (7 per GPU) not held by a running pod, counted only while at least one MIG
request is pending: `unallocated_gpu_pct` = 100 x (those slice-seconds) / (all slices x the
window). Idle slices while nobody waits are not charged (no layout can fill them); slices
being reconfigured and slices carved in a shape nobody pending can use are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from gpufleet.core import mig_planner
from gpufleet.core.mig_demand import mig_requests
from gpufleet.framework.profile import Profile
from gpufleet.model import ClusterSnapshot, GpuKind, GpuUuid, ModelError, NodeInfo, NodeName, Placement, PodSpec, mig
from gpufleet.model.mig_placement import MigInstance, place_counts

RECONFIG_DELAY_S = 30.0
"""Seconds from a plan to its new instances being usable (an assumption: module docstring)."""

GpuKey = tuple[NodeName, int]


@dataclass(frozen=True, slots=True)
class MigReady:
    """The created instances of one GPU's change, usable from `at_s`."""

    key: GpuKey
    create: tuple[MigInstance, ...]
    at_s: float


@dataclass(frozen=True, slots=True)
class Relayout:
    """New nodes and the running placements with their slice indices remapped."""

    nodes: tuple[NodeInfo, ...]
    placements: tuple[Placement, ...]
    ready: tuple[MigReady, ...] = ()


@dataclass(slots=True)
class MigMeter:
    window: tuple[float, float]
    slices: int
    """Compute slices of all MIG GPUs."""
    last: tuple[float, int, int] = (0.0, 0, 0)
    """(time, free slices, pending MIG requests) since the last step."""
    idle_while_pending_s: float = 0.0
    allocated_s: float = 0.0

    def advance(self, now: float, free: int, pending: int) -> None:
        t, was_free, was_pending = self.last
        lo, hi = max(t, self.window[0]), min(now, self.window[1])
        if hi > lo:
            self.allocated_s += (self.slices - was_free) * (hi - lo)
            if was_pending:
                self.idle_while_pending_s += was_free * (hi - lo)
        self.last = (now, free, pending)

    def unallocated_pct(self) -> float:
        total = self.slices * (self.window[1] - self.window[0])
        return 100.0 * self.idle_while_pending_s / total if total > 0 else 0.0

    def allocated_pct(self) -> float:
        total = self.slices * (self.window[1] - self.window[0])
        return 100.0 * self.allocated_s / total if total > 0 else 0.0


def in_listed_order(listed: Sequence[str], placed: Sequence[MigInstance]) -> tuple[MigInstance, ...]:
    """`placed` in the order `listed` (a `Gpu.mig_slices`) names their profiles: a running pod's
    slice index k is the k-th listed instance, so that is the order in-use flags are read in.
    Instances of one profile are taken by start."""
    pool = {p: sorted(i for i in placed if i.profile == p) for p in set(listed)}
    return tuple(pool[p].pop(0) for p in listed)


class MigReconfigurer:
    """The replay's MIG layouts; plans with `core.mig_planner` when `plan` is set."""

    def __init__(self, nodes: Sequence[NodeInfo], window: tuple[float, float], *, plan: bool,
                 delay_s: float = RECONFIG_DELAY_S) -> None:
        if not delay_s >= 0:
            raise ValueError(f"reconfiguration delay must be non-negative, got {delay_s}")
        self.plan = plan
        self.delay_s = delay_s
        self.placed: dict[GpuKey, tuple[MigInstance, ...]] = {}
        self.family: dict[GpuKey, str] = {}
        self.uuid: dict[GpuKey, GpuUuid] = {}
        for node in nodes:
            for j, gpu in enumerate(node.gpus):
                if not gpu.mig_enabled:
                    continue
                family = mig.mig_family(gpu.model)
                placed = place_counts(family, gpu.mig_slices) if family else None
                if family is None or placed is None:
                    raise ModelError(f"node {node.name}: gpus[{j}] ({gpu.uuid})",
                                     f"MIG layout {list(gpu.mig_slices)} has no valid placement on {gpu.model}")
                self.placed[(node.name, j)] = in_listed_order(gpu.mig_slices, placed)
                self.family[(node.name, j)] = family
                self.uuid[(node.name, j)] = gpu.uuid
        self.changing: set[GpuKey] = set()
        self.reconfigurations = 0
        self.plans = 0
        self.meter = MigMeter(window, 7 * len(self.placed))

    # -- what the replay calls ----------------------------------------------------------------
    def step(self, now: float, snap: ClusterSnapshot, waiting: Sequence[PodSpec], profile: Profile) -> Relayout | None:
        """After a cycle: meter, then (when planning) change idle instances for `waiting`'s MIG requests,
        each on the GPUs its pod could use under `profile`'s filters (`core.mig_demand`)."""
        demand = [p.gpu.mig_profile for p in waiting if p.gpu.kind is GpuKind.MIG and p.gpu.mig_profile
                  for _ in range(p.gpu.count)]
        gpus = self._gpus(snap)
        free = sum(7 - sum(mig.MIG_TABLES[g.family][i.profile].compute_slices for i in g.in_use) for g in gpus)
        self.meter.advance(now, free, len(demand))
        if not self.plan or not demand:
            return None
        result = mig_planner.plan(gpus, mig_requests(snap, waiting, [p.uid for p in waiting], profile, now))
        if not result.changes:
            return None
        self.plans += 1
        self.reconfigurations += len(result.changes)
        by_uuid = {u: k for k, u in self.uuid.items()}
        new: dict[GpuKey, tuple[MigInstance, ...]] = {}
        ready: list[MigReady] = []
        for change in result.changes:
            key = by_uuid[change.uuid]
            gone = set(change.destroy)
            new[key] = tuple(i for i in self.placed[key] if i not in gone)
            self.changing.add(key)
            ready.append(MigReady(key, change.create, now + self.delay_s))
        out = self._relayout(snap, new)
        return dataclasses.replace(out, ready=tuple(ready))

    def ready(self, event: MigReady, snap: ClusterSnapshot) -> Relayout:
        """The created instances of a change come up."""
        self.changing.discard(event.key)
        return self._relayout(snap, {event.key: tuple(sorted([*self.placed[event.key], *event.create]))})

    # -- helpers -----------------------------------------------------------------------------
    def _gpus(self, snap: ClusterSnapshot) -> list[mig_planner.MigGpu]:
        c, u = snap.cluster, snap.usage
        out: list[mig_planner.MigGpu] = []
        offsets: dict[NodeName, list[int]] = {}
        for key, placed in self.placed.items():
            name, j = key
            i = c.index[name]
            if name not in offsets:
                node = c.nodes[i]
                offsets[name] = [sum(len(g.mig_slices) for g in node.gpus[:k]) for k in range(len(node.gpus))]
            base = int(c.slice_start[i]) + offsets[name][j]
            used = frozenset(inst for k, inst in enumerate(placed) if u.slice_used[base + k])
            healthy = bool(u.gpu_healthy[i, j]) and bool(u.node_ready[i])
            out.append(mig_planner.MigGpu(self.uuid[key], self.family[key], placed, used,
                                          key in self.changing or not healthy))
        return out

    def _relayout(self, snap: ClusterSnapshot, new: dict[GpuKey, tuple[MigInstance, ...]]) -> Relayout:
        """Nodes with `new` layouts, and the running placements' slice indices moved along."""
        old_index: dict[NodeName, list[tuple[int, MigInstance]]] = {}
        new_index: dict[NodeName, dict[tuple[int, MigInstance], int]] = {}
        nodes: list[NodeInfo] = []
        touched = {name for name, _ in new}
        for node in snap.cluster.nodes:
            if node.name not in touched:
                nodes.append(node)
                continue
            before = [(j, inst) for j in range(len(node.gpus)) for inst in self.placed.get((node.name, j), ())]
            for key, layout in new.items():
                if key[0] == node.name:
                    self.placed[key] = layout
            after = [(j, inst) for j in range(len(node.gpus)) for inst in self.placed.get((node.name, j), ())]
            old_index[node.name] = before
            new_index[node.name] = {x: k for k, x in enumerate(after)}
            gpus = tuple(dataclasses.replace(g, mig_slices=tuple(i.profile for i in self.placed[(node.name, j)]),
                                             mig_mode=True) if (node.name, j) in self.placed else g
                         for j, g in enumerate(node.gpus))
            nodes.append(dataclasses.replace(node, gpus=gpus))
        placements: list[Placement] = []
        for p in snap.placements.values():
            if p.node in touched and p.mig_slices:
                held = [old_index[p.node][s] for s in p.mig_slices]
                missing = [x for x in held if x not in new_index[p.node]]
                if missing:
                    raise AssertionError(f"MIG change on {p.node} removed instances pod {p.pod} holds: {missing}")
                p = dataclasses.replace(p, mig_slices=tuple(new_index[p.node][x] for x in held))
            placements.append(p)
        return Relayout(tuple(nodes), tuple(placements))
