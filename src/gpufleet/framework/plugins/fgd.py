"""FGD: place a task where it increases expected fragmentation the least.

score = int(100 * sigmoid((F_before - F_after) / 1000)) per node, F as in `fragmentation`.
A fraction tries every device with room and keeps the first with the highest truncated
score (also the device it gets); whole GPUs take the first free devices. This is the
published policy, kept exact so the paper's numbers can be reproduced.

Speed: a node's score depends only on that node's state and the pod's spec, so scores are
cached per spec and recomputed only for nodes whose state stamp (`Usage.version`) changed
since; in a cycle of thousands of pods, or a simulation of one pod per cycle, most nodes
are unchanged between two pods of the same spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import DevicePicker, FloatArray, IntArray, ScorePlugin, View
from gpufleet.framework.plugins.fragmentation import F64, FragModel, TypicalTask
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.model import GPU_MILLI, Cluster, GpuKind, PodSpec

NAME = "FGD"
DEDUP_MIN_ROWS = 64
"""Above this many stale nodes, identical node states are evaluated once."""

ScoreFn = Callable[[F64, F64, F64, np.ndarray], FloatArray]
"""(F_before, F_after, milli left on the chosen device, free milli per device after) per
option -> score; higher is better."""


@dataclass(frozen=True, slots=True)
class FgdArgs:
    typical_tasks: tuple[TypicalTask, ...] = ()
    """The task distribution; drivers pass it (the simulator from the trace, as the paper)."""


def fgd_score(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
    result: FloatArray = np.trunc(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))
    return result


def _options(pod: PodSpec, free: np.ndarray, free_mem: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free-milli rows after each placement option: (rows, owner row index, device or -1)."""
    g = pod.gpu
    k, n_dev = free.shape
    if g.kind is GpuKind.FRACTION:
        rows = np.repeat(free, n_dev, axis=0)                       # (k*G) x G, option j of row r
        owner = np.repeat(np.arange(k), n_dev)
        device = np.tile(np.arange(n_dev), k)
        room = (rows[np.arange(k * n_dev), device] >= g.milli) & (free_mem.reshape(-1) >= g.mem_mib)
        rows[np.arange(k * n_dev), device] -= g.milli
        return rows[room], owner[room], device[room]
    if g.kind is GpuKind.WHOLE:
        whole = free == GPU_MILLI
        rows = np.where(whole & (np.cumsum(whole, axis=1) <= g.count), 0, free)
        return rows, np.arange(k), np.full(k, -1)
    return free, np.arange(k), np.full(k, -1)


class FragScorer:
    """Per-spec cached scores of a fragmentation-based policy (shared by FGD and FragAware)."""

    def __init__(self, tasks: tuple[TypicalTask, ...], score_fn: ScoreFn) -> None:
        self.tasks = tasks
        self.score_fn = score_fn
        self._cluster: Cluster | None = None
        self._model: FragModel | None = None
        self._cache: dict[tuple[object, ...], tuple[F64, np.ndarray, np.ndarray]] = {}

    def _reset(self, cluster: Cluster) -> FragModel:
        # Keyed on the cluster object itself: a freed cluster's id() can be reused.
        if self._model is None or self._cluster is not cluster:
            self._model = FragModel(cluster, self.tasks)
            self._cluster = cluster
            self._cache = {}
        return self._model

    def scores(self, pod: PodSpec, view: View, nodes: IntArray) -> tuple[FloatArray, IntArray]:
        c, u = view.cluster, view.usage
        model = self._reset(c)
        key = (pod.cpu_milli, pod.gpu)
        entry = self._cache.get(key)
        if entry is None:
            entry = (np.zeros(c.n_nodes), np.zeros(c.n_nodes, dtype=np.int64),
                     np.full(c.n_nodes, -1, dtype=np.int64))
            self._cache[key] = entry
        cached, stamp, device = entry
        stale = nodes[stamp[nodes] != u.version[nodes]]
        if len(stale):
            cached[stale], device[stale] = self._compute(model, pod, view, stale)
            stamp[stale] = u.version[stale]
        return cached[nodes], device[nodes]

    def _compute(self, model: FragModel, pod: PodSpec, view: View, nodes: IntArray) -> tuple[F64, IntArray]:
        c, u = view.cluster, view.usage
        ok = c.gpu_whole_ok[nodes] & u.gpu_healthy[nodes]
        free = np.where(ok, GPU_MILLI - u.gpu_used_milli[nodes], 0)
        # Free GPU memory matters only to a share that asks for some; otherwise keep it out
        # of the state key so more nodes dedupe.
        asks_mem = pod.gpu.kind is GpuKind.FRACTION and pod.gpu.mem_mib > 0
        free_mem = c.gpu_mem[nodes] - u.gpu_used_mem[nodes] if asks_mem else np.zeros_like(free)
        model_id = c.model_id[nodes].astype(np.int64)
        cpu = u.free_cpu[nodes]
        if len(nodes) > DEDUP_MIN_ROWS:
            # Many nodes share a state (empty nodes of one shape): evaluate each state once.
            key = np.column_stack((model_id, cpu, free, free_mem))
            _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
            best, chosen = self._evaluate(model, pod, model_id[first], cpu[first], free[first], free_mem[first])
            return best[inverse.ravel()], chosen[inverse.ravel()]
        return self._evaluate(model, pod, model_id, cpu, free, free_mem)

    def option_scores(self, model: FragModel, model_id: IntArray, cpu: IntArray, free: IntArray,
                      owner: IntArray, rows: IntArray, pod_cpu: int, before: F64, after: F64,
                      leftover: F64) -> FloatArray:
        """Score of every placement option: `rows` (free milli per device after it) of state
        `owner`; F before/after per state/option. FGD's: `score_fn` on F. Subclasses may score
        on another value of the node states (FragAware's look-ahead)."""
        return self.score_fn(before[owner], after, leftover, rows)

    def _evaluate(self, model: FragModel, pod: PodSpec, model_id: IntArray, cpu: IntArray, free: np.ndarray,
                  free_mem: np.ndarray) -> tuple[F64, IntArray]:
        rows, owner, dev = _options(pod, free, free_mem)
        # F before (the states) and after (every option) in one batch.
        both = model.batch(np.concatenate((model_id, model_id[owner])),
                           np.concatenate((cpu, cpu[owner] - pod.cpu_milli)), np.concatenate((free, rows)))
        before, after = both[:len(model_id)], both[len(model_id):]
        leftover = np.where(dev >= 0, rows[np.arange(len(dev)), np.maximum(dev, 0)], 0).astype(np.float64)
        option_score = self.option_scores(model, model_id, cpu, free, owner, rows, pod.cpu_milli, before, after,
                                          leftover)
        best = np.full(len(model_id), -np.inf)
        np.maximum.at(best, owner, option_score)
        # Options are in (row, device) order; keep the first best per row, as the artifact does.
        winners = np.flatnonzero(option_score == best[owner])
        rows_won, first = np.unique(owner[winners], return_index=True)
        chosen = np.full(len(model_id), -1, dtype=np.int64)
        chosen[rows_won] = dev[winners[first]]
        return best, chosen


class FragScorePlugin:
    """Score and device-picker shell around a `FragScorer` (shared by FGD and FragAware).

    `score` remembers, per pod, the best device on every scored node; `pick_devices` returns
    the one on the chosen node, so the device the score assumed is the device the pod gets.
    """

    name = NAME

    def __init__(self, scorer: FragScorer) -> None:
        self.scorer = scorer

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        scores, device = self.scorer.scores(pod, view, nodes)
        if pod.gpu.kind is GpuKind.FRACTION:
            state.data[(self.name, pod.uid)] = (nodes, device)
        return scores

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        saved = state.data.pop((self.name, pod.uid), None)
        if saved is not None:
            nodes, device = saved
            j = int(device[np.searchsorted(nodes, node)])
            if j >= 0:
                return (j,)
        return default_devices(pod, view, node)


class Fgd(FragScorePlugin):
    name = NAME

    def __init__(self, args: FgdArgs) -> None:
        super().__init__(FragScorer(args.typical_tasks, fgd_score))
        self.args = args


_s: ScorePlugin = Fgd(FgdArgs())
_p: DevicePicker = Fgd(FgdArgs())
