"""MostAllocated (bin-packing) and LeastAllocated (spreading), kube-scheduler's formulas.

Score = mean over CPU, memory and GPU-milli of the node's allocated (or free) fraction
after placing the pod, times 100. The GPU term counts healthy non-MIG GPUs only (a node with
broken GPUs must not look busy); nodes without such GPUs ignore it.
"""

from __future__ import annotations

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, ScorePlugin, View
from gpufleet.model import PodSpec

MOST = "MostAllocated"
LEAST = "LeastAllocated"


def allocated_fraction(pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
    c, u = view.cluster, view.usage
    cpu = 1.0 - (u.free_cpu[nodes] - pod.cpu_milli) / np.maximum(c.cap_cpu[nodes], 1)
    mem = 1.0 - (u.free_mem[nodes] - pod.mem_mib) / np.maximum(c.cap_mem[nodes], 1)
    gpu_cap = u.usable_gpus[nodes] * 1000  # broken or MIG-mode GPUs are not capacity here
    has_gpu = gpu_cap > 0
    gpu = 1.0 - (u.free_milli_total[nodes] - pod.gpu.total_milli) / np.maximum(gpu_cap, 1)
    result: FloatArray = (cpu + mem + np.where(has_gpu, gpu, 0.0)) / np.where(has_gpu, 3.0, 2.0)
    return result


class MostAllocated:
    name = MOST

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        return 100.0 * allocated_fraction(pod, view, nodes)


class LeastAllocated:
    name = LEAST

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        return 100.0 * (1.0 - allocated_fraction(pod, view, nodes))


_m: ScorePlugin = MostAllocated()
_l: ScorePlugin = LeastAllocated()
