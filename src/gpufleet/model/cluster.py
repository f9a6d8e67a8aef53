"""Columnar views of a cluster: static capacity (`Cluster`) and mutable usage (`Usage`).

The scheduling core filters and scores every node at once, so node and GPU attributes live
in NumPy arrays indexed by node position (nodes sorted by name, the documented tie-break
order) and by GPU index within the node. `Usage` also keeps per-node aggregates (free
whole GPUs, largest free fraction, free MIG slices per profile) that filters read directly;
`refresh_row` recomputes them for the one node a placement touched.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.model.dra import ClaimAllocation, Pool
from gpufleet.model.dra_table import DeviceRef, DeviceTable, milli
from gpufleet.model.errors import ModelError
from gpufleet.model.node import NodeInfo, NodeName
from gpufleet.model.placement import Placement
from gpufleet.model.pod import GPU_MILLI

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]


class Cluster:
    """Static per-node and per-GPU attributes as arrays. Never mutated after construction."""

    def __init__(self, nodes: Sequence[NodeInfo], pools: Sequence[Pool] = ()) -> None:
        """`pools`: complete DRA pools (`model.dra.pools`); their devices form `devices`."""
        ordered = sorted(nodes, key=lambda n: n.name)
        names = [n.name for n in ordered]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ModelError(f"node {dup}", "appears more than once")
        self.nodes: tuple[NodeInfo, ...] = tuple(ordered)
        self.index: dict[NodeName, int] = {n.name: i for i, n in enumerate(ordered)}
        n = len(ordered)
        g = max((len(x.gpus) for x in ordered), default=0) or 1
        self.n_nodes, self.max_gpus = n, g
        self.cap_cpu: I64 = np.array([x.cpu_milli for x in ordered], dtype=np.int64)
        self.cap_mem: I64 = np.array([x.mem_mib for x in ordered], dtype=np.int64)
        self.cap_pods: I64 = np.array([x.max_pods for x in ordered], dtype=np.int64)
        self.gpu_count: I64 = np.array([len(x.gpus) for x in ordered], dtype=np.int64)
        self.models: tuple[str, ...] = tuple(sorted({x.gpu_model for x in ordered if x.gpu_model}))
        model_ids = {m: i for i, m in enumerate(self.models)}
        self.model_id: I32 = np.array([model_ids[x.gpu_model] if x.gpu_model else -1 for x in ordered],
                                      dtype=np.int32)
        self.gpu_present: Bool = np.zeros((n, g), dtype=np.bool_)
        self.gpu_whole_ok: Bool = np.zeros((n, g), dtype=np.bool_)
        self.gpu_mem: I64 = np.zeros((n, g), dtype=np.int64)
        self.gpu_healthy0: Bool = np.zeros((n, g), dtype=np.bool_)
        self.numa: I32 = np.full((n, g), -1, dtype=np.int32)
        domains: dict[tuple[int, str], int] = {}
        self.nvlink: I32 = np.full((n, g), -1, dtype=np.int32)
        profiles = sorted({s for x in ordered for gpu in x.gpus for s in gpu.mig_slices})
        self.mig_profiles: tuple[str, ...] = tuple(profiles)
        self.mig_profile_id: dict[str, int] = {p: i for i, p in enumerate(profiles)}
        slice_gpu: list[int] = []
        slice_prof: list[int] = []
        self.slice_start: I64 = np.zeros(n, dtype=np.int64)
        self.slice_end: I64 = np.zeros(n, dtype=np.int64)
        # Per GPU, flat (node row, index): gathered in lists, written into the arrays at once.
        rows: list[int] = []
        cols: list[int] = []
        whole_ok: list[bool] = []
        mem: list[int] = []
        healthy: list[bool] = []
        numa: list[int] = []
        link: list[int] = []
        for i, node in enumerate(ordered):
            self.slice_start[i] = len(slice_gpu)
            for j, gpu in enumerate(node.gpus):
                rows.append(i)
                cols.append(j)
                whole_ok.append(not gpu.mig_enabled)
                mem.append(gpu.mem_mib)
                healthy.append(gpu.healthy)
                numa.append(gpu.numa_node)
                link.append(-1 if gpu.nvlink_domain is None
                            else domains.setdefault((i, gpu.nvlink_domain), len(domains)))
                for s in gpu.mig_slices:
                    slice_gpu.append(j)
                    slice_prof.append(self.mig_profile_id[s])
            self.slice_end[i] = len(slice_gpu)
        at = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64))
        self.gpu_present[at] = True
        self.gpu_whole_ok[at] = whole_ok
        self.gpu_mem[at] = mem
        self.gpu_healthy0[at] = healthy
        self.numa[at] = numa
        self.nvlink[at] = link
        self.slice_gpu: I64 = np.array(slice_gpu, dtype=np.int64)
        self.slice_prof: I64 = np.array(slice_prof, dtype=np.int64)
        self.names: tuple[NodeName, ...] = tuple(names)
        self.has_taints: bool = any(x.taints for x in ordered)
        """False when no node has a taint: taint filtering can be skipped outright."""
        self._gpu_lists: dict[int, GpuLists] = {}
        uuids = {(i, gpu.uuid): j for i, node in enumerate(ordered) for j, gpu in enumerate(node.gpus)}
        self.devices = DeviceTable(pools, self.index, uuids)
        """DRA devices (empty without pools)."""

    def gpu_lists(self, i: int) -> GpuLists:
        """Node i's static per-GPU attributes as Python tuples, for the per-node loops of
        placement (`Usage.refresh_row`, device choice): whether each GPU takes whole-GPU or
        fractional work (not MIG), its memory, its NVLink domain id and its NUMA node.
        Built on first use and kept (the cluster never changes)."""
        found = self._gpu_lists.get(i)
        if found is None:
            n = int(self.gpu_count[i])
            found = self._gpu_lists[i] = GpuLists(tuple(self.gpu_whole_ok[i, :n].tolist()),
                                                  tuple(self.gpu_mem[i, :n].tolist()),
                                                  tuple(self.nvlink[i, :n].tolist()), tuple(self.numa[i, :n].tolist()))
        return found


class GpuLists(NamedTuple):
    """One node's static per-GPU attributes (see `Cluster.gpu_lists`)."""

    whole_ok: tuple[bool, ...]
    mem: tuple[int, ...]
    nvlink: tuple[int, ...]
    numa: tuple[int, ...]


GPU_CLASSES = 6
"""Pod classes by GPU shape, counted per node for GPU-clustering policies:
0 = fraction of one GPU, 1/2/3/4 = 1/2/4/8 whole GPUs, 5 = any other whole-GPU count."""


_WHOLE_CLASS = {1: 1, 2: 2, 4: 3, 8: 4}
"""GPU class by the number of whole GPUs (5 for any other count)."""


def gpu_class(p: Placement) -> int:
    """The GPU class of a placement (see GPU_CLASSES); -1 for pods without GPUs or with MIG."""
    if not p.gpus:
        return -1
    if p.milli < GPU_MILLI:
        return 0
    return _WHOLE_CLASS.get(len(p.gpus), 5)


_next_stamp = [1]
"""Process-wide source of node-state stamps (see `Usage.version`): the next one to hand out."""
ROWS_VECTORISED = 16
"""From this many rows on, `refresh_rows` works on arrays; below, row by row is faster."""


def _stamps(k: int) -> I64:
    """k fresh stamps, never handed out before in this process."""
    first = _next_stamp[0]
    _next_stamp[0] = first + k
    return np.arange(first, first + k, dtype=np.int64)


class Usage:
    """Mutable usage arrays plus the per-node aggregates filters read. `copy()` is cheap."""

    __slots__ = ("cluster", "free_cpu", "free_mem", "free_pods", "gpu_used_milli", "gpu_used_mem",
                 "gpu_healthy", "slice_used", "free_whole", "max_free_milli", "max_free_gmem", "whole_gmem",
                 "free_milli_total", "usable_gpus", "max_free_domain", "max_free_numa", "free_slices", "class_pods",
                 "node_ready", "fault_at", "version", "dev_used", "dev_free", "counter_used", "cap_used",
                 "gpu_parts")

    def __init__(self, cluster: Cluster) -> None:
        c = cluster
        n = c.n_nodes
        self.cluster = c
        self.free_cpu: I64 = c.cap_cpu.copy()
        self.free_mem: I64 = c.cap_mem.copy()
        self.free_pods: I64 = c.cap_pods.copy()
        self.gpu_used_milli: I64 = np.zeros((n, c.max_gpus), dtype=np.int64)
        self.gpu_used_mem: I64 = np.zeros((n, c.max_gpus), dtype=np.int64)
        self.gpu_healthy: Bool = c.gpu_healthy0.copy()
        self.slice_used: Bool = np.zeros(len(c.slice_gpu), dtype=np.bool_)
        self.free_whole: I64 = np.zeros(n, dtype=np.int64)
        """Healthy, non-MIG GPUs with nothing on them."""
        self.max_free_milli: I64 = np.zeros(n, dtype=np.int64)
        """Largest free share on one healthy non-MIG GPU."""
        self.max_free_gmem: I64 = np.zeros(n, dtype=np.int64)
        self.whole_gmem: I64 = np.zeros(n, dtype=np.int64)
        """Most GPU memory on one healthy non-MIG GPU with nothing on it (0 when none is free):
        a fraction asking for no more than this fits on that GPU."""
        self.free_milli_total: I64 = np.zeros(n, dtype=np.int64)
        self.usable_gpus: I64 = np.zeros(n, dtype=np.int64)
        """Healthy non-MIG GPUs: the capacity whole-GPU and fractional work can count on."""
        self.max_free_domain: I64 = np.zeros(n, dtype=np.int64)
        """Most free whole GPUs inside one NVLink domain (GPUs without a domain count alone)."""
        self.max_free_numa: I64 = np.zeros(n, dtype=np.int64)
        self.free_slices: I64 = np.zeros((n, max(1, len(c.mig_profiles))), dtype=np.int64)
        self.class_pods: I64 = np.zeros((n, GPU_CLASSES), dtype=np.int64)
        self.node_ready: Bool = np.ones(n, dtype=np.bool_)
        """False while a node is out (a node-level fault, NotReady): nothing is placed on it."""
        self.fault_at: F64 = np.full(n, -np.inf)
        """When each node last had a device or node fault (simulation or cluster time; -inf = never)."""
        self.version: I64 = np.zeros(n, dtype=np.int64)
        """A stamp per node, fresh (process-unique) each time the node's usage changes.

        Equal stamps mean the same node state, across copies of this Usage too, so plugins
        may cache per-node results across cycles keyed on it. It carries no meaning beyond
        identity and never influences a decision."""
        t = c.devices
        self.dev_used: Bool = np.zeros(t.n_devices, dtype=np.bool_)
        """DRA devices allocated exclusively."""
        self.dev_free: Bool = np.ones(t.n_devices, dtype=np.bool_)
        """DRA devices that an exclusive allocation may take now (multi-allocation devices: that still
        have room): not allocated, their counters not exhausted, their GPU unused, their node ready."""
        self.counter_used: I64 = np.zeros(len(t.counter_total), dtype=np.int64)
        self.cap_used: I64 = np.zeros(len(t.cap_total), dtype=np.int64)
        """Consumed capacity of multi-allocation devices, milli-units (`DeviceTable.cap_rows`)."""
        self.gpu_parts: I64 = np.zeros((n, c.max_gpus), dtype=np.int64)
        """Allocated DRA devices carved from each GPU (`DeviceTable.parent`); while any is, the GPU
        counts as fully used."""
        self.refresh_rows(np.arange(n))
        if t.n_devices:
            self.refresh_devices(range(t.n_devices))

    def copy(self) -> Usage:
        new = object.__new__(Usage)
        new.cluster = self.cluster
        for name in Usage.__slots__[1:]:
            setattr(new, name, getattr(self, name).copy())
        return new

    def usable(self) -> Bool:
        """Devices that can take whole-GPU or fractional work (present, not MIG, healthy, node ready)."""
        return self.cluster.gpu_whole_ok & self.gpu_healthy & self.node_ready[:, None]

    def refresh_row(self, i: int) -> None:
        """Recompute node i's aggregates after its usage changed (O(GPUs on the node))."""
        ok, cap_mem, domain, numa = self.cluster.gpu_lists(i)
        n = len(ok)
        whole = best_milli = best_mem = whole_mem = total = usable = 0
        most_in_domain = most_in_numa = 0
        if self.node_ready[i]:
            healthy = self.gpu_healthy[i, :n].tolist()
            used = self.gpu_used_milli[i, :n].tolist()
            gmem = self.gpu_used_mem[i, :n].tolist()
            per_domain: dict[int, int] = {}
            per_numa: dict[int, int] = {}
            for j in range(n):
                if not (ok[j] and healthy[j]):
                    continue
                usable += 1
                free = GPU_MILLI - used[j]
                total += free
                if free > best_milli:
                    best_milli = free
                mem_free = cap_mem[j] - gmem[j]
                if mem_free > best_mem:
                    best_mem = mem_free
                if free == GPU_MILLI and gmem[j] == 0:
                    whole += 1
                    if cap_mem[j] > whole_mem:
                        whole_mem = cap_mem[j]
                    d = domain[j] if domain[j] >= 0 else -1 - j
                    per_domain[d] = per_domain.get(d, 0) + 1
                    per_numa[numa[j]] = per_numa.get(numa[j], 0) + 1
            if whole:
                most_in_domain = max(per_domain.values())
                most_in_numa = max(per_numa.values())
        self.free_whole[i] = whole
        self.max_free_milli[i] = best_milli
        self.max_free_gmem[i] = best_mem
        self.whole_gmem[i] = whole_mem
        self.free_milli_total[i] = total
        self.usable_gpus[i] = usable
        self.max_free_domain[i] = most_in_domain
        self.max_free_numa[i] = most_in_numa
        c = self.cluster
        if c.slice_end[i] > c.slice_start[i]:
            self._refresh_slices(i)
        self._restamp(i)

    def _restamp(self, i: int) -> None:
        """A fresh stamp for node i (see `version`)."""
        self.version[i] = _next_stamp[0]
        _next_stamp[0] += 1

    def _refresh_slices(self, i: int) -> None:
        """Free MIG slices per profile on node i (healthy GPU, node ready)."""
        c = self.cluster
        ready = bool(self.node_ready[i])
        row = self.free_slices[i]
        row[:] = 0
        for s in range(int(c.slice_start[i]), int(c.slice_end[i])):
            if ready and not self.slice_used[s] and self.gpu_healthy[i, c.slice_gpu[s]]:
                row[c.slice_prof[s]] += 1

    def refresh_rows(self, rows: I64) -> None:
        """`refresh_row` for many nodes at once (array operations over their GPUs); the same
        aggregates, each row stamped afresh. Used when many rows change together (a new
        snapshot, a batch of placements)."""
        k = len(rows)
        if k == 0:
            return
        if k < ROWS_VECTORISED:
            for i in rows.tolist():
                self.refresh_row(i)
            return
        c = self.cluster
        ok = c.gpu_whole_ok[rows] & self.gpu_healthy[rows] & self.node_ready[rows, None]
        free = GPU_MILLI - self.gpu_used_milli[rows]
        gmem = self.gpu_used_mem[rows]
        cap = c.gpu_mem[rows]
        whole = ok & (free == GPU_MILLI) & (gmem == 0)
        self.usable_gpus[rows] = ok.sum(axis=1)
        self.free_whole[rows] = whole.sum(axis=1)
        self.free_milli_total[rows] = np.where(ok, free, 0).sum(axis=1)
        self.max_free_milli[rows] = np.maximum(np.where(ok, free, 0).max(axis=1), 0)
        self.max_free_gmem[rows] = np.maximum(np.where(ok, cap - gmem, 0).max(axis=1), 0)
        self.whole_gmem[rows] = np.where(whole, cap, 0).max(axis=1)
        # Whole GPUs per NVLink domain (ids are unique across nodes; a GPU without one counts alone).
        link = c.nvlink[rows]
        linked = whole & (link >= 0)
        per_link = np.bincount(link[linked], minlength=max(int(c.nvlink.max(initial=-1)) + 1, 1))
        in_domain = np.where(linked, per_link[np.where(linked, link, 0)], 0).max(axis=1)
        alone = (whole & (link < 0)).any(axis=1)
        self.max_free_domain[rows] = np.maximum(in_domain, alone.astype(np.int64))
        # Whole GPUs per NUMA node of the same node (GPUs without NUMA information form one group).
        numa = c.numa[rows].astype(np.int64) + 1
        width = int(numa.max(initial=0)) + 1
        key = np.arange(k)[:, None] * width + numa
        per_numa = np.bincount(key[whole], minlength=k * width)
        self.max_free_numa[rows] = np.where(whole, per_numa[key], 0).max(axis=1)
        for i in rows[c.slice_end[rows] > c.slice_start[rows]].tolist():
            self._refresh_slices(i)
        self.version[rows] = _stamps(k)

    # -- mutation -------------------------------------------------------------------------
    def place_all(self, items: Iterable[tuple[Placement, int]], sign: int = 1) -> None:
        """`place` for many (placement, node index) pairs, refreshing each touched node once
        (also when `items` raises part way: what was placed stays consistent)."""
        touched: set[int] = set()
        try:
            for p, i in items:
                self.place(p, i, sign, refresh=False)
                touched.add(i)
        finally:
            self.refresh_rows(np.array(sorted(touched), dtype=np.int64))

    def place(self, p: Placement, i: int, sign: int = 1, *, refresh: bool = True) -> None:
        """Add (sign=1) or remove (sign=-1) a placement's holdings on node index i."""
        self.free_cpu[i] -= sign * p.cpu_milli
        self.free_mem[i] -= sign * p.mem_mib
        self.free_pods[i] -= sign
        if p.gpus:
            for j in p.gpus:
                self.gpu_used_milli[i, j] += sign * p.milli
                self.gpu_used_mem[i, j] += sign * p.gpu_mem_mib
            self.class_pods[i, gpu_class(p)] += sign
        if p.mig_slices:
            start = int(self.cluster.slice_start[i])
            for s in p.mig_slices:
                self.slice_used[start + s] = sign > 0
        if p.claims:
            self.hold_claims(p.claims, sign, held_gpus=p.gpus, refresh=False)
        elif p.gpus and self.cluster.devices.n_devices:
            self.refresh_devices(self.cluster.devices.node_rows(i))  # devices linked to these GPUs
        if not refresh:
            return
        if p.gpus or p.mig_slices or p.claims:
            self.refresh_row(i)
        else:  # no device changed: the GPU aggregates stand, only the node's state is new
            self._restamp(i)

    def hold_claims(self, claims: Iterable[ClaimAllocation], sign: int = 1, held_gpus: tuple[int, ...] = (),
                    refresh: bool = True) -> list[str]:
        """Add (sign=1) or remove what claim allocations hold: devices, counters, capacity, linked
        GPUs (except `held_gpus`, which the placement itself lists and `place` has counted). With
        `refresh`, the touched nodes' aggregates are recomputed (`place` does that itself). Returns a line for each result naming a device the table does not have (a pool
        gone or incomplete: nothing is held for it) or one already allocated."""
        t = self.cluster.devices
        touched: set[int] = set()
        unknown: list[str] = []
        for claim in claims:
            for result in claim.devices:
                found = t.index.get(DeviceRef(result.driver, result.pool, result.device))
                if found is None:
                    unknown.append(f"claim {claim.claim}: device {result.driver}/{result.pool}/{result.device}")
                    continue
                k = found
                node, gpu = int(t.node[k]), int(t.gpu[k])
                if t.multi[k]:
                    caps = t.cap_rows[k]
                    for name, amount in result.consumed.items():
                        if name in caps:
                            self.cap_used[caps[name][0]] += sign * milli(amount)
                    if gpu >= 0 and gpu not in held_gpus:
                        share = share_milli(t, k, result.consumed)
                        self.gpu_used_milli[node, gpu] += sign * share
                else:
                    if sign > 0 and self.dev_used[k]:
                        unknown.append(f"claim {claim.claim}: device {t.refs[k]} is already allocated")
                    self.dev_used[k] = sign > 0
                    for row, used in t.consumes[k]:
                        self.counter_used[row] += sign * used
                        touched.update(t.counter_users[row])
                    if gpu >= 0 and gpu not in held_gpus:
                        self.gpu_used_milli[node, gpu] += sign * GPU_MILLI
                        self.gpu_used_mem[node, gpu] += sign * int(self.cluster.gpu_mem[node, gpu])
                    parent = int(t.parent[k])
                    if parent >= 0:
                        was = int(self.gpu_parts[node, parent])
                        self.gpu_parts[node, parent] = was + sign
                        if (was == 0) != (was + sign == 0):  # the first partition taken, or the last given back
                            self.gpu_used_milli[node, parent] += sign * GPU_MILLI
                            self.gpu_used_mem[node, parent] += sign * int(self.cluster.gpu_mem[node, parent])
                touched.add(k)
                if node >= 0:
                    touched.update(t.node_rows(node))
        self.refresh_devices(sorted(touched))
        for i in sorted({int(t.node[k]) for k in touched if t.node[k] >= 0}):
            if refresh:
                self.refresh_row(i)
            else:
                self._restamp(i)
        return unknown

    def refresh_devices(self, rows: Iterable[int]) -> None:
        """Recompute `dev_free` for these device rows."""
        t = self.cluster.devices
        total, used = t.counter_total, self.counter_used
        for k in rows:
            node, gpu = int(t.node[k]), int(t.gpu[k])
            ok = not self.dev_used[k] and (node < 0 or bool(self.node_ready[node]))
            if ok and gpu >= 0:
                healthy = bool(self.gpu_healthy[node, gpu])
                if t.multi[k]:
                    ok = healthy and self.gpu_used_milli[node, gpu] < GPU_MILLI
                else:
                    ok = healthy and self.gpu_used_milli[node, gpu] == 0 and self.gpu_used_mem[node, gpu] == 0
            parent = int(t.parent[k])
            if ok and parent >= 0:  # its GPU free, or taken by partitions only
                ok = bool(self.gpu_healthy[node, parent]) and (
                    self.gpu_parts[node, parent] > 0 or self.gpu_used_milli[node, parent] == 0)
            if ok and not t.multi[k]:
                ok = all(used[c] + a <= total[c] for c, a in t.consumes[k])
            self.dev_free[k] = ok

    def set_health(self, i: int, gpu: int, healthy: bool) -> None:
        self.gpu_healthy[i, gpu] = healthy
        self.refresh_row(i)
        self.refresh_devices(self.cluster.devices.node_rows(i))

    def set_ready(self, i: int, ready: bool) -> None:
        """Take node i out (no device counts as usable) or bring it back."""
        self.node_ready[i] = ready
        self.refresh_row(i)
        self.refresh_devices(self.cluster.devices.node_rows(i))

    def overcommitted(self, i: int) -> str | None:
        """Why node i is overcommitted, or None. Used to validate snapshots and in tests."""
        c = self.cluster
        if self.free_cpu[i] < 0:
            return "cpu"
        if self.free_mem[i] < 0:
            return "memory"
        if self.free_pods[i] < 0:
            return "pods"
        if (self.gpu_used_milli[i] > GPU_MILLI).any():
            return "GPU milli"
        if (self.gpu_used_mem[i] > c.gpu_mem[i]).any():
            return "GPU memory"
        if (self.gpu_used_milli[i] < 0).any():
            return "negative GPU use"
        return None

    def overcommitted_rows(self, rows: I64) -> I64:
        """The nodes among `rows` that `overcommitted` finds a reason for, at once."""
        c = self.cluster
        used = self.gpu_used_milli[rows]
        bad = ((self.free_cpu[rows] < 0) | (self.free_mem[rows] < 0) | (self.free_pods[rows] < 0)
               | (used > GPU_MILLI).any(axis=1) | (self.gpu_used_mem[rows] > c.gpu_mem[rows]).any(axis=1)
               | (used < 0).any(axis=1))
        return rows[bad]

    def devices_overcommitted(self) -> str | None:
        """Which DRA counter or capacity is used beyond its total, or None."""
        t = self.cluster.devices
        over = np.nonzero(self.counter_used > t.counter_total)[0]
        if len(over):
            return f"counter row {int(over[0])} ({int(self.counter_used[over[0]])} > {int(t.counter_total[over[0]])} milli)"
        over = np.nonzero(self.cap_used > t.cap_total)[0]
        if len(over):
            return f"capacity row {int(over[0])} ({int(self.cap_used[over[0]])} > {int(t.cap_total[over[0]])} milli)"
        return None


def share_milli(t: DeviceTable, k: int, consumed: Mapping[str, Decimal]) -> int:
    """GPU-milli that consumed capacity of a linked multi-allocation device stands for: the
    largest fraction of any of its capacities taken, at least 1 (something runs on the GPU)."""
    best = 1
    for name, (_, cap) in t.cap_rows[k].items():
        amount = consumed.get(name)
        if amount is not None and cap.value > 0:
            best = max(best, -int(-amount * GPU_MILLI // cap.value))
    return min(best, GPU_MILLI)
