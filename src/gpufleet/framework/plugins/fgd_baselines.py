"""The packing baselines of the FGD paper (USENIX ATC'23), as its Go artifact computes them.

Definitions: `shared/experiments/fgd.md` section 4 and the artifact's `pkg/simulator/plugin`.
Scores are integers 0..100 with Go's truncating integer arithmetic, because truncation
creates the ties that the lowest-node-name tie-break then decides; reproducing the
published numbers depends on it. Device choice: the tightest device that fits.
"""

from __future__ import annotations

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, ScorePlugin, View
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.model import GPU_MILLI, GpuKind, PodSpec

MAX_SPEC_CPU = 128_000.0
"""The artifact's normalisation constants: the largest node has 128 cores and 8 GPUs."""
MAX_SPEC_GPU = 8_000.0


def min_max_normalize(scores: FloatArray) -> FloatArray:
    """The artifact's NormalizeScore: integer min-max to 0..100; all equal -> all 0."""
    if scores.size == 0:
        return scores
    lo, hi = scores.min(), scores.max()
    if hi == lo:
        return np.zeros_like(scores)
    result: FloatArray = np.floor((scores - lo) * 100 / (hi - lo))
    return result


class BestFit:
    """Least leftover CPU and GPU after placement (weights 0.5/0.5), min-max normalised."""

    name = "BestFit"
    normalize_keeps_first_max = True
    """Raw scores are integers (truncated), so min-max gives 100 to the highest only (`interfaces`)."""

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        # The artifact's 0.5 * x / MAX, computed as x / (2 * MAX): halving is exact, so both
        # round the same real number. In place, since this runs once per pod.
        u = view.usage
        cpu = u.free_cpu.take(nodes)
        cpu -= pod.cpu_milli
        gpu = u.free_milli_total.take(nodes)
        gpu -= pod.gpu.total_milli
        left: FloatArray = cpu / (2 * MAX_SPEC_CPU)
        left += gpu / (2 * MAX_SPEC_GPU)
        np.subtract(1.0, left, out=left)
        left *= 100.0
        return np.trunc(left, out=left)

    def normalize_score(self, scores: FloatArray) -> FloatArray:
        return min_max_normalize(scores)

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        return default_devices(pod, view, node)


class DotProduct:
    """Tetris-style alignment: prefer the smallest dot product of free and requested vectors."""

    name = "DotProduct"

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        u = view.usage
        dot = (u.free_cpu[nodes] / MAX_SPEC_CPU * (pod.cpu_milli / MAX_SPEC_CPU)
               + u.free_milli_total[nodes] / MAX_SPEC_GPU * (pod.gpu.total_milli / MAX_SPEC_GPU))
        result: FloatArray = np.trunc(100.0 * (1.0 - dot / 2.0))
        return result

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        return default_devices(pod, view, node)


class GpuPacking:
    """Tiered: shared devices first (50..100), then free GPUs on used nodes (33..50), then idle nodes."""

    name = "GpuPacking"

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        g = pod.gpu
        if g.kind not in (GpuKind.WHOLE, GpuKind.FRACTION):
            return np.zeros(len(nodes))
        c, u = view.cluster, view.usage
        free_whole = u.free_whole[nodes]
        idle = free_whole == u.usable_gpus[nodes]
        tier3 = np.maximum(33 - free_whole, free_whole).astype(np.float64)
        if g.kind is GpuKind.WHOLE:
            other = np.full(len(nodes), float(max(50 - g.count, 33)))
        else:
            ok = c.gpu_whole_ok[nodes] & u.gpu_healthy[nodes]
            left = np.where(ok, GPU_MILLI - u.gpu_used_milli[nodes], -1)
            tight = np.where(left >= g.milli, left, GPU_MILLI + 1).min(axis=1)
            shared = np.maximum(100 - (tight * 100 // GPU_MILLI) // 10, 50)
            other = np.where(tight == GPU_MILLI, 49, shared).astype(np.float64)
        result: FloatArray = np.where(idle, tier3, other)
        return result


class GpuClustering:
    """Keep GPU task classes together: same-class nodes 75..100, mixed 50..75, idle 25..50, other 0..25."""

    name = "GpuClustering"

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        g = pod.gpu
        if g.kind not in (GpuKind.WHOLE, GpuKind.FRACTION):
            return np.zeros(len(nodes))
        u = view.usage
        k = 0 if g.kind is GpuKind.FRACTION else {1: 1, 2: 2, 4: 3, 8: 4}.get(g.count, 5)
        classes = u.class_pods[nodes] > 0
        n_classes = classes.sum(axis=1)
        mine = classes[:, k]
        band = np.where(mine, np.where(n_classes == 1, 75, 50), np.where(n_classes == 0, 25, 0))
        fill = (25 * (MAX_SPEC_GPU - u.free_milli_total[nodes])) // MAX_SPEC_GPU
        result: FloatArray = (band + fill).astype(np.float64)
        return result


class RandomScore:
    """Uniformly random feasible node (drawn from the cycle's seeded rng), random fitting device."""

    name = "Random"

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        scores = np.zeros(len(nodes))
        if len(nodes):
            scores[state.rng.randrange(len(nodes))] = 100.0
        return scores

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        g = pod.gpu
        if g.kind is not GpuKind.FRACTION:
            return default_devices(pod, view, node)
        c, u = view.cluster, view.usage
        n = int(c.gpu_count[node])
        fits = [j for j in range(n) if c.gpu_whole_ok[node, j] and u.gpu_healthy[node, j]
                and GPU_MILLI - u.gpu_used_milli[node, j] >= g.milli
                and c.gpu_mem[node, j] - u.gpu_used_mem[node, j] >= g.mem_mib]
        return (fits[state.rng.randrange(len(fits))],)


_b: ScorePlugin = BestFit()
_d: ScorePlugin = DotProduct()
_p: ScorePlugin = GpuPacking()
_c: ScorePlugin = GpuClustering()
_r: ScorePlugin = RandomScore()
