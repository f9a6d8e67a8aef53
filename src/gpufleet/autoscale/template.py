"""`NodeTemplate`: a kind of node the planner may add (a Karpenter NodePool's instance type).

A template says what one new node would have (GPUs, model, MIG layout, CPU, memory, labels,
taints), what it costs per hour, how long it takes to start, and how many such nodes may
exist at most (pool limits, counting the nodes of this template already in the cluster; an
existing node belongs to a template when it carries `TEMPLATE_LABEL` with the template's name).
Every field is validated on construction and a bad one raises `ModelError` naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from gpufleet.model import GPU_PRODUCT_LABEL, Gpu, GpuUuid, ModelError, NodeInfo, NodeName, Taint, mig

TEMPLATE_LABEL = "gpufleet.io/node-template"
"""Label that ties a node to the template it was made from (set on every planned node)."""


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """One kind of node. CPU in milli-cores, memory in MiB, price in currency units per hour."""

    name: str
    cpu_milli: int
    mem_mib: int
    price_per_hour: float
    gpu_model: str | None = None
    """The `nvidia.com/gpu.product` string; None for a CPU-only template."""
    gpus: int = 0
    gpu_mem_mib: int = 0
    mig_layout: tuple[str, ...] = ()
    """MIG instances carved on every GPU of the node (empty = MIG off)."""
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[Taint, ...] = ()
    start_delay_s: float = 0.0
    max_nodes: int | None = None
    """Pool limit on nodes of this template, existing ones included; None = no limit."""
    max_gpus: int | None = None
    """Pool limit on GPUs in nodes of this template, existing ones included; None = no limit."""

    def __post_init__(self) -> None:
        where = f"node template {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ModelError(f"{where}: name", "must be a non-empty string")
        for attr in ("cpu_milli", "mem_mib", "gpus", "gpu_mem_mib"):
            _non_negative_int(getattr(self, attr), f"{where}: {attr}")
        _non_negative_int(self.max_pods, f"{where}: max_pods")
        if self.max_pods < 1:
            raise ModelError(f"{where}: max_pods", "must be at least 1")
        for attr in ("max_nodes", "max_gpus"):
            if getattr(self, attr) is not None:
                _non_negative_int(getattr(self, attr), f"{where}: {attr}")
        for attr in ("price_per_hour", "start_delay_s"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ModelError(f"{where}: {attr}", f"must be a finite non-negative number, got {value!r}")
        self._check_gpus(where)

    def _check_gpus(self, where: str) -> None:
        if self.gpu_model is None:
            if self.gpus or self.mig_layout:
                raise ModelError(f"{where}: gpu_model", "a template with GPUs or a MIG layout needs a GPU model")
            return
        if not self.gpu_model:
            raise ModelError(f"{where}: gpu_model", "must be a non-empty string or None")
        if self.gpus < 1:
            raise ModelError(f"{where}: gpus", f"a template with GPU model {self.gpu_model} needs at least 1 GPU")
        if self.gpu_mem_mib < 1:
            raise ModelError(f"{where}: gpu_mem_mib", "a GPU template needs the GPU memory (MiB)")
        if self.mig_layout:
            mig.check_layout(tuple(self.mig_layout), self.gpu_model, f"{where}: mig_layout")

    def node_info(self, name: str) -> NodeInfo:
        """The node this template would give, named `name` (all GPUs in one NVLink domain)."""
        labels = dict(self.labels)
        labels[TEMPLATE_LABEL] = self.name
        gpus: tuple[Gpu, ...] = ()
        if self.gpu_model is not None:
            labels[GPU_PRODUCT_LABEL] = self.gpu_model
            gpus = tuple(Gpu(GpuUuid(f"GPU-{name}-{i}"), self.gpu_model, self.gpu_mem_mib, i, nvlink_domain="nvl0",
                             mig_slices=tuple(self.mig_layout)) for i in range(self.gpus))
        return NodeInfo(NodeName(name), self.cpu_milli, self.mem_mib, self.max_pods,
                        MappingProxyType(labels), tuple(self.taints), gpus)


def _non_negative_int(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(where, f"must be a non-negative integer, got {value!r}")
