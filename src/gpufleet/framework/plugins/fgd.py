"""FGD: place a task where it increases expected fragmentation the least.

score = int(100 * sigmoid((F_before - F_after) / 1000)) per node, F as in `fragmentation`.
A fraction tries every device with room and keeps the first with the highest truncated
score (also the device it gets); whole GPUs take the first free devices. This is the
published policy, kept exact so the paper's numbers can be reproduced.

Speed: a node's score depends only on that node's state and the pod's spec, so scores are
cached per spec and recomputed only for nodes whose state stamp (`Usage.version`) changed
since; in a cycle of thousands of pods, or a simulation of one pod per cycle, most nodes
are unchanged between two pods of the same spec. The few nodes the last pods changed are
scored one by one in Python through memos (per spec, a node state's best score; per state,
its F, or the look-ahead's V; each node's state as read once per stamp), because NumPy's
cost per call outweighs its speed on two or three rows; a spec's first pod scores every
node in one NumPy batch. Both paths compute the same numbers (tests/framework/test_frag_memo.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, cast

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import DevicePicker, FloatArray, IntArray, ScorePlugin, View
from gpufleet.framework.plugins.fragmentation import F64, MEMO_MAX, FragModel, StateKey, StateValues, TypicalTask
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.model import GPU_MILLI, Cluster, GpuKind, PodSpec

NAME = "FGD"
ONE_BY_ONE_MAX = 64
"""Up to this many stale nodes are scored one by one through the memos; more, in one NumPy
batch (identical states once)."""


class OptionScore:
    """An option's score from the value of the node's state before and after it and the milli
    it leaves on its device (0 for a pod that is not a share); higher is better. FGD's:
    int(100 x sigmoid((before - after) / 1000)).

    Two forms of the same IEEE operations in the same order, so they give the same floats:
    `batch` on arrays, and `each` on the few options of the one-by-one path, where NumPy's
    cost per call would be most of the work (one `np.exp` call: its result must not depend
    on the array it is computed in, which NumPy's element-wise loops guarantee)."""

    def batch(self, before: F64, after: F64, leftover: F64) -> FloatArray:
        result: FloatArray = np.trunc(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))
        return result

    def each(self, before: list[float], after: list[float], leftover: list[float]) -> list[float]:
        e: list[float] = np.exp(np.array([-(b - a) / 1000.0 for b, a in zip(before, after)])).tolist()
        return [float(math.trunc(100.0 / (1.0 + x))) for x in e]


@dataclass(frozen=True, slots=True)
class FgdArgs:
    typical_tasks: tuple[TypicalTask, ...] = ()
    """The task distribution; drivers pass it (the simulator from the trace, as the paper)."""


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


NODE_STATES_MAX = 50_000
"""Node states kept by stamp before that memo is cleared: a state is read again only while
its node stays unchanged, so recent ones suffice (about 40 MB at most)."""


SpecState = tuple[int, int, int, tuple[int, ...], tuple[int, ...]]
"""A node state as one spec's memo keys it: (GPU model id, free CPU before and after the pod
rounded down to the CPU steps, free milli per device ascending, free milli of the devices
with GPU-memory room ascending (only for a share that asks for GPU memory, else empty))."""


NodeState = tuple[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""A node's state as the one-by-one path reads it: (GPU model id, free CPU, free milli per
device, the same ascending, free GPU memory per device)."""


class FragScorer:
    """Per-spec cached scores of a fragmentation-based policy (shared by FGD and FragAware).

    An option's score is `option` (an `OptionScore`) of a value of the node's state before and after it
    (`StateValues`: F; FragAware's look-ahead: V) and of the milli it leaves on its device."""

    def __init__(self, tasks: tuple[TypicalTask, ...], option: OptionScore,
                 values: Callable[[FragModel], StateValues] = StateValues) -> None:
        self.tasks = tasks
        self.option = option
        self._new_values = values
        self._cluster: Cluster | None = None
        self._models: tuple[str, ...] = ()
        self._values: StateValues | None = None
        self._cache: dict[tuple[object, ...], tuple[F64, IntArray, IntArray]] = {}
        self._memo: dict[tuple[object, ...], dict[SpecState, tuple[float, tuple[int, ...]]]] = {}
        self._nodes: dict[int, NodeState] = {}

    def _reset(self, cluster: Cluster) -> StateValues:
        # Per-node scores are keyed on the cluster object itself (a freed cluster's id() can
        # be reused). States, and their values, mean the same in any cluster with the same GPU
        # models (model ids index them; stamps are process-unique), so those memos carry over:
        # the simulator and the planner's checks build new clusters as nodes come and go.
        if self._values is None or self._cluster is not cluster:
            if self._values is None or self._models != cluster.models:
                self._values = self._new_values(FragModel(cluster, self.tasks))
                self._models = cluster.models
                self._memo = {}
                self._nodes = {}
            self._cluster = cluster
            self._cache = {}
        return self._values

    def scores(self, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        """The score of each of `nodes`: its best option's."""
        c, u = view.cluster, view.usage
        values = self._reset(c)
        key = (pod.cpu_milli, pod.gpu)
        entry = self._cache.get(key)
        if entry is None:
            entry = (np.zeros(c.n_nodes), np.zeros(c.n_nodes, dtype=np.int64),
                     np.full(c.n_nodes, -1, dtype=np.int64))
            self._cache[key] = entry
        cached, stamp, device = entry
        stale = nodes[(stamp != u.version)[nodes]]     # comparing whole arrays costs less than gathering two
        if len(stale):
            compute = self._one_by_one if len(stale) <= ONE_BY_ONE_MAX else self._batch
            cached[stale], device[stale] = compute(values, pod, view, stale)
            stamp[stale] = u.version[stale]
        result: FloatArray = cached[nodes]
        return result

    def devices(self, pod: PodSpec) -> IntArray:
        """The device a share of `pod`'s spec gets on each node of the cluster, as `scores`
        found it (-1: none); valid for the nodes scored, until the spec is scored again."""
        result: IntArray = self._cache[(pod.cpu_milli, pod.gpu)][2]
        return result

    def _batch(self, values: StateValues, pod: PodSpec, view: View, nodes: IntArray) -> tuple[F64, IntArray]:
        """Best score and its device for each of `nodes`, in NumPy batches."""
        model_id, cpu, free, free_mem = _states(pod, view, nodes)
        # Many nodes share a state (empty nodes of one shape): evaluate each state once.
        first, inverse = _distinct_rows(np.column_stack((model_id, cpu, free, free_mem)))
        model_id, cpu, free, free_mem = model_id[first], cpu[first], free[first], free_mem[first]
        rows, owner, dev = _options(pod, free, free_mem)
        # The value before (the states) and after (every option) in one batch.
        both = values.batch(np.concatenate((model_id, model_id[owner])),
                            np.concatenate((cpu, cpu[owner] - pod.cpu_milli)), np.concatenate((free, rows)))
        before, after = both[:len(model_id)], both[len(model_id):]
        leftover = np.where(dev >= 0, rows[np.arange(len(dev)), np.maximum(dev, 0)], 0).astype(np.float64)
        option_score = self.option.batch(before[owner], after, leftover)
        best = np.full(len(model_id), -np.inf)
        np.maximum.at(best, owner, option_score)
        # Options are in (row, device) order; keep the first best per row, as the artifact does.
        winners = np.flatnonzero(option_score == best[owner])
        rows_won, first_win = np.unique(owner[winners], return_index=True)
        chosen = np.full(len(model_id), -1, dtype=np.int64)
        chosen[rows_won] = dev[winners[first_win]]
        return best[inverse], chosen[inverse]

    def _one_by_one(self, values: StateValues, pod: PodSpec, view: View, nodes: IntArray) -> tuple[F64, IntArray]:
        """What `_batch` gives, node by node through a memo per spec: state (`SpecState`) ->
        (best score, free milli of the devices whose option scores best).

        Neither F nor V depends on the order of a node's devices, and an option's score
        depends only on the state and on the free milli of the device it uses, so states
        that differ only in device order share an entry. The device is the first with room
        whose free milli scores best: `_batch`'s first best option."""
        g = pod.gpu
        asks_mem = g.kind is GpuKind.FRACTION and g.mem_mib > 0
        milli, mem_mib, pod_cpu = g.milli, g.mem_mib, pod.cpu_milli
        canonical = values.canonical
        memo = self._memo.setdefault((pod_cpu, g), {})
        states = self._node_states(view, nodes)
        keys: list[SpecState] = []
        missing: dict[SpecState, None] = {}
        for m, cpu, row, ordered, mem in states:
            roomy = tuple(sorted({v for v, f in zip(row, mem) if v >= milli and f >= mem_mib})) if asks_mem else ()
            key = (m, canonical(cpu), canonical(cpu - pod_cpu), ordered, roomy)
            keys.append(key)
            if key not in memo:
                missing[key] = None
        if missing:
            if sum(map(len, self._memo.values())) + len(missing) > MEMO_MAX:
                for spec_memo in self._memo.values():
                    spec_memo.clear()
                missing = dict.fromkeys(keys)
            memo.update(self._score_states(values, pod, list(missing)))
        scores: list[float] = []
        chosen: list[int] = []
        for (_, _, row, _, mem), key in zip(states, keys):
            score, best_milli = memo[key]
            scores.append(score)
            chosen.append(next(j for j, v in enumerate(row) if v in best_milli and v >= milli
                               and (not asks_mem or mem[j] >= mem_mib)) if best_milli else -1)
        return np.array(scores, dtype=np.float64), np.array(chosen, dtype=np.int64)

    def _node_states(self, view: View, nodes: IntArray) -> list[NodeState]:
        """The state of each of `nodes`, read from the arrays once per state stamp (a stamp
        names one node's state in any usage), for every spec."""
        u = view.usage
        stamps: list[int] = u.version[nodes].tolist()
        known = self._nodes
        found = [known.get(stamp) for stamp in stamps]
        todo = [i for i, state in enumerate(found) if state is None]
        if todo:
            if len(known) + len(todo) > NODE_STATES_MAX:
                known.clear()
            # Usually one node (the last pod's): row by row costs less than gathering in batch.
            c = view.cluster
            for i in todo:
                n = int(nodes[i])
                ok = (c.gpu_whole_ok[n] & u.gpu_healthy[n]).tolist()
                row = tuple([GPU_MILLI - used if fine else 0 for used, fine in zip(u.gpu_used_milli[n].tolist(), ok)])
                found[i] = known[stamps[i]] = (int(c.model_id[n]), int(u.free_cpu[n]), row, tuple(sorted(row)),
                                               tuple((c.gpu_mem[n] - u.gpu_used_mem[n]).tolist()))
        return cast(list[NodeState], found)

    def _score_states(self, values: StateValues, pod: PodSpec, states: list[SpecState]
                      ) -> dict[SpecState, tuple[float, tuple[int, ...]]]:
        """(best score, free milli of the devices whose option scores best) of each state."""
        g = pod.gpu
        before: list[StateKey] = []
        after: list[StateKey] = []
        owner: list[int] = []
        milli: list[int] = []             # free milli of the option's device (-1: not a share)
        for s, (m, cpu_before, cpu_after, ordered, roomy) in enumerate(states):
            before.append((m, cpu_before, *ordered))
            if g.kind is GpuKind.FRACTION:
                for v in roomy if g.mem_mib > 0 else sorted({v for v in ordered if v >= g.milli}):
                    left = list(ordered)
                    left[left.index(v)] = v - g.milli
                    after.append((m, cpu_after, *sorted(left)))
                    owner.append(s)
                    milli.append(v)
            elif g.kind is GpuKind.WHOLE:
                # Ascending, the free devices are last; the pod takes `count` of them (or all).
                taken = min(g.count, ordered.count(GPU_MILLI))
                left = list(ordered[:len(ordered) - taken])
                after.append((m, cpu_after, *sorted(left + [0] * taken)))
                owner.append(s)
                milli.append(-1)
            else:
                after.append((m, cpu_after, *ordered))
                owner.append(s)
                milli.append(-1)
        value = values.lookup(before + after)
        leftover = [float(v - g.milli) if v >= 0 else 0.0 for v in milli]
        option_score = self.option.each([value[s] for s in owner], value[len(before):], leftover)
        best = [-math.inf] * len(states)
        for s, score in zip(owner, option_score):
            best[s] = max(best[s], score)
        won: list[set[int]] = [set() for _ in states]
        for s, score, v in zip(owner, option_score, milli):
            if v >= 0 and score == best[s]:
                won[s].add(v)
        # Tuples of ints, not sets or lists: the garbage collector stops tracking them, and these
        # memos hold hundreds of thousands of entries.
        return {state: (b, tuple(w)) for state, b, w in zip(states, best, won)}


_ROW_HASH = np.random.default_rng(20231).integers(1, 2**62, size=64, dtype=np.int64) | 1
"""Odd multipliers for `_distinct_rows`' row hash (fixed: a run never depends on chance)."""


def _distinct_rows(key: IntArray) -> tuple[IntArray, IntArray]:
    """(index of one row of each distinct row, index of each row's distinct row in the first).

    What `np.unique(key, axis=0)` gives, in another order, but 10-20 times faster: rows are
    hashed to one int64 (wrapping sums of odd multiples), and only if two different rows
    share a hash does it fall back to `np.unique`."""
    width = key.shape[1]
    if width > len(_ROW_HASH):
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return first, inverse.ravel()
    h = key @ _ROW_HASH[:width]
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    if not (key[first][inverse] == key).all():
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _states(pod: PodSpec, view: View, nodes: IntArray) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """(GPU model id, free CPU, free milli per device, free GPU memory per device) of `nodes`."""
    c, u = view.cluster, view.usage
    free = np.where(c.gpu_whole_ok[nodes] & u.gpu_healthy[nodes], GPU_MILLI - u.gpu_used_milli[nodes], 0)
    # Free GPU memory matters only to a share that asks for some; otherwise keep it out
    # of the state key so more nodes dedupe.
    asks_mem = pod.gpu.kind is GpuKind.FRACTION and pod.gpu.mem_mib > 0
    free_mem = c.gpu_mem[nodes] - u.gpu_used_mem[nodes] if asks_mem else np.zeros_like(free)
    return c.model_id[nodes].astype(np.int64), u.free_cpu[nodes], free, free_mem


class FragScorePlugin:
    """Score and device-picker shell around a `FragScorer` (shared by FGD and FragAware).

    `score` remembers, per pod, the best device on every scored node; `pick_devices` returns
    the one on the chosen node, so the device the score assumed is the device the pod gets.
    The cycle picks a pod's devices right after scoring it, before any other pod is scored,
    so the scorer's per-node array is read in place rather than copied for the feasible nodes.
    """

    name = NAME

    def __init__(self, scorer: FragScorer) -> None:
        self.scorer = scorer

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        scores = self.scorer.scores(pod, view, nodes)
        if pod.gpu.kind is GpuKind.FRACTION:
            state.data[(self.name, pod.uid)] = self.scorer.devices(pod)
        return scores

    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...]:
        device = state.data.pop((self.name, pod.uid), None)
        if device is not None:
            j = int(device[node])
            if j >= 0:
                return (j,)
        return default_devices(pod, view, node)


class Fgd(FragScorePlugin):
    name = NAME

    def __init__(self, args: FgdArgs) -> None:
        super().__init__(FragScorer(args.typical_tasks, OptionScore()))
        self.args = args


_s: ScorePlugin = Fgd(FgdArgs())
_p: DevicePicker = Fgd(FgdArgs())
