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


def exact_delta(before: F64, after: F64) -> FloatArray:
    result: FloatArray = before - after
    return result


class FragAware:
    name = NAME

    def __init__(self, args: FragAwareArgs) -> None:
        self.scorer = FragScorer(args.typical_tasks, exact_delta)

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
