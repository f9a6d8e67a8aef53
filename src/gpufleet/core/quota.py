"""Queue accounting for one cycle: what each queue and its ancestors hold, per dimension.

Dimensions are `cpu` (milli), `memory` (MiB), `gpu` (GPU-milli, every model) and one
`gpu/<model>` per GPU model of the cluster. A MIG slice counts as its compute share of one
GPU (a 3g slice is 3/7 of a GPU). Adding a pod to a queue adds it to every ancestor, so
limits and guarantees of inner queues hold for their whole subtree.

DRA claims count as the GPUs they hold (`claims_gpu_milli`), as `Usage` holds them: a device
linked to a GPU (its `uuid` names the GPU) counts all of it when exclusive, the share of it
its consumed capacity stands for when shared; a MIG device (a `profile` attribute such as
`3g.40gb`, carved or a partition consuming its GPU's counters) counts as a MIG slice does;
any other device counts no GPU. What a pending pod asks is `PodGpus.milli` (`core.claim_gpus`
for pods with claims).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.model import GPU_MILLI, Cluster, GpuKind, GpuRequest, Placement, PodSpec, QueueTree
from gpufleet.model.cluster import share_milli
from gpufleet.model.dra import ClaimAllocation
from gpufleet.model.dra_table import DeviceRef, DeviceTable
from gpufleet.model.queue import CPU, GPU, GPU_MODEL_PREFIX, MEMORY

F64 = npt.NDArray[np.float64]
BASE = (CPU, MEMORY, GPU)
GPU_DIM = 2


def mig_milli(profile: str) -> int:
    """GPU-milli of one MIG slice: its compute slices of 7 (`3g.40gb` -> 428)."""
    return GPU_MILLI * int(profile.split("g.", 1)[0]) // 7


_MIG_PROFILE = re.compile(r"^[1-7]g\.")


def gpu_milli(g: GpuRequest) -> int:
    """GPU-milli of a GPU request (MIG slices at their compute share)."""
    if g.kind is GpuKind.MIG and g.mig_profile is not None:
        return g.count * mig_milli(g.mig_profile)
    return g.total_milli


def pod_gpu_milli(pod: PodSpec) -> int:
    """GPU-milli of what the pod asks as extended resources (its claims not counted: `PodGpus`)."""
    return gpu_milli(pod.gpu)


def device_gpu_milli(t: DeviceTable, k: int, consumed: Mapping[str, Decimal]) -> int:
    """GPU-milli device row k counts for when allocated with `consumed` capacity: all of its
    GPU when linked and exclusive, the share `consumed` stands for when linked and shared (as
    `Usage` holds them), a MIG slice's compute share for a MIG device, else nothing."""
    if t.gpu[k] >= 0:
        return share_milli(t, k, consumed) if t.multi[k] else GPU_MILLI
    profile = t.devices[k].attributes.get(f"{t.refs[k].driver}/profile")
    return mig_milli(profile) if isinstance(profile, str) and _MIG_PROFILE.match(profile) else 0


def claims_gpu_milli(t: DeviceTable, claims: Iterable[ClaimAllocation], held_gpus: Sequence[int] = ()) -> int:
    """GPU-milli the devices of `claims` count for, those linked to `held_gpus` left out (a
    placement lists them itself, as `Usage.place` leaves them out); unknown devices count none."""
    total = 0
    for claim in claims:
        for result in claim.devices:
            k = t.index.get(DeviceRef(result.driver, result.pool, result.device))
            if k is not None and not (t.gpu[k] >= 0 and int(t.gpu[k]) in held_gpus):
                total += device_gpu_milli(t, k, result.consumed)
    return total


def placement_gpu_milli(p: Placement, cluster: Cluster) -> int:
    milli = len(p.gpus) * p.milli
    if p.mig_slices:
        start = int(cluster.slice_start[cluster.index[p.node]])
        milli += sum(mig_milli(cluster.mig_profiles[int(cluster.slice_prof[start + s])]) for s in p.mig_slices)
    if p.claims:
        milli += claims_gpu_milli(cluster.devices, p.claims, p.gpus)
    return milli


class PodGpus(Protocol):
    """What pending pods ask of GPUs, as the queue layer counts it (one cycle)."""

    def request(self, pod: PodSpec) -> GpuRequest:
        """The GPUs the pod is placed as: its claims' (`ClaimAllocator.as_gpus`) or its own."""

    def milli(self, pod: PodSpec) -> int:
        """GPU-milli the pod counts against its queue's shares and limits before it runs."""


class OwnGpus:
    """Pods' own extended-resource requests (no claims counted)."""

    def request(self, pod: PodSpec) -> GpuRequest:
        return pod.gpu

    def milli(self, pod: PodSpec) -> int:
        return pod_gpu_milli(pod)


class QueueBook:
    """Per-queue allocation, guarantees, limits and weights as arrays [queue, dimension]."""

    def __init__(self, tree: QueueTree, cluster: Cluster, pod_gpus: PodGpus | None = None) -> None:
        self.tree = tree
        self.cluster = cluster
        self.gpus: PodGpus = pod_gpus if pod_gpus is not None else OwnGpus()
        """What pending pods ask of GPUs (`pod_vector`)."""
        self.names: tuple[str, ...] = tuple(sorted(tree.queues))
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.dims: tuple[str, ...] = BASE + tuple(GPU_MODEL_PREFIX + m for m in cluster.models)
        dim_index = {d: k for k, d in enumerate(self.dims)}
        n, d = len(self.names), len(self.dims)
        self.up: list[tuple[int, ...]] = [tuple(self.index[a] for a in reversed(tree.path(q))) for q in self.names]
        """Each queue, then its ancestors up to the root."""
        self.children: list[tuple[int, ...]] = [tuple(self.index[c] for c in tree.children.get(q, ()))
                                                for q in self.names]
        self.roots: tuple[int, ...] = tuple(self.index[c] for c in tree.children.get(None, ()))
        self.weight: list[float] = [float(tree.queues[q].weight) for q in self.names]
        self.guaranteed: F64 = np.zeros((n, d))
        self.limit: F64 = np.full((n, d), np.inf)
        for i, q in enumerate(self.names):
            queue = tree.queues[q]
            for dim, amount in queue.guaranteed.items():
                if dim in dim_index:
                    self.guaranteed[i, dim_index[dim]] = amount
            for dim, amount in queue.limit.items():
                if dim in dim_index:
                    self.limit[i, dim_index[dim]] = amount
            if not queue.borrow:
                capped = self.guaranteed[i] > 0
                self.limit[i, capped] = np.minimum(self.limit[i, capped], self.guaranteed[i, capped])
        self.model_limited = [bool(np.isfinite(self.limit[list(self.up[i]), len(BASE):]).any())
                              for i in range(n)]
        self.limited = [bool(np.isfinite(self.limit[list(self.up[i]), :len(BASE)]).any()) for i in range(n)]
        """Whether a queue or an ancestor has a CPU, memory or GPU limit (else `over_limit` is skipped)."""
        """Whether a queue or an ancestor limits some GPU model (then nodes are masked per model)."""
        gpus = cluster.gpu_count.astype(np.float64) * GPU_MILLI
        per_model = [float(gpus[cluster.model_id == m].sum()) for m in range(len(cluster.models))]
        self.capacity: F64 = np.array([float(cluster.cap_cpu.sum()), float(cluster.cap_mem.sum()),
                                       float(gpus.sum()), *per_model])
        self.alloc: F64 = np.zeros((n, d))
        self._leaf: dict[str, int] = {}
        self.inv_capacity: F64 = np.where(self.capacity > 0, 1.0 / np.maximum(self.capacity, 1.0), 0.0)
        self.dominant: list[float] = [0.0] * n
        """max over dimensions of alloc / capacity, kept current by `add`."""
        self.below: list[bool] = [bool((self.guaranteed[i] > 0).any()) for i in range(n)]
        """Whether the queue holds less than its guarantee in some dimension, kept current by `add`."""

    def queue_of(self, name: str) -> int:
        q = self._leaf.get(name)
        if q is None:
            q = self._leaf[name] = self.index[self.tree.leaf_of(name)]
        return q

    def load(self, placements: Iterable[Placement]) -> None:
        """Add what `placements` hold, summed per queue and GPU model first (one array update each)."""
        totals: dict[tuple[int, int], list[int]] = {}
        index, model_id = self.cluster.index, self.cluster.model_id
        for p in placements:
            key = (self.queue_of(p.queue), int(model_id[index[p.node]]))
            t = totals.get(key)
            if t is None:
                t = totals[key] = [0, 0, 0]
            t[0] += p.cpu_milli
            t[1] += p.mem_mib
            t[2] += placement_gpu_milli(p, self.cluster) if p.mig_slices or p.claims else len(p.gpus) * p.milli
        for (q, model), (cpu, mem, gpu) in totals.items():
            self.add(q, self.vector(cpu, mem, gpu, model))

    def is_leaf(self, q: int) -> bool:
        return not self.children[q]

    def vector(self, cpu: int, mem: int, gpu_milli: int, model_id: int = -1) -> F64:
        v = np.zeros(len(self.dims))
        v[0], v[1], v[2] = cpu, mem, gpu_milli
        if model_id >= 0 and gpu_milli:
            v[len(BASE) + model_id] = gpu_milli
        return v

    def pod_vector(self, pod: PodSpec, node: int = -1) -> F64:
        model = int(self.cluster.model_id[node]) if node >= 0 else -1
        return self.vector(pod.cpu_milli, pod.mem_mib, self.gpus.milli(pod), model)

    def placement_vector(self, p: Placement) -> F64:
        node = self.cluster.index[p.node]
        return self.vector(p.cpu_milli, p.mem_mib, placement_gpu_milli(p, self.cluster),
                           int(self.cluster.model_id[node]))

    def add(self, q: int, vec: F64, sign: int = 1) -> None:
        for a in self.up[q]:
            row = self.alloc[a]
            row += sign * vec
            self.dominant[a] = float((row * self.inv_capacity).max())
            self.below[a] = bool((row < self.guaranteed[a]).any())

    def over_limit(self, q: int, vec: F64) -> str | None:
        """Why adding `vec` to queue q breaks a limit of q or an ancestor (model dimensions excluded)."""
        if not self.limited[q]:
            return None
        for a in self.up[q]:
            after = self.alloc[a, :len(BASE)] + vec[:len(BASE)]
            over = np.flatnonzero((after > self.limit[a, :len(BASE)]) & (vec[:len(BASE)] > 0))
            if len(over):
                k = int(over[0])
                return (f"queue {self.names[a]}: limit of {_amount(self.dims[k], self.limit[a, k])} reached "
                        f"({_amount(self.dims[k], self.alloc[a, k])} in use, the pod asks "
                        f"{_amount(self.dims[k], vec[k])})")
        return None

    def allowed_models(self, q: int, gpu_milli: int) -> npt.NDArray[np.bool_]:
        """Per GPU model: whether `gpu_milli` more of it stays within q's and its ancestors' limits."""
        ok = np.ones(len(self.dims) - len(BASE), dtype=np.bool_)
        for a in self.up[q]:
            ok &= self.alloc[a, len(BASE):] + gpu_milli <= self.limit[a, len(BASE):]
        return ok

    def model_limits_reached(self, q: int, gpu_milli: int) -> list[str]:
        """Per GPU model `gpu_milli` more of would break a limit of q or an ancestor: why, naming the queue."""
        out: list[str] = []
        base = len(BASE)
        for m in range(len(self.dims) - base):
            for a in self.up[q]:
                if self.alloc[a, base + m] + gpu_milli > self.limit[a, base + m]:
                    k = base + m
                    out.append(f"queue {self.names[a]}: limit of {_amount(self.dims[k], self.limit[a, k])} reached "
                               f"({_amount(self.dims[k], self.alloc[a, k])} in use), its nodes left out")
                    break
        return out

    def below_guarantee(self, q: int) -> bool:
        return self.below[q]


def _amount(dim: str, value: float) -> str:
    if dim == CPU:
        return f"{value / 1000:g} CPU"
    if dim == MEMORY:
        return f"{value / 1024:g} GiB memory"
    gpus = f"{value / GPU_MILLI:g}"
    return f"{gpus} GPU" if dim == GPU else f"{gpus} {dim[len(GPU_MODEL_PREFIX):]} GPU"
