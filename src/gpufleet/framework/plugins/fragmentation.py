"""GPU fragmentation as defined by FGD (USENIX ATC'23, section 3 of `experiments/fgd.md`).

Given a distribution of *typical tasks* M (spec -> probability p_m), a node's fragmentation
is F_n = sum_m p_m * frag(n, m), where frag(n, m) is the node's free GPU-milli that task m
could not use: all of it if m needs no GPU, is not allowed on the node's model, or does not
fit (CPU, or fewer than num_gpu devices with enough free milli); otherwise the free milli on
devices too small for m. Memory is ignored, as in the paper.

Everything here is vectorised over a batch of node states (K nodes x G devices) so the FGD
scorer and the simulator's metrics evaluate hundreds of nodes per call.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from gpufleet.model import GPU_MILLI, Cluster, GpuKind, PodSpec, Usage

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
MEMO_MAX = 500_000
"""Memoised node states kept before a memo is cleared (bounds memory in a long-lived scheduler)."""


@dataclass(frozen=True, slots=True)
class TypicalTask:
    """One task spec of the typical-task distribution and its probability."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    models: frozenset[str]
    probability: float


TaskSpec = tuple[int, int, int, frozenset[str]]
"""A pod's shape as the typical-task mix counts it: CPU milli, GPU milli, GPUs, models."""


def task_spec(pod: PodSpec) -> TaskSpec:
    g = pod.gpu
    if g.kind is GpuKind.WHOLE:
        return (pod.cpu_milli, GPU_MILLI, g.count, pod.gpu_models)
    if g.kind is GpuKind.FRACTION:
        return (pod.cpu_milli, g.milli, 1, pod.gpu_models)
    return (pod.cpu_milli, 0, 0, frozenset())


def typical_tasks(pods: Iterable[PodSpec], coverage: float = 0.95) -> tuple[TypicalTask, ...]:
    """The most frequent specs covering `coverage` of pods, probabilities renormalised.

    Ties in frequency keep first-seen order (stable), so the result is deterministic.
    """
    return typical_tasks_of(Counter(task_spec(p) for p in pods), coverage)


def typical_tasks_of(counts: Mapping[TaskSpec, int], coverage: float = 0.95) -> tuple[TypicalTask, ...]:
    """`typical_tasks` from the pods' counts per spec (in first-seen order), for callers that keep them."""
    total = sum(counts.values())
    if total == 0:
        return ()
    chosen: list[tuple[TaskSpec, int]] = []
    covered = 0
    for spec, n in sorted(((s, n) for s, n in counts.items() if n > 0), key=lambda kv: -kv[1]):
        if covered >= coverage * total:
            break
        chosen.append((spec, n))
        covered += n
    return tuple(TypicalTask(s[0], s[1], s[2], s[3], n / covered) for s, n in chosen)


class FragModel:
    """Typical tasks compiled against one cluster's GPU models, for batch evaluation."""

    def __init__(self, cluster: Cluster, tasks: tuple[TypicalTask, ...]) -> None:
        self.tasks = tasks
        self.cpu = np.array([t.cpu_milli for t in tasks], dtype=np.int64)
        self.milli = np.array([t.gpu_milli for t in tasks], dtype=np.int64)
        self.num = np.array([t.num_gpu for t in tasks], dtype=np.int64)
        self.p = np.array([t.probability for t in tasks], dtype=np.float64)
        n_models = len(cluster.models)
        # model_ok[m, k]: task m may run on model k; the extra last column is "no GPU model".
        self.model_ok = np.ones((len(tasks), n_models + 1), dtype=np.bool_)
        for m, t in enumerate(tasks):
            if t.models:
                self.model_ok[m, :n_models] = [name in t.models for name in cluster.models]
        self.model_ok[:, n_models] = False
        # Tasks share few distinct GPU-milli sizes: count and sum per distinct size, then gather.
        self.thresholds, self.task_threshold = np.unique(self.milli, return_inverse=True)
        self.thresholds = self.thresholds.astype(np.int32)
        self.needs_gpu = self.num > 0
        cpu = self.cpu
        self.cpu_steps: I64 = np.unique(np.concatenate([cpu, (cpu[:, None] + cpu[None, :]).ravel()]))
        """Every CPU amount F, or F one typical task later, compares a state's free CPU with."""

    def canonical_cpu(self, cpu: I64) -> I64:
        """`cpu` rounded down to the largest CPU step (-1 below the smallest). F, and F after
        any one typical task, are the same for both: they compare free CPU only with the steps."""
        steps = self.cpu_steps
        if len(steps) == 0:                 # no typical tasks: no CPU amount matters
            return np.full_like(cpu, -1)
        j = np.searchsorted(steps, cpu, side="right") - 1
        out: I64 = np.where(j >= 0, steps[np.maximum(j, 0)], -1)
        return out

    def batch(self, model_id: I64, free_cpu: I64, free: I64) -> F64:
        """F_n for K node states: model ids (K), free CPU (K), free milli per device (K x G)."""
        if len(self.tasks) == 0 or free.shape[0] == 0:
            return np.zeros(free.shape[0])
        free32 = free.astype(np.int32)
        total = free32.sum(axis=1, dtype=np.int64)
        small = (free32[:, :, None] < self.thresholds[None, None, :]).astype(np.int32)   # K x G x T
        too_small = np.einsum("kg,kgt->kt", free32, small)
        count = free.shape[1] - np.einsum("kgt->kt", small)    # devices >= threshold (3x a bool sum's speed)
        count = count[:, self.task_threshold]
        small_t = too_small[:, self.task_threshold]
        fits = (self.needs_gpu[None, :]
                & self.model_ok[:, model_id].T
                & (free_cpu[:, None] >= self.cpu[None, :])
                & (count >= self.num[None, :]))
        frag = np.where(fits, small_t, total[:, None])
        # Row by row, not a matrix product: BLAS sums a row in an order that depends on the
        # batch it is in, and scores must not change with how nodes are batched.
        result: F64 = (frag * self.p).sum(axis=1)
        return result

    def nodes(self, usage: Usage, idx: I64) -> F64:
        """F_n for the nodes `idx` of a cluster in its current usage."""
        c = usage.cluster
        free = np.where(c.gpu_whole_ok[idx] & usage.gpu_healthy[idx], GPU_MILLI - usage.gpu_used_milli[idx], 0)
        return self.batch(c.model_id[idx].astype(np.int64), usage.free_cpu[idx], free)


StateKey = tuple[int, ...]
"""A node state as `StateValues` keys it: (GPU model id, free CPU rounded down to the CPU
steps (`FragModel.canonical_cpu`), free milli per device in ascending order)."""


class StateValues:
    """F of node states: in NumPy batches, or state by state through a memo.

    F depends on a state's devices only as a multiset, and on its free CPU only through
    comparisons with the CPU steps, so states that differ only in device order, or in CPU
    no typical task can use, share one memo entry (`StateKey`)."""

    def __init__(self, model: FragModel) -> None:
        self.model = model
        self.memo: dict[StateKey, float] = {}
        self._steps: list[int] = model.cpu_steps.tolist()

    def canonical(self, cpu: int) -> int:
        """`FragModel.canonical_cpu` of one amount."""
        j = bisect_right(self._steps, cpu)
        return self._steps[j - 1] if j else -1

    def compute(self, model_id: I64, cpu: I64, free: I64) -> F64:
        """The value of K states (model ids, free CPU, free milli per device), without the memo."""
        return self.model.batch(model_id, cpu, free)

    def batch(self, model_id: I64, cpu: I64, free: I64) -> F64:
        """The value of K states, any CPU and device order. F: computed outright, which costs
        less than keying every state."""
        return self.compute(model_id, cpu, free)

    def lookup(self, keys: list[StateKey]) -> list[float]:
        """The value of each state, the missing ones computed in one batch."""
        memo = self.memo
        missing = [k for k in dict.fromkeys(keys) if k not in memo]
        if missing:
            if len(memo) + len(missing) > MEMO_MAX:
                memo.clear()
                missing = list(dict.fromkeys(keys))
            states = np.array(missing, dtype=np.int64)
            memo.update(zip(missing, self.compute(states[:, 0], states[:, 1], states[:, 2:]).tolist()))
        return [memo[k] for k in keys]
