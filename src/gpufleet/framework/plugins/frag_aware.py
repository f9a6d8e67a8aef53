"""FragAware: FGD's fragmentation measure without its score quantisation (experimental).

Score = F_before - F_after in GPU-milli, exact. FGD squashes this through an integer
sigmoid, which turns most small changes into ties that the node-name order then breaks
(an accidental first-fit). FragAware keeps the exact value and is meant to be combined
with a packing scorer (the `gpufleet` simulator policy adds BestFit). Measured so far it
does not beat FGD by more than seed noise; see docs/results.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, View
from gpufleet.framework.plugins.fgd import F64, FragScorer
from gpufleet.framework.plugins.fragmentation import TypicalTask
from gpufleet.framework.plugins.gpu_fit import default_devices
from gpufleet.model import GpuKind, PodSpec

NAME = "FragAware"


@dataclass(frozen=True, slots=True)
class FragAwareArgs:
    typical_tasks: tuple[TypicalTask, ...] = ()


def exact_delta(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
    result: FloatArray = before - after
    return result


def bestfit_first(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
    """For shares: the tightest device first (least milli left), FGD's score breaks ties."""
    base = np.trunc(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))
    result: FloatArray = (1000.0 - leftover) + base / 1000.0
    return result


def bestfit_first_whole(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
    """As bestfit_first; whole-GPU pods: FGD, ties to the node left with fewest whole GPUs."""
    base = np.trunc(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))
    whole_left = (rows == 1000).sum(axis=1)
    result: FloatArray = np.where(leftover > 0, (1000.0 - leftover) * 100 + base / 1000.0,
                                  base + 0.5 * (1.0 - whole_left / 8.0))
    return result


def fgd_tight(before: F64, after: F64, leftover: F64, rows: np.ndarray) -> FloatArray:
    """FGD's integer score; ties broken towards the device left tightest (best fit)."""
    base = np.trunc(100.0 / (1.0 + np.exp(-(before - after) / 1000.0)))
    result: FloatArray = base + 0.5 * (1.0 - leftover / 1000.0)
    return result


class FragAware:
    name = NAME

    def __init__(self, args: FragAwareArgs, variant: str = "tight") -> None:
        fn = {"tight": fgd_tight, "exact": exact_delta, "bf_first": bestfit_first,
              "bf_whole": bestfit_first_whole}[variant]
        self.scorer = FragScorer(args.typical_tasks, fn)

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        scores, device = self.scorer.scores(pod, view, nodes)
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
