"""kube-scheduler-style explanations: "0/1213 nodes are available: 806 Insufficient GPU, ...".

Each node is attributed to the first filter it fails (as kube-scheduler does), with every
reason that filter gives for it. Counts are listed largest first.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FilterPlugin, View
from gpufleet.model import PodSpec


def explain(state: CycleState, pod: PodSpec, view: View, filters: tuple[FilterPlugin, ...]) -> str:
    n = view.cluster.n_nodes
    remaining = np.ones(n, dtype=np.bool_)
    counts: Counter[str] = Counter()
    for plugin in filters:
        mask = plugin.filter(state, pod, view)
        if mask is None:
            continue
        failing = remaining & ~mask
        if not failing.any():
            continue
        explained = np.zeros(n, dtype=np.bool_)
        for reason, lacking in plugin.reasons(state, pod, view):
            hit = failing & lacking
            if hit.any():
                counts[reason] += int(hit.sum())
                explained |= hit
        rest = int((failing & ~explained).sum())
        if rest:
            counts[f"node(s) didn't pass {plugin.name}"] += rest
        remaining &= ~failing
    parts = ", ".join(f"{c} {r}" for r, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{n} nodes are available: {parts}." if parts else f"0/{n} nodes are available."
