"""RecentFaults: score nodes down for a while after a device or node fault on them.

A GPU or host that has just failed is more likely than its neighbours to fail again soon:
the fault may not be fixed by the reset, and fleets report a few "lemon" nodes behind a
large share of interruptions. Work placed elsewhere does not bet on it. The score is
`1 - 2^(-age / halfLifeSeconds)`: 0 right after a fault, 0.5 one half-life later, 1 for a
node without faults (`Usage.fault_at` is -inf). It only orders feasible nodes; a node with
a recent fault is still used when nothing else fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, UniformScorePlugin, View
from gpufleet.model import PodSpec

NAME = "RecentFaults"
_KEY = "RecentFaults/scores"
_CLEAN: FloatArray = np.ones(0)
"""Marks a cycle without faults in the cycle state."""


@dataclass(frozen=True, slots=True)
class RecentFaultsArgs:
    half_life_seconds: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if not (self.half_life_seconds > 0 and math.isfinite(self.half_life_seconds)):
            raise ValueError(f"halfLifeSeconds must be a positive number of seconds, got {self.half_life_seconds}")


class RecentFaults:
    name = NAME

    def __init__(self, args: RecentFaultsArgs) -> None:
        self.args = args

    def _all(self, state: CycleState, view: View) -> FloatArray:
        # Fault times do not change within a cycle: score every node once per cycle, and skip
        # the arithmetic entirely on a cluster without faults (the common case).
        full: FloatArray | None = state.data.get(_KEY)
        if full is None:
            fault_at = view.usage.fault_at
            if np.isfinite(fault_at).any():
                age = np.maximum(state.now - fault_at, 0.0)
                full = 1.0 - np.exp2(-age / self.args.half_life_seconds)
            else:
                full = _CLEAN
            state.data[_KEY] = full
        return full

    def uniform(self, state: CycleState, pod: PodSpec, view: View) -> bool:
        """No node has had a fault: every node scores 1."""
        return self._all(state, view) is _CLEAN

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        full = self._all(state, view)
        if full is _CLEAN:
            return np.ones(len(nodes))
        score: FloatArray = full[nodes]
        return score


_s: UniformScorePlugin = RecentFaults(RecentFaultsArgs())
