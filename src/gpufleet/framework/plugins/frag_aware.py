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
V depends only on the node's state (model, free CPU, free milli per device), so it is
memoised per state; identical states are common and are evaluated once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.interfaces import DevicePicker, FloatArray, IntArray, ScorePlugin
from gpufleet.framework.plugins.fgd import FragScorePlugin, FragScorer, fgd_score
from gpufleet.framework.plugins.fragmentation import F64, FragModel, TypicalTask
from gpufleet.model import GPU_MILLI

NAME = "FragAware"
MEMO_MAX = 500_000
"""Look-ahead values kept before the memo is cleared (bounds memory in a long-lived scheduler)."""


@dataclass(frozen=True, slots=True)
class FragAwareArgs:
    tightness_weight: float = 2.0
    """Points (of FGD's 0..100 scale) a share may gain by leaving its device full."""
    lookahead: bool = False
    """Score the change of the one-step look-ahead fragmentation V_n instead of F_n (see the
    module docstring). Off by default; costs about 4x FGD's scoring time."""


class LookaheadValue:
    """V(s) = sum_m p_m x min over placements of typical task m on state s of F(s + m), F(s) if m does not fit."""

    def __init__(self, model: FragModel) -> None:
        self.model = model
        self.memo: dict[bytes, float] = {}

    def __call__(self, model_id: IntArray, cpu: IntArray, free: IntArray) -> F64:
        keys = np.column_stack((model_id, cpu, free)).astype(np.int64)
        raw = [row.tobytes() for row in keys]
        missing = [i for i, b in enumerate(raw) if b not in self.memo]
        if missing:
            if len(self.memo) + len(missing) > MEMO_MAX:
                self.memo.clear()
                missing = list(range(len(raw)))
            idx = np.array(missing)
            _, first = np.unique(keys[idx], axis=0, return_index=True)
            todo = idx[first]
            values = self.compute(model_id[todo], cpu[todo], free[todo])
            for i, v in zip(todo.tolist(), values.tolist()):
                self.memo[raw[i]] = v
        return np.array([self.memo[b] for b in raw], dtype=np.float64)

    def compute(self, model_id: IntArray, cpu: IntArray, free: IntArray) -> F64:
        """V for K states, without the memo: every typical task's placements in one batch."""
        m = self.model
        k, g = free.shape
        n_t = len(m.tasks)
        base = m.batch(model_id, cpu, free)
        if n_t == 0 or k == 0:
            return base
        states = np.arange(k)
        whole = free == GPU_MILLI
        n_whole = whole.sum(axis=1)
        first_whole = np.cumsum(whole, axis=1)
        all_rows, all_owner, all_cpu = [], [], []
        for t in range(n_t):
            ok = cpu >= m.cpu[t]
            if m.num[t] == 0:                               # CPU-only: the GPUs stay as they are
                rows, owner = free[ok], states[ok]
            elif m.milli[t] < GPU_MILLI:                    # a share: every device with room
                ok &= m.model_ok[t, model_id]
                rows = np.repeat(free, g, axis=0)
                owner = np.repeat(states, g)
                dev = np.tile(np.arange(g), k)
                pick = np.arange(k * g)
                room = (rows[pick, dev] >= m.milli[t]) & ok[owner]
                rows[pick, dev] -= m.milli[t]
                rows, owner = rows[room], owner[room]
            else:                                           # whole GPUs: the first free devices
                ok &= m.model_ok[t, model_id] & (n_whole >= m.num[t])
                rows = np.where(whole & (first_whole <= m.num[t]), 0, free)[ok]
                owner = states[ok]
            all_rows.append(rows)
            all_owner.append(owner + t * k)
            all_cpu.append(cpu[owner] - m.cpu[t])
        owner = np.concatenate(all_owner)
        best = np.tile(base, n_t)                           # a task that does not fit leaves F as is
        if len(owner):
            after = m.batch(model_id[owner % k], np.concatenate(all_cpu), np.concatenate(all_rows))
            np.minimum.at(best, owner, after)
        result: F64 = best.reshape(n_t, k).T @ m.p
        return result


class LookaheadScorer(FragScorer):
    """FragScorer whose options are scored on the look-ahead value V instead of F."""

    def __init__(self, tasks: tuple[TypicalTask, ...], weight: float) -> None:
        super().__init__(tasks, fgd_score)
        self.weight = weight
        self._value: LookaheadValue | None = None

    def option_scores(self, model: FragModel, model_id: IntArray, cpu: IntArray, free: IntArray,
                      owner: IntArray, rows: IntArray, pod_cpu: int, before: F64, after: F64,
                      leftover: F64) -> FloatArray:
        if self._value is None or self._value.model is not model:
            self._value = LookaheadValue(model)
        v_before = self._value(model_id, cpu, free)
        v_after = self._value(model_id[owner], cpu[owner] - pod_cpu, rows)
        result: FloatArray = (fgd_score(v_before[owner], v_after, leftover, rows)
                              + self.weight * (1.0 - leftover / 1000.0))
        return result


class FragAware(FragScorePlugin):
    name = NAME

    def __init__(self, args: FragAwareArgs, typical_tasks: tuple[TypicalTask, ...]) -> None:
        if not 0 <= args.tightness_weight <= 100:
            raise ValueError(f"FragAware: tightnessWeight must be in 0..100, got {args.tightness_weight}")
        weight = args.tightness_weight
        if args.lookahead:
            super().__init__(LookaheadScorer(typical_tasks, weight))
            return

        def score(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
            # Non-share pods have leftover 0 on every option: a constant that changes nothing.
            result: FloatArray = fgd_score(before, after, leftover, rows) + weight * (1.0 - leftover / 1000.0)
            return result

        super().__init__(FragScorer(typical_tasks, score))


_s: ScorePlugin = FragAware(FragAwareArgs(), ())
_p: DevicePicker = FragAware(FragAwareArgs(), ())
