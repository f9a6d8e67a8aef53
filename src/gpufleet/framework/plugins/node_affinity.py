"""NodeAffinity: nodeSelector and required node affinity (terms ORed, requirements ANDed)."""

from __future__ import annotations

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import BoolArray, FilterPlugin, View
from gpufleet.model import NodeInfo, PodSpec

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"


def matches(pod: PodSpec, node: NodeInfo) -> bool:
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return not pod.affinity or any(term.matches(labels) for term in pod.affinity)


class NodeAffinity:
    name = NAME

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
        if not pod.node_selector and not pod.affinity:
            return None
        key = (NAME, tuple(sorted(pod.node_selector.items())), pod.affinity)
        mask: BoolArray | None = state.data.get(key)
        if mask is None:
            mask = np.array([matches(pod, n) for n in view.cluster.nodes], dtype=np.bool_)
            state.data[key] = mask
        return mask

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        mask = self.filter(state, pod, view)
        return [] if mask is None else [(REASON, ~mask)]


_: FilterPlugin = NodeAffinity()
