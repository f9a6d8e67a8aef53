"""FGD: place a task where it increases expected fragmentation the least.

score = int(100 * sigmoid((F_before - F_after) / 1000)) per node, F as in `fragmentation`.
A fraction tries every device with room and keeps the best (also the device it gets);
whole GPUs take the first free devices. This is the published policy, kept exact (integer
truncation included) so the paper's numbers can be reproduced; gpufleet's own policy
(`FragAware`) builds on the same measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import DevicePicker, FloatArray, IntArray, ScorePlugin, View
from gpufleet.framework.plugins.fragmentation import F64, FragModel, TypicalTask
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.model import GPU_MILLI, Cluster, GpuKind, PodSpec

NAME = "FGD"


@dataclass(frozen=True, slots=True)
class FgdArgs:
    typical_tasks: tuple[TypicalTask, ...] = ()
    """The task distribution; drivers pass it (the simulator from the trace, as the paper)."""


def hypothetical(model: FragModel, pod: PodSpec, view: View, nodes: IntArray) -> tuple[FloatArray, IntArray]:
    """(FGD score, chosen device or -1) per candidate node, for placing `pod` there."""
    c, u = view.cluster, view.usage
    ok = c.gpu_whole_ok[nodes] & u.gpu_healthy[nodes]
    free = np.where(ok, GPU_MILLI - u.gpu_used_milli[nodes], 0)
    model_id = c.model_id[nodes].astype(np.int64)
    cpu_after = u.free_cpu[nodes] - pod.cpu_milli
    before = model.batch(model_id, u.free_cpu[nodes], free)
    device = np.full(len(nodes), -1, dtype=np.int64)
    g = pod.gpu
    if g.kind is GpuKind.FRACTION:
        # Every device with room is tried; the first with the highest *truncated* score wins.
        best = np.full(len(nodes), -1.0)
        for j in range(c.max_gpus):
            room = free[:, j] >= g.milli
            if not room.any():
                continue
            after_free = free.copy()
            after_free[:, j] -= g.milli
            score = np.where(room, sigmoid_score(before - model.batch(model_id, cpu_after, after_free)), -1.0)
            better = score > best
            best = np.where(better, score, best)
            device = np.where(better, j, device)
        return best, device
    after_free = free
    if g.kind is GpuKind.WHOLE:
        # The first `count` fully free devices become empty: remove `count` free entries of 1000.
        whole = free == GPU_MILLI
        rank = np.cumsum(whole, axis=1)
        after_free = np.where(whole & (rank <= g.count), 0, free)
    return sigmoid_score(before - model.batch(model_id, cpu_after, after_free)), device


def sigmoid_score(delta: F64) -> FloatArray:
    result: FloatArray = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
    return result


class Fgd:
    name = NAME

    def __init__(self, args: FgdArgs, cluster: Cluster | None = None) -> None:
        self.args = args
        self._models: dict[int, FragModel] = {}

    def frag_model(self, cluster: Cluster) -> FragModel:
        model = self._models.get(id(cluster))
        if model is None:
            model = FragModel(cluster, self.args.typical_tasks)
            self._models = {id(cluster): model}
        return model

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        model = self.frag_model(view.cluster)
        scores, device = hypothetical(model, pod, view, nodes)
        if pod.gpu.kind is GpuKind.FRACTION:
            state.data[(NAME, pod.uid)] = (nodes, device)
        return scores

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        saved = state.data.pop((NAME, pod.uid), None)
        if saved is not None:
            nodes, device = saved
            j = int(device[np.searchsorted(nodes, node)])
            if j >= 0:
                return (j,)
        return default_devices(pod, view, node)


_s: ScorePlugin = Fgd(FgdArgs())
_p: DevicePicker = Fgd(FgdArgs())
