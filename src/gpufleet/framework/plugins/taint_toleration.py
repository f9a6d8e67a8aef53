"""TaintToleration: NoSchedule and NoExecute taints need a matching toleration.

PreferNoSchedule never filters (kube-scheduler scores it; we leave it to scorers).
The mask depends only on node taints and the pod's tolerations, so it is cached per
distinct toleration set for the cycle.
"""

from __future__ import annotations

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import BoolArray, FilterPlugin, View
from gpufleet.model import PodSpec, Taint, TaintEffect, Toleration, TolerationOperator

NAME = "TaintToleration"


def tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect is not None and tol.effect is not taint.effect:
        return False
    if tol.operator is TolerationOperator.EXISTS:
        return tol.key == "" or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first taint that blocks scheduling, or None."""
    for taint in taints:
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


class TaintTolerationFilter:
    name = NAME

    def _blocked(self, state: CycleState, pod: PodSpec, view: View) -> list[Taint | None]:
        key = (NAME, pod.tolerations)
        cached: list[Taint | None] | None = state.data.get(key)
        if cached is None:
            cached = [untolerated(n.taints, pod.tolerations) for n in view.cluster.nodes]
            state.data[key] = cached
        return cached

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
        key = (NAME, "mask", pod.tolerations)
        if key not in state.data:
            if not view.cluster.has_taints:
                state.data[key] = None  # no taints anywhere: nothing to filter
            else:
                state.data[key] = np.array([b is None for b in self._blocked(state, pod, view)], dtype=np.bool_)
        mask: BoolArray | None = state.data[key]
        return mask

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        blocked = self._blocked(state, pod, view)
        out: dict[str, BoolArray] = {}
        for i, taint in enumerate(blocked):
            if taint is not None:
                text = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
                out.setdefault(text, np.zeros(len(blocked), dtype=np.bool_))[i] = True
        return list(out.items())


_: FilterPlugin = TaintTolerationFilter()
