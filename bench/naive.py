"""A straightforward per-node pure-Python scheduler: the `bestfit` profile's filters and scorers,
written the way a per-node plugin framework evaluates them (one node at a time, dicts and
lists, no NumPy). The benchmark runs it beside the vectorised core and checks that both
choose the same node for every pod. (The default profile's look-ahead is not written so:
per node and pod it evaluates F for every option of every typical task after every option of
the pod, about 10^5 steps, so a per-node pure-Python version would take minutes per pod.)
"""

from __future__ import annotations

from gpufleet.model import GPU_MILLI, GpuKind, NodeInfo, PodSpec
from gpufleet.framework.plugins.node_affinity import matches
from gpufleet.framework.plugins.taint_toleration import untolerated


class NaiveNode:
    def __init__(self, info: NodeInfo) -> None:
        self.info = info
        self.cpu = info.cpu_milli
        self.mem = info.mem_mib
        self.pods = info.max_pods
        self.used = [0] * len(info.gpus)
        self.gmem = [0] * len(info.gpus)

    def free_devices(self) -> list[int]:
        return [j for j, g in enumerate(self.info.gpus)
                if g.healthy and not g.mig_enabled and self.used[j] == 0 and self.gmem[j] == 0]


def fits(node: NaiveNode, pod: PodSpec) -> bool:
    if node.pods < 1 or node.cpu < pod.cpu_milli or node.mem < pod.mem_mib:
        return False
    if untolerated(node.info.taints, pod.tolerations) is not None or not matches(pod, node.info):
        return False
    g = pod.gpu
    if g.kind is GpuKind.NONE:
        return True
    if pod.gpu_models and node.info.gpu_model not in pod.gpu_models:
        return False
    if g.kind is GpuKind.WHOLE:
        return len(node.free_devices()) >= g.count
    return any(gpu.healthy and not gpu.mig_enabled and GPU_MILLI - node.used[j] >= g.milli
               and gpu.mem_mib - node.gmem[j] >= g.mem_mib for j, gpu in enumerate(node.info.gpus))


def best_fit(node: NaiveNode, pod: PodSpec) -> float:
    free_gpu = sum(GPU_MILLI - node.used[j] for j, g in enumerate(node.info.gpus) if g.healthy and not g.mig_enabled)
    left = 0.5 * (node.cpu - pod.cpu_milli) / 128_000 + 0.5 * (free_gpu - pod.gpu.total_milli) / 8_000
    return float(int((1.0 - left) * 100.0))


def topology(node: NaiveNode, pod: PodSpec) -> float:
    g = pod.gpu
    if g.kind is not GpuKind.WHOLE or g.count < 2:
        return 0.0
    free = node.free_devices()
    gpus = node.info.gpus
    by_domain: dict[object, int] = {}
    by_numa: dict[int, int] = {}
    for j in free:
        key = gpus[j].nvlink_domain if gpus[j].nvlink_domain is not None else ("alone", j)
        by_domain[key] = by_domain.get(key, 0) + 1
        by_numa[gpus[j].numa_node] = by_numa.get(gpus[j].numa_node, 0) + 1
    if max(by_domain.values(), default=0) >= g.count:
        return 100.0
    return 50.0 if max(by_numa.values(), default=0) >= g.count else 0.0


def schedule_one(nodes: list[NaiveNode], pod: PodSpec) -> NaiveNode | None:
    feasible = [n for n in nodes if fits(n, pod)]
    if not feasible:
        return None
    raw = [best_fit(n, pod) for n in feasible]
    lo, hi = min(raw), max(raw)
    norm = [0.0 if hi == lo else float(int((r - lo) * 100 / (hi - lo))) for r in raw]
    total = [b + topology(n, pod) for n, b in zip(feasible, norm)]
    return feasible[total.index(max(total))]


def place(node: NaiveNode, pod: PodSpec, devices: tuple[int, ...], milli: int, gpu_mem: int) -> None:
    node.cpu -= pod.cpu_milli
    node.mem -= pod.mem_mib
    node.pods -= 1
    for j in devices:
        node.used[j] += milli
        node.gmem[j] += gpu_mem


# -- FGD, per node and per typical task, as the paper's Go simulator computes it -------------

def node_frag(cpu_free: int, free: list[int], model: str | None, tasks: list[tuple[int, int, int, frozenset[str], float]]) -> float:
    """F_n = sum_m p_m * frag(n, m) for one node (see framework/plugins/fragmentation.py)."""
    total = sum(free)
    out = 0.0
    for cpu, milli, num, models, p in tasks:
        fits = (num > 0 and (not models or model in models) and cpu_free >= cpu
                and sum(1 for f in free if f >= milli) >= num)
        out += p * (sum(f for f in free if f < milli) if fits else total)
    return out


def fgd_pick(nodes: list[NaiveNode], pod: PodSpec, tasks: list[tuple[int, int, int, frozenset[str], float]]
             ) -> tuple[NaiveNode, tuple[int, ...]] | None:
    """The FGD choice by looping over nodes and devices in pure Python."""
    import math

    best: tuple[int, NaiveNode, tuple[int, ...]] | None = None
    for node in nodes:
        if not fits(node, pod):
            continue
        free = [GPU_MILLI - u for u in node.used]
        before = node_frag(node.cpu, free, node.info.gpu_model, tasks)
        g = pod.gpu
        options: list[tuple[tuple[int, ...], list[int]]] = []
        if g.kind is GpuKind.FRACTION:
            for j, f in enumerate(free):
                if f >= g.milli:
                    options.append(((j,), free[:j] + [f - g.milli] + free[j + 1:]))
        elif g.kind is GpuKind.WHOLE:
            chosen = tuple(j for j, f in enumerate(free) if f == GPU_MILLI)[: g.count]
            options.append((chosen, [0 if j in chosen else f for j, f in enumerate(free)]))
        else:
            options.append(((), free))
        for devices, after_free in options:
            after = node_frag(node.cpu - pod.cpu_milli, after_free, node.info.gpu_model, tasks)
            score = int(100.0 / (1.0 + math.exp(-(before - after) / 1000.0)))
            if best is None or score > best[0]:
                best = (score, node, devices)
    return None if best is None else (best[1], best[2])
