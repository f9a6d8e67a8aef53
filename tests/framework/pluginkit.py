"""Small helpers for the plugin table tests: run one plugin's extension point on a snapshot.

A `ClusterSnapshot` has `cluster` and `usage`, so it serves as the plugins' `View` directly.
Nodes are listed by name in the snapshot (the documented order), so tests name them a, b, c.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FilterPlugin, ScorePlugin
from gpufleet.framework.plugins.fragmentation import TypicalTask
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.topology_levels import TopologyConfig
from gpufleet.framework.registry import BuildContext
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid


def snapshot(nodes: Sequence[NodeInfo], running: Iterable[Placement] = (),
             groups: Iterable[PodGroup] = ()) -> ClusterSnapshot:
    return ClusterSnapshot.build(nodes, running, groups)


def state(seed: int = 0) -> CycleState:
    return CycleState(random.Random(seed), 0.0)


def holding(pod: str, node: str, *, gpus: tuple[int, ...] = (), milli: int = 1000, gpu_mem_mib: int = 0,
            cpu: int = 0, mem: int = 0, mig: tuple[int, ...] = (), group: str | None = None) -> Placement:
    """A running pod's holding (whole GPUs hold 1000 milli; pass their memory explicitly)."""
    return Placement(PodUid(f"default/{pod}"), NodeName(node), cpu, mem, gpus,
                     milli if gpus else 0, gpu_mem_mib, mig, group)


def mask(plugin: FilterPlugin, snap: ClusterSnapshot, pod: PodSpec) -> list[bool]:
    """The filter's mask as a list (None, "all nodes", becomes all True)."""
    m = plugin.filter(state(), pod, snap)
    return [True] * snap.cluster.n_nodes if m is None else [bool(x) for x in m]


def reasons(plugin: FilterPlugin, snap: ClusterSnapshot, pod: PodSpec) -> dict[str, list[bool]]:
    """Reasons whose failing-node mask is not empty, as lists."""
    return {r: [bool(x) for x in m] for r, m in plugin.reasons(state(), pod, snap) if m.any()}


def scores(plugin: ScorePlugin, snap: ClusterSnapshot, pod: PodSpec,
           nodes: Sequence[int] | None = None) -> list[float]:
    idx = np.arange(snap.cluster.n_nodes) if nodes is None else np.array(nodes, dtype=np.int64)
    return [float(s) for s in plugin.score(state(), pod, snap, idx)]


def run(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec], *scorers: str, running: Iterable[Placement] = (),
        groups: Iterable[PodGroup] = (), tasks: tuple[TypicalTask, ...] = (), seed: int = 0,
        topology: TopologyConfig = TopologyConfig()) -> CycleResult:
    profile = build_profile(ProfileSettings(scores=tuple(ScoreRef(s) for s in scorers), topology=topology),
                            BuildContext(tasks))
    return schedule(snapshot(nodes, running, groups), pods, profile, now=0.0, rng=random.Random(seed))


def bound(result: CycleResult) -> dict[str, tuple[str, tuple[int, ...]]]:
    """pod name -> (node, devices); devices are GPU indices, or MIG slice indices for MIG pods."""
    return {p.pod.split("/", 1)[1]: (p.node, p.gpus or p.mig_slices) for p in result.binds}
