"""NodeResourcesFit: CPU, memory and pod-count fit (kube-scheduler's `fit.go` reasons), on nodes that are ready."""

from __future__ import annotations

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import BoolArray, FilterPlugin, View
from gpufleet.model import PodSpec

NAME = "NodeResourcesFit"


class NodeResourcesFit:
    name = NAME

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
        u = view.usage
        mask = (u.free_pods >= 1) & u.node_ready
        if pod.cpu_milli:
            mask &= u.free_cpu >= pod.cpu_milli
        if pod.mem_mib:
            mask &= u.free_mem >= pod.mem_mib
        return mask

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        u = view.usage
        return [("node(s) were not ready", ~u.node_ready),
                ("Too many pods", u.free_pods < 1),
                ("Insufficient cpu", u.free_cpu < pod.cpu_milli),
                ("Insufficient memory", u.free_mem < pod.mem_mib)]


_: FilterPlugin = NodeResourcesFit()
