"""GpuFit: can a node give the pod its GPUs, and which devices?

- whole GPUs: N healthy devices with nothing on them;
- a fraction: one healthy device with enough free GPU-milli *and* GPU memory;
- MIG: N free carved slices of the requested profile on healthy GPUs;
- the node's GPU model must be in the pod's allowed models (CPU-only pods are not filtered).

Unhealthy devices are never counted. MIG-enabled GPUs serve only MIG requests.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import BoolArray, DevicePicker, FilterPlugin, View
from gpufleet.model import GPU_MILLI, GpuKind, PodSpec

NAME = "GpuFit"
MODEL_REASON = "node(s) didn't match GPU model"
NO_GPU_REASON = "node(s) had no GPU"


def model_mask(state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
    """Nodes whose GPU model the pod allows (cached per allowed-model set); None = any."""
    if not pod.gpu_models or pod.gpu.kind is GpuKind.NONE:
        return None
    key = (NAME, "models", pod.gpu_models)
    mask: BoolArray | None = state.data.get(key)
    if mask is None:
        c = view.cluster
        allowed = np.zeros(len(c.models) + 1, dtype=np.bool_)  # by model id; the last entry is id -1 (no GPU)
        allowed[[i for i, m in enumerate(c.models) if m in pod.gpu_models]] = True
        mask = allowed[c.model_id]
        state.data[key] = mask
    return mask


def fraction_fits(view: View, pod: PodSpec, nodes: np.ndarray) -> BoolArray:
    """Exact per-device check for fractions with a GPU-memory request, on a node subset."""
    u, c = view.usage, view.cluster
    ok = c.gpu_whole_ok[nodes] & u.gpu_healthy[nodes]
    ok &= (GPU_MILLI - u.gpu_used_milli[nodes]) >= pod.gpu.milli
    ok &= (c.gpu_mem[nodes] - u.gpu_used_mem[nodes]) >= pod.gpu.mem_mib
    result: BoolArray = ok.any(axis=1)
    return result


class GpuFit:
    name = NAME

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
        g = pod.gpu
        if g.kind is GpuKind.NONE:
            return None
        u = view.usage
        if g.kind is GpuKind.WHOLE:
            mask = u.free_whole >= g.count
        elif g.kind is GpuKind.FRACTION:
            mask = u.max_free_milli >= g.milli
            if g.mem_mib:
                mask &= u.max_free_gmem >= g.mem_mib
                # A free GPU with that much memory takes any fraction; only the other nodes
                # need the per-device check (the most free milli and memory may be on different GPUs).
                idx = (mask & (u.whole_gmem < g.mem_mib)).nonzero()[0]
                if len(idx):
                    mask[idx] = fraction_fits(view, pod, idx)
        else:
            pid = view.cluster.mig_profile_id.get(g.mig_profile or "")
            if pid is None:
                return np.zeros(view.cluster.n_nodes, dtype=np.bool_)
            mask = u.free_slices[:, pid] >= g.count
        models = model_mask(state, pod, view)
        if models is not None:
            mask &= models
        return mask

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        """One reason per failing node, the first that applies: model, no GPU, then capacity."""
        g = pod.gpu
        if g.kind is GpuKind.NONE:
            return []
        c, u = view.cluster, view.usage
        out: list[tuple[str, BoolArray]] = []
        unexplained = np.ones(c.n_nodes, dtype=np.bool_)

        def add(reason: str, lacking: BoolArray) -> None:
            nonlocal unexplained
            out.append((reason, lacking & unexplained))
            unexplained = unexplained & ~lacking

        models = model_mask(state, pod, view)
        if models is not None:
            add(MODEL_REASON, ~models)
        if g.kind is GpuKind.MIG:
            pid = c.mig_profile_id.get(g.mig_profile or "")
            lacking = np.ones(c.n_nodes, dtype=np.bool_) if pid is None else u.free_slices[:, pid] < g.count
            add(f"Insufficient MIG {g.mig_profile}", lacking)
            return out
        add(NO_GPU_REASON, c.gpu_count == 0)
        if g.kind is GpuKind.WHOLE:
            add("Insufficient GPU", u.free_whole < g.count)
        else:
            add("Insufficient GPU", u.max_free_milli < g.milli)
            if g.mem_mib:
                idx = np.arange(c.n_nodes)
                add("Insufficient GPU memory", ~fraction_fits(view, pod, idx))
        return out

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        return default_devices(pod, view, node)


def default_devices(pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
    """Topology-aware default device choice.

    Whole GPUs: the smallest NVLink domain that holds all of them (keeping bigger free
    domains intact for bigger jobs), else one NUMA node, else the lowest indices.
    Fractions: the tightest device that fits (least free milli left over).
    MIG: the lowest-numbered free slices of the profile.
    """
    g = pod.gpu
    c, u = view.cluster, view.usage
    if g.kind is GpuKind.MIG:
        return mig_devices(pod, view, node)
    whole_ok, cap, domain, numa = c.gpu_lists(node)
    n = len(whole_ok)
    healthy = u.gpu_healthy[node, :n].tolist()
    used = u.gpu_used_milli[node, :n].tolist()
    gmem = u.gpu_used_mem[node, :n].tolist()
    if g.kind is GpuKind.FRACTION:
        best, least = -1, GPU_MILLI + 1  # least free milli left over; ties to the lowest index
        for j in range(n):
            free = GPU_MILLI - used[j]
            if g.milli <= free < least and whole_ok[j] and healthy[j] and cap[j] - gmem[j] >= g.mem_mib:
                best, least = j, free
        return (best,)
    free = [j for j in range(n) if whole_ok[j] and healthy[j] and used[j] == 0 and gmem[j] == 0]
    return whole_devices(free, g.count, domain, numa)


def whole_devices(free: list[int], k: int, domain: Sequence[int], numa: Sequence[int]) -> tuple[int, ...]:
    """k of the free devices: inside the NVLink domain (else NUMA node) with the fewest free
    devices that still holds k, so bigger free domains stay whole; else the lowest indices."""
    if len(free) == k or (len(free) > k and domain[0] >= 0 and domain.count(domain[0]) == len(domain)):
        return tuple(free[:k])  # all free, or one NVLink domain holds every GPU of the node
    for groups in (domain, numa):
        by: dict[int, list[int]] = {}
        for j in free:
            if groups[j] >= 0:
                by.setdefault(groups[j], []).append(j)
        fitting = [devs for devs in by.values() if len(devs) >= k]
        if fitting:
            return tuple(min(fitting, key=lambda d: (len(d), d[0]))[:k])
    return tuple(free[:k])


def mig_devices(pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
    c, u = view.cluster, view.usage
    pid = c.mig_profile_id[pod.gpu.mig_profile or ""]
    start, end = int(c.slice_start[node]), int(c.slice_end[node])
    free = [s - start for s in range(start, end)
            if c.slice_prof[s] == pid and not u.slice_used[s] and u.gpu_healthy[node, c.slice_gpu[s]]]
    return tuple(free[: pod.gpu.count])


_f: FilterPlugin = GpuFit()
_d: DevicePicker = GpuFit()
