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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.interfaces import DevicePicker, FloatArray, ScorePlugin
from gpufleet.framework.plugins.fgd import FragScorePlugin, FragScorer, fgd_score
from gpufleet.framework.plugins.fragmentation import F64, TypicalTask

NAME = "FragAware"


@dataclass(frozen=True, slots=True)
class FragAwareArgs:
    tightness_weight: float = 2.0
    """Points (of FGD's 0..100 scale) a share may gain by leaving its device full."""


class FragAware(FragScorePlugin):
    name = NAME

    def __init__(self, args: FragAwareArgs, typical_tasks: tuple[TypicalTask, ...]) -> None:
        if not 0 <= args.tightness_weight <= 100:
            raise ValueError(f"FragAware: tightnessWeight must be in 0..100, got {args.tightness_weight}")
        weight = args.tightness_weight

        def score(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
            # Non-share pods have leftover 0 on every option: a constant that changes nothing.
            result: FloatArray = fgd_score(before, after, leftover, rows) + weight * (1.0 - leftover / 1000.0)
            return result

        super().__init__(FragScorer(typical_tasks, score))


_s: ScorePlugin = FragAware(FragAwareArgs(), ())
_p: DevicePicker = FragAware(FragAwareArgs(), ())
