"""The explicit plugin registry (kube-scheduler's `NewInTreeRegistry`): name -> factory.

A factory takes the plugin's validated arguments (a frozen dataclass, see `profile`) and
the build context. Nothing registers itself at import time; out-of-tree plugins are added
by passing an extended mapping to `build_profile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpufleet.framework.interfaces import Plugin
from gpufleet.framework.plugins import fgd, fgd_baselines, frag_aware, gpu_fit, node_affinity, node_resources
from gpufleet.framework.plugins import prefer_used, recent_faults, resource_alloc, taint_toleration, topology
from gpufleet.framework.plugins.fragmentation import TypicalTask


@dataclass(frozen=True, slots=True)
class BuildContext:
    """Data some plugins need that is not configuration: FGD's typical-task distribution."""

    typical_tasks: tuple[TypicalTask, ...] = ()


@dataclass(frozen=True, slots=True)
class NoArgs:
    """For plugins without arguments."""


@dataclass(frozen=True, slots=True)
class Entry:
    factory: Callable[[Any, BuildContext], Plugin]
    args_type: type = NoArgs


def _plain(cls: Callable[[], Plugin]) -> Entry:
    return Entry(lambda _args, _ctx: cls())


NEEDS_TYPICAL_TASKS = frozenset({fgd.NAME, frag_aware.NAME})
"""Scorers that read `BuildContext.typical_tasks`; built without them they see no fragmentation
anywhere (FGD then scores every node alike)."""


def default_registry() -> Mapping[str, Entry]:
    return {
        node_resources.NAME: _plain(node_resources.NodeResourcesFit),
        taint_toleration.NAME: _plain(taint_toleration.TaintTolerationFilter),
        node_affinity.NAME: _plain(node_affinity.NodeAffinity),
        gpu_fit.NAME: _plain(gpu_fit.GpuFit),
        resource_alloc.MOST: _plain(resource_alloc.MostAllocated),
        resource_alloc.LEAST: _plain(resource_alloc.LeastAllocated),
        "BestFit": _plain(fgd_baselines.BestFit),
        "DotProduct": _plain(fgd_baselines.DotProduct),
        "GpuPacking": _plain(fgd_baselines.GpuPacking),
        "GpuClustering": _plain(fgd_baselines.GpuClustering),
        "Random": _plain(fgd_baselines.RandomScore),
        fgd.NAME: Entry(lambda args, ctx: fgd.Fgd(fgd.FgdArgs(ctx.typical_tasks)), NoArgs),
        frag_aware.NAME: Entry(lambda args, ctx: frag_aware.FragAware(args, ctx.typical_tasks),
                               frag_aware.FragAwareArgs),
        prefer_used.NAME: _plain(prefer_used.PreferUsedNodes),
        topology.NAME: Entry(lambda args, ctx: topology.Topology(args), topology.TopologyArgs),
        recent_faults.NAME: Entry(lambda args, ctx: recent_faults.RecentFaults(args), recent_faults.RecentFaultsArgs),
    }
