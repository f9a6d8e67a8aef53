"""Topology: multi-GPU pods on one NVLink domain (else one NUMA node); gangs on few nodes, one rack.

Score components, each 0/50/100, averaged over those that apply to the pod:
- NVLink: 100 if the node has `count` free GPUs inside one NVLink domain, 50 if inside
  one NUMA node, else 0 (only for pods with 2+ whole GPUs);
- gang: 100 on a node already chosen for this gang in this cycle, 50 in the same rack as
  the gang's first member, else 0 (only for gang members after the first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FloatArray, IntArray, ReservePlugin, UniformScorePlugin, View
from gpufleet.model import Cluster, GpuKind, PodSpec

NAME = "Topology"


@dataclass(frozen=True, slots=True)
class TopologyArgs:
    rack_labels: tuple[str, ...] = ("topology.gpufleet.io/rack", "topology.kubernetes.io/zone")
    """Node labels naming a rack, first present wins; nodes without any are in no rack."""


@dataclass
class _Gang:
    nodes: dict[int, int]
    rack: int


class Topology:
    name = NAME

    def __init__(self, args: TopologyArgs) -> None:
        self.args = args
        self._racks: tuple[Cluster, IntArray] | None = None

    def racks(self, cluster: Cluster) -> IntArray:
        # Keyed on the cluster object itself, not id(): a freed cluster's id can be reused.
        if self._racks is None or self._racks[0] is not cluster:
            ids: dict[str, int] = {}
            values = []
            for node in cluster.nodes:
                label = next((node.labels[k] for k in self.args.rack_labels if k in node.labels), None)
                values.append(-1 if label is None else ids.setdefault(label, len(ids)))
            self._racks = (cluster, np.array(values, dtype=np.int64))
        return self._racks[1]

    def uniform(self, state: CycleState, pod: PodSpec, view: View) -> bool:
        """Neither component applies: not 2+ whole GPUs, not a gang member after the first."""
        g = pod.gpu
        if g.kind is GpuKind.WHOLE and g.count > 1:
            return False
        gang: _Gang | None = state.data.get((NAME, pod.pod_group)) if pod.pod_group else None
        return gang is None or not gang.nodes

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        parts: list[FloatArray] = []
        g = pod.gpu
        if g.kind is GpuKind.WHOLE and g.count > 1:
            u = view.usage
            parts.append(np.where(u.max_free_domain[nodes] >= g.count, 100.0,
                                  np.where(u.max_free_numa[nodes] >= g.count, 50.0, 0.0)))
        gang: _Gang | None = state.data.get((NAME, pod.pod_group)) if pod.pod_group else None
        if gang is not None and gang.nodes:
            on_chosen = np.zeros(view.cluster.n_nodes, dtype=np.bool_)
            on_chosen[list(gang.nodes)] = True
            chosen = on_chosen[nodes]
            if gang.rack < 0:  # the gang's first node has no rack: no node shares it
                parts.append(np.where(chosen, 100.0, 0.0))
            else:
                same_rack = self.racks(view.cluster)[nodes] == gang.rack
                parts.append(np.where(chosen, 100.0, np.where(same_rack, 50.0, 0.0)))
        if not parts:
            return np.zeros(len(nodes))
        result: FloatArray = sum(parts[1:], parts[0]) / len(parts)
        return result

    def reserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        if pod.pod_group is None:
            return
        key = (NAME, pod.pod_group)
        gang = state.data.get(key)
        if gang is None or not gang.nodes:
            rack = int(self.racks(view.cluster)[node])
            gang = _Gang({}, rack)
            state.data[key] = gang
        gang.nodes[node] = gang.nodes.get(node, 0) + 1

    def unreserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        gang = state.data.get((NAME, pod.pod_group)) if pod.pod_group else None
        if gang is not None and node in gang.nodes:
            gang.nodes[node] -= 1
            if gang.nodes[node] == 0:
                del gang.nodes[node]


_s: UniformScorePlugin = Topology(TopologyArgs())
_r: ReservePlugin = Topology(TopologyArgs())
