"""PreferUsedNodes: 1 for nodes that already run a pod, 0 for empty ones.

Meant as a tie-breaker with a tiny weight: among nodes a primary scorer rates equal, fill
a node that is already in use rather than opening an empty one, so empty nodes stay whole
for large jobs (and can be scaled down). This is what the FGD paper's accidental tie-break
by node name achieves only by chance: a consistent fill order.
"""

from __future__ import annotations

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, ScorePlugin, View
from gpufleet.model import PodSpec

NAME = "PreferUsedNodes"


class PreferUsedNodes:
    name = NAME

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        # Comparing every node, then gathering once, costs less than gathering two arrays.
        used: FloatArray = (view.usage.free_pods < view.cluster.cap_pods)[nodes].astype(float)
        return used


_s: ScorePlugin = PreferUsedNodes()
