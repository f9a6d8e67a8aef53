"""Columnar views of a cluster: static capacity (`Cluster`) and mutable usage (`Usage`).

The scheduling core filters and scores every node at once, so node and GPU attributes live
in NumPy arrays indexed by node position (nodes sorted by name, the documented tie-break
order) and by GPU index within the node. `Usage` also keeps per-node aggregates (free
whole GPUs, largest free fraction, free MIG slices per profile) that filters read directly;
`refresh_row` recomputes them for the one node a placement touched.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.model.errors import ModelError
from gpufleet.model.node import NodeInfo, NodeName
from gpufleet.model.placement import Placement
from gpufleet.model.pod import GPU_MILLI

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]


class Cluster:
    """Static per-node and per-GPU attributes as arrays. Never mutated after construction."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
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
        for i, node in enumerate(ordered):
            self.slice_start[i] = len(slice_gpu)
            for j, gpu in enumerate(node.gpus):
                self.gpu_present[i, j] = True
                self.gpu_whole_ok[i, j] = not gpu.mig_enabled
                self.gpu_mem[i, j] = gpu.mem_mib
                self.gpu_healthy0[i, j] = gpu.healthy
                self.numa[i, j] = gpu.numa_node
                if gpu.nvlink_domain is not None:
                    self.nvlink[i, j] = domains.setdefault((i, gpu.nvlink_domain), len(domains))
                for s in gpu.mig_slices:
                    slice_gpu.append(j)
                    slice_prof.append(self.mig_profile_id[s])
            self.slice_end[i] = len(slice_gpu)
        self.slice_gpu: I64 = np.array(slice_gpu, dtype=np.int64)
        self.slice_prof: I64 = np.array(slice_prof, dtype=np.int64)
        self.names: tuple[NodeName, ...] = tuple(names)


class Usage:
    """Mutable usage arrays plus the per-node aggregates filters read. `copy()` is cheap."""

    __slots__ = ("cluster", "used_cpu", "used_mem", "used_pods", "gpu_used_milli", "gpu_used_mem",
                 "gpu_healthy", "slice_used", "free_whole", "max_free_milli", "max_free_gmem",
                 "free_slices", "version")

    def __init__(self, cluster: Cluster) -> None:
        c = cluster
        self.cluster = c
        self.used_cpu: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.used_mem: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.used_pods: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.gpu_used_milli: I64 = np.zeros((c.n_nodes, c.max_gpus), dtype=np.int64)
        self.gpu_used_mem: I64 = np.zeros((c.n_nodes, c.max_gpus), dtype=np.int64)
        self.gpu_healthy: Bool = c.gpu_healthy0.copy()
        self.slice_used: Bool = np.zeros(len(c.slice_gpu), dtype=np.bool_)
        self.free_whole: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.max_free_milli: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.max_free_gmem: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        self.free_slices: I64 = np.zeros((c.n_nodes, max(1, len(c.mig_profiles))), dtype=np.int64)
        self.version: I64 = np.zeros(c.n_nodes, dtype=np.int64)
        """Bumped whenever a node's usage changes; caches key on it."""
        self.refresh_all()

    def copy(self) -> Usage:
        new = object.__new__(Usage)
        new.cluster = self.cluster
        for name in Usage.__slots__[1:]:
            setattr(new, name, getattr(self, name).copy())
        return new

    # -- derived views ------------------------------------------------------------------
    @property
    def free_cpu(self) -> I64:
        return self.cluster.cap_cpu - self.used_cpu

    @property
    def free_mem(self) -> I64:
        return self.cluster.cap_mem - self.used_mem

    def usable(self) -> Bool:
        """Devices that can take whole-GPU or fractional work (present, not MIG, healthy)."""
        return self.cluster.gpu_whole_ok & self.gpu_healthy

    def refresh_all(self) -> None:
        c = self.cluster
        ok = self.usable()
        free_milli = np.where(ok, GPU_MILLI - self.gpu_used_milli, 0)
        free_gmem = np.where(ok, c.gpu_mem - self.gpu_used_mem, 0)
        self.free_whole[:] = (ok & (self.gpu_used_milli == 0) & (self.gpu_used_mem == 0)).sum(axis=1)
        self.max_free_milli[:] = free_milli.max(axis=1)
        self.max_free_gmem[:] = free_gmem.max(axis=1)
        self.free_slices[:] = 0
        if len(c.slice_gpu):
            nodes = np.repeat(np.arange(c.n_nodes), c.slice_end - c.slice_start)
            healthy = self.gpu_healthy[nodes, c.slice_gpu]
            free = ~self.slice_used & healthy
            np.add.at(self.free_slices, (nodes[free], c.slice_prof[free]), 1)

    def refresh_row(self, i: int) -> None:
        """Recompute node i's aggregates after its usage changed (O(GPUs on the node))."""
        c = self.cluster
        ok = c.gpu_whole_ok[i] & self.gpu_healthy[i]
        used = self.gpu_used_milli[i]
        gmem = self.gpu_used_mem[i]
        whole = 0
        best_milli = 0
        best_mem = 0
        for j in np.flatnonzero(ok).tolist():
            u = int(used[j])
            m = int(gmem[j])
            if u == 0 and m == 0:
                whole += 1
            best_milli = max(best_milli, GPU_MILLI - u)
            best_mem = max(best_mem, int(c.gpu_mem[i, j]) - m)
        self.free_whole[i] = whole
        self.max_free_milli[i] = best_milli
        self.max_free_gmem[i] = best_mem
        start, end = int(c.slice_start[i]), int(c.slice_end[i])
        if end > start:
            row = self.free_slices[i]
            row[:] = 0
            for s in range(start, end):
                if not self.slice_used[s] and self.gpu_healthy[i, c.slice_gpu[s]]:
                    row[c.slice_prof[s]] += 1
        self.version[i] += 1

    # -- mutation -------------------------------------------------------------------------
    def place(self, p: Placement, i: int, sign: int = 1) -> None:
        """Add (sign=1) or remove (sign=-1) a placement's holdings on node index i."""
        self.used_cpu[i] += sign * p.cpu_milli
        self.used_mem[i] += sign * p.mem_mib
        self.used_pods[i] += sign
        for j in p.gpus:
            self.gpu_used_milli[i, j] += sign * p.milli
            self.gpu_used_mem[i, j] += sign * p.gpu_mem_mib
        start = int(self.cluster.slice_start[i])
        for s in p.mig_slices:
            self.slice_used[start + s] = sign > 0
        self.refresh_row(i)

    def set_health(self, i: int, gpu: int, healthy: bool) -> None:
        self.gpu_healthy[i, gpu] = healthy
        self.refresh_row(i)

    def overcommitted(self, i: int) -> str | None:
        """Why node i is overcommitted, or None. Used to validate snapshots and in tests."""
        c = self.cluster
        if self.used_cpu[i] > c.cap_cpu[i]:
            return "cpu"
        if self.used_mem[i] > c.cap_mem[i]:
            return "memory"
        if self.used_pods[i] > c.cap_pods[i]:
            return "pods"
        if (self.gpu_used_milli[i] > GPU_MILLI).any():
            return "GPU milli"
        if (self.gpu_used_mem[i] > c.gpu_mem[i]).any():
            return "GPU memory"
        return None
