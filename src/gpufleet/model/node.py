"""Nodes and their GPUs, as capacity (what exists). Usage lives in the snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Mapping, NewType

from gpufleet.model import mig
from gpufleet.model.errors import ModelError

NodeName = NewType("NodeName", str)
GpuUuid = NewType("GpuUuid", str)

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class TaintEffect(str, Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU. `mig_slices` lists the carved GPU instances (MIG mode on) by profile."""

    uuid: GpuUuid
    model: str
    mem_mib: int
    index: int = 0
    nvlink_domain: str | None = None
    numa_node: int = 0
    healthy: bool = True
    mig_slices: tuple[str, ...] = ()
    mig_mode: bool = False
    """MIG mode is on even when no instance is carved (all destroyed for a repartition): such a
    GPU takes no whole-GPU or fractional work. A GPU with carved `mig_slices` is in MIG mode anyway."""
    mig_uuids: tuple[str, ...] = ()
    """The MIG UUIDs of `mig_slices`, parallel to it; () when unknown (simulated GPUs). An
    assignment names them, so it still finds its instance after a layout change moved its index."""
    mig_starts: tuple[int | None, ...] = ()
    """The first memory slice of each `mig_slices` instance, parallel to it (None where the agent
    did not say); () when unknown. A MIG layout change names instances by it."""

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode or bool(self.mig_slices)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's allocatable capacity and scheduling attributes.

    CPU in milli-cores, memory in MiB. All GPUs of a node are one model (as on real
    hardware); a node with mixed models is rejected.
    """

    name: NodeName
    cpu_milli: int
    mem_mib: int
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[Taint, ...] = ()
    gpus: tuple[Gpu, ...] = ()

    def __post_init__(self) -> None:
        where = f"node {self.name}"
        for attr in ("cpu_milli", "mem_mib", "max_pods"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ModelError(f"{where}: {attr}", f"must be a non-negative integer, got {value!r}")
        models = {g.model for g in self.gpus}
        if len(models) > 1:
            raise ModelError(where, f"GPUs of several models on one node: {sorted(models)}")
        layouts: set[tuple[tuple[str, ...], str]] = set()  # MIG layouts checked (GPUs of a node often share one)
        for i, gpu in enumerate(self.gpus):
            if gpu.mem_mib < 0:
                raise ModelError(f"{where}: gpus[{i}] ({gpu.uuid})", f"mem_mib must be non-negative, got {gpu.mem_mib}")
            if gpu.mig_slices and (gpu.mig_slices, gpu.model) not in layouts:
                mig.check_layout(gpu.mig_slices, gpu.model, f"{where}: gpus[{i}] ({gpu.uuid})")
                layouts.add((gpu.mig_slices, gpu.model))
        if len({g.uuid for g in self.gpus}) != len(self.gpus):
            raise ModelError(where, "duplicate GPU UUIDs")

    @property
    def gpu_model(self) -> str | None:
        return self.gpus[0].model if self.gpus else None
