"""FragAware: gpufleet's fragmentation-aware policy, FGD's measure plus device best-fit.

score(option) = FGD's integer score + tightness_weight x (1 - milli left on the chosen
device / 1000), for a GPU share; for every other pod it is FGD's score.

Why: FGD measures fragmentation against the typical-task mix. When whole-GPU tasks
dominate that mix, every partly used device is "all fragment" to them, so FGD cannot tell
a share that leaves 40 milli on a device from one that leaves 400; the choice falls to the
node-name tie-break, and shares pair up poorly, breaking more devices than needed and
starving later whole-GPU tasks. The tightness term lets the leftover decide among options
FGD scores within `tightness_weight` points of each other, and never overrides a larger
fragmentation difference. On share-heavy mixes FGD already tells leftovers apart and the
term mostly breaks ties. Results and how the weight was chosen: docs/results.md.

Look-ahead (opt-in, `lookahead`): FGD's F_n asks "which typical tasks could still use this
node's free GPUs". The look-ahead value V_n = sum_m p_m x F_n(after typical task m is placed
on the node at its best device), or F_n when m does not fit, asks it one task later: it
tells apart a leftover that the next likely task fills from one it cannot, and a node
that stays able to take the common whole-GPU tasks from one that just barely can. The
score is then FGD's formula on V instead of F: int(100 x sigmoid((V_before - V_after) / 1000)).
V depends only on the node's state (model, free CPU, free milli per device as a multiset),
so it is memoised per state (free CPU rounded down to the CPU amounts the typical tasks
compare it with, devices sorted); identical states are common and are evaluated once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.interfaces import DevicePicker, FloatArray, IntArray, ScorePlugin
from gpufleet.framework.plugins.fgd import FragScorePlugin, FragScorer, OptionScore
from gpufleet.framework.plugins.fragmentation import F64, FragModel, StateValues, TypicalTask
from gpufleet.model import GPU_MILLI

NAME = "FragAware"


@dataclass(frozen=True, slots=True)
class FragAwareArgs:
    tightness_weight: float = 2.0
    """Points (of FGD's 0..100 scale) a share may gain by leaving its device full."""
    lookahead: bool = False
    """Score the change of the one-step look-ahead fragmentation V_n instead of F_n (see the
    module docstring). Off by default; costs about 1.5x FGD's time per pod."""

    def __post_init__(self) -> None:
        # Here, not in FragAware(): the profile loader turns an Args' ValueError into a
        # ProfileError naming the key (a fuzzed profile found the check too late, in the plugin).
        if not 0 <= self.tightness_weight <= 100:
            raise ValueError(f"tightnessWeight must be in 0..100, got {self.tightness_weight}")


class LookaheadValue(StateValues):
    """V(s) = sum_m p_m x min over placements of typical task m on state s of F(s + m), F(s) if m does not fit.

    Memoised per state (`StateKey`), in batches too. V does not depend on the order of the
    state's devices (neither does F, and a task's placements range over all of them). Its
    free CPU enters V only through comparisons with the typical tasks' CPU requests and sums
    of two of them (task m, then the task F asks about): the CPU steps. So states that
    differ only in device order, or in CPU no task can use, share one entry, and V is
    unchanged."""

    def __init__(self, model: FragModel) -> None:
        super().__init__(model)
        # Tasks that differ only in the GPU models they allow have the same placements on a
        # state they may use: their options are evaluated once, per class of (CPU, milli, GPUs).
        sizes = np.column_stack((model.cpu, model.milli, model.num))
        classes, task_class = np.unique(sizes, axis=0, return_inverse=True)
        self.task_class = task_class.ravel()
        cpu, milli, num = classes[:, 0], classes[:, 1], classes[:, 2]
        self.class_cpu = cpu
        self.cpu_only = np.flatnonzero(num == 0)
        self.shares = np.flatnonzero((num > 0) & (milli < GPU_MILLI))
        self.wholes = np.flatnonzero((num > 0) & (milli >= GPU_MILLI))
        self.allowed = np.where(model.needs_gpu[:, None], model.model_ok, True)
        """allowed[m, k]: task m may run on a node of GPU model k (a CPU-only task anywhere)."""
        self.share_milli = milli[self.shares][:, None, None]
        self.whole_count = num[self.wholes]

    def batch(self, model_id: IntArray, cpu: IntArray, free: IntArray) -> F64:
        keys = np.column_stack((model_id, self.model.canonical_cpu(cpu), np.sort(free, axis=1))).tolist()
        return np.array(self.lookup([tuple(k) for k in keys]), dtype=np.float64)

    def compute(self, model_id: IntArray, cpu: IntArray, free: IntArray) -> F64:
        """V for K states, without the memo: every placement of every typical task in one batch
        (once per class of tasks with the same CPU, milli and GPU count).

        Options, per (class, state) that fits: a CPU-only task leaves the GPUs as they are; a
        share goes on any device with room (of adjacent devices with equal free milli, which
        leave the same multiset, the first; in the memo's sorted states, all equal devices
        are adjacent); whole GPUs take the first free devices."""
        m = self.model
        k = free.shape[0]
        if len(m.tasks) == 0 or k == 0:
            return m.batch(model_id, cpu, free)
        n_c = len(self.class_cpu)
        fits = cpu[None, :] >= self.class_cpu[:, None]                      # class x state
        t0, s0 = np.nonzero(fits[self.cpu_only])
        # Of adjacent devices with equal free milli, a share goes on the first: the same multiset.
        distinct = np.ones(free.shape, dtype=np.bool_)
        distinct[:, 1:] = free[:, 1:] != free[:, :-1]
        t1, s1, d1 = np.nonzero(fits[self.shares][:, :, None] & (free >= self.share_milli) & distinct)
        shared = free[s1]
        shared[np.arange(len(s1)), d1] -= self.share_milli[t1, 0, 0]
        whole = free == GPU_MILLI
        wanted = self.whole_count
        t2, s2 = np.nonzero(fits[self.wholes] & (whole.sum(axis=1)[None, :] >= wanted[:, None]))
        taken = whole[s2] & (np.cumsum(whole, axis=1)[s2] <= wanted[t2][:, None])
        rows = (free[s0], shared, np.where(taken, 0, free[s2]))
        cls = np.concatenate((self.cpu_only[t0], self.shares[t1], self.wholes[t2]))
        state = np.concatenate((s0, s1, s2))
        # F of the states and of every option in one batch.
        f = m.batch(np.concatenate((model_id, model_id[state])),
                    np.concatenate((cpu, cpu[state] - self.class_cpu[cls])), np.concatenate([free, *rows]))
        best = np.tile(f[:k], n_c)                          # a class that does not fit leaves F as is
        np.minimum.at(best, cls * k + state, f[k:])
        # A task not allowed on the state's GPU model leaves F as is too.
        per_task = np.where(self.allowed[:, model_id], best.reshape(n_c, k)[self.task_class], f[:k])
        # Row by row, as `FragModel.batch`: the value of a state must not depend on its batch.
        result: F64 = (np.ascontiguousarray(per_task.T) * m.p).sum(axis=1)
        return result


class TightScore(OptionScore):
    """FGD's score plus `weight` x (1 - milli left on the device / 1000). Non-share pods leave
    0 on every option: a constant that changes nothing."""

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def batch(self, before: F64, after: F64, leftover: F64) -> FloatArray:
        result: FloatArray = super().batch(before, after, leftover) + self.weight * (1.0 - leftover / 1000.0)
        return result

    def each(self, before: list[float], after: list[float], leftover: list[float]) -> list[float]:
        w = self.weight
        return [s + w * (1.0 - x / 1000.0) for s, x in zip(super().each(before, after, leftover), leftover)]


class FragAware(FragScorePlugin):
    name = NAME

    def __init__(self, args: FragAwareArgs, typical_tasks: tuple[TypicalTask, ...]) -> None:
        values = LookaheadValue if args.lookahead else StateValues
        super().__init__(FragScorer(typical_tasks, TightScore(args.tightness_weight), values))


_s: ScorePlugin = FragAware(FragAwareArgs(), ())
_p: DevicePicker = FragAware(FragAwareArgs(), ())
