"""Fluent builders for nodes and pods, for tests and for users writing scenarios.

    make_node("n1").gpus(8, model="H100", mem_gib=80).nvlink("d0").build()
    make_pod("p").cpu(2000).gpus(2).gang("train").build()
"""

from __future__ import annotations

from types import MappingProxyType

from gpufleet.model import (GPU_PRODUCT_LABEL, Gpu, GpuRequest, GpuUuid, NodeInfo, NodeName,
                            NodeSelectorRequirement, NodeSelectorTerm, Operator, PodSpec, PodUid,
                            Taint, TaintEffect, Toleration, TolerationOperator, gpu_fraction,
                            mig_slices, whole_gpus)
from gpufleet.model.pod import NO_GPU


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._cpu = 64_000
        self._mem = 256 * 1024
        self._max_pods = 110
        self._labels: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._gpus: list[Gpu] = []

    def cpu(self, milli: int) -> NodeBuilder:
        self._cpu = milli
        return self

    def mem_mib(self, mib: int) -> NodeBuilder:
        self._mem = mib
        return self

    def mem_gib(self, gib: int) -> NodeBuilder:
        self._mem = gib * 1024
        return self

    def max_pods(self, n: int) -> NodeBuilder:
        self._max_pods = n
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._labels[key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self._taints.append(Taint(key, value, TaintEffect(effect)))
        return self

    def gpus(self, n: int, *, model: str = "H100-80GB", mem_gib: int = 80,
             nvlink_domains: int = 1, numa_nodes: int = 1) -> NodeBuilder:
        """Add n GPUs. They are split evenly into `nvlink_domains` and `numa_nodes` groups."""
        per_domain = max(1, -(-n // max(1, nvlink_domains)))
        per_numa = max(1, -(-n // max(1, numa_nodes)))
        self._gpus = [
            Gpu(GpuUuid(f"GPU-{self._name}-{i}"), model, mem_gib * 1024, i,
                nvlink_domain=f"nvl{i // per_domain}" if nvlink_domains else None,
                numa_node=i // per_numa)
            for i in range(n)
        ]
        self._labels.setdefault(GPU_PRODUCT_LABEL, model)
        return self

    def mig(self, gpu_index: int, *profiles: str) -> NodeBuilder:
        g = self._gpus[gpu_index]
        self._gpus[gpu_index] = Gpu(g.uuid, g.model, g.mem_mib, g.index, g.nvlink_domain, g.numa_node,
                                    g.healthy, tuple(profiles))
        return self

    def unhealthy(self, gpu_index: int) -> NodeBuilder:
        g = self._gpus[gpu_index]
        self._gpus[gpu_index] = Gpu(g.uuid, g.model, g.mem_mib, g.index, g.nvlink_domain, g.numa_node,
                                    False, g.mig_slices)
        return self

    def build(self) -> NodeInfo:
        return NodeInfo(NodeName(self._name), self._cpu, self._mem, self._max_pods,
                        MappingProxyType(dict(self._labels)), tuple(self._taints), tuple(self._gpus))


class PodBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._namespace = "default"
        self._cpu = 1000
        self._mem = 1024
        self._gpu: GpuRequest = NO_GPU
        self._models: frozenset[str] = frozenset()
        self._selector: dict[str, str] = {}
        self._affinity: list[NodeSelectorTerm] = []
        self._tolerations: list[Toleration] = []
        self._priority = 0
        self._queue = "default"
        self._group: str | None = None
        self._created = 0.0
        self._preemptible = True

    def cpu(self, milli: int) -> PodBuilder:
        self._cpu = milli
        return self

    def mem_mib(self, mib: int) -> PodBuilder:
        self._mem = mib
        return self

    def namespace(self, ns: str) -> PodBuilder:
        self._namespace = ns
        return self

    def gpus(self, n: int) -> PodBuilder:
        self._gpu = whole_gpus(n, f"pod {self._name}")
        return self

    def fraction(self, milli: int, mem_mib: int = 0) -> PodBuilder:
        self._gpu = gpu_fraction(milli, mem_mib, where=f"pod {self._name}")
        return self

    def mig(self, profile: str, n: int = 1) -> PodBuilder:
        self._gpu = mig_slices(profile, n, where=f"pod {self._name}")
        return self

    def models(self, *models: str) -> PodBuilder:
        self._models = frozenset(models)
        return self

    def selector(self, key: str, value: str) -> PodBuilder:
        self._selector[key] = value
        return self

    def affinity(self, key: str, op: str, *values: str) -> PodBuilder:
        """Add one required term holding one requirement (terms are ORed)."""
        self._affinity.append(NodeSelectorTerm((NodeSelectorRequirement(key, Operator(op), values),)))
        return self

    def tolerate(self, key: str = "", value: str = "", effect: str | None = None,
                 op: str = "Equal") -> PodBuilder:
        self._tolerations.append(Toleration(key, TolerationOperator(op), value,
                                            TaintEffect(effect) if effect else None))
        return self

    def priority(self, p: int) -> PodBuilder:
        self._priority = p
        return self

    def queue(self, q: str) -> PodBuilder:
        self._queue = q
        return self

    def gang(self, group: str) -> PodBuilder:
        self._group = group
        return self

    def created(self, t: float) -> PodBuilder:
        self._created = t
        return self

    def preemptible(self, yes: bool = True) -> PodBuilder:
        self._preemptible = yes
        return self

    def build(self) -> PodSpec:
        return PodSpec(PodUid(f"{self._namespace}/{self._name}"), self._name, self._namespace,
                       self._cpu, self._mem, self._gpu, self._models,
                       MappingProxyType(dict(self._selector)), tuple(self._affinity),
                       tuple(self._tolerations), self._priority, self._queue,
                       f"{self._namespace}/{self._group}" if self._group else None, self._preemptible,
                       self._created)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(name: str) -> PodBuilder:
    return PodBuilder(name)
