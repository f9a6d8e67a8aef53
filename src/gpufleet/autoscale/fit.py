"""What a template can host: static compatibility, and the room left on one planned node.

The planner searches with this small, fast model and then checks its answer with the real
`schedule()`. The static checks call the core's own filter helpers (taints, node affinity) on
the node the template would give, so they cannot drift from the scheduler; the capacity
model mirrors `GpuFit`: whole GPUs need untouched devices, fractions count GPU-milli and GPU
memory per device (several fractions share one GPU), MIG requests count carved slices of
their profile.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from gpufleet.autoscale.template import NodeTemplate
from gpufleet.framework.plugins.node_affinity import matches
from gpufleet.framework.plugins.taint_toleration import untolerated
from gpufleet.model import GPU_MILLI, GpuKind, NodeInfo, PodSpec, PodUid

BIG = 1 << 40
"""Stands for "no limit" in counts."""


@dataclass(frozen=True, slots=True)
class Demand:
    """The resources one pod of a class asks for, in the units the room model counts."""

    cpu_milli: int
    mem_mib: int
    kind: GpuKind
    count: int
    milli: int
    gpu_mem_mib: int
    mig_profile: str | None

    @classmethod
    def of(cls, pod: PodSpec) -> Demand:
        g = pod.gpu
        return cls(pod.cpu_milli, pod.mem_mib, g.kind, g.count, g.milli, g.mem_mib, g.mig_profile)

    def describe(self) -> str:
        if self.kind is GpuKind.WHOLE:
            return f"{self.count} GPU{'s' if self.count > 1 else ''}"
        if self.kind is GpuKind.FRACTION:
            return f"{self.milli}m GPU"
        if self.kind is GpuKind.MIG:
            return f"{self.count} x MIG {self.mig_profile}"
        return f"{self.cpu_milli}m CPU"

    def gpu_milli(self) -> int:
        """GPU-milli this pod takes on whole or fractional GPUs (0 for MIG and CPU-only); orders the search."""
        if self.kind is GpuKind.WHOLE:
            return self.count * GPU_MILLI
        if self.kind is GpuKind.FRACTION:
            return self.milli
        return 0


def static_reason(template: NodeTemplate, probe: NodeInfo, pod: PodSpec) -> str | None:
    """Why an empty node of `template` (`probe` is its NodeInfo) can never host `pod`, or None."""
    g = pod.gpu
    if g.kind is not GpuKind.NONE:
        if template.gpu_model is None:
            return "has no GPUs"
        if pod.gpu_models and template.gpu_model not in pod.gpu_models:
            return "has another GPU model"
    taint = untolerated(probe.taints, pod.tolerations)
    if taint is not None:
        return f"has untolerated taint {{{taint.key}: {taint.value}}}"
    if not matches(pod, probe):
        return "does not match the pod's node selector/affinity"
    if pod.cpu_milli > template.cpu_milli:
        return "has too little CPU"
    if pod.mem_mib > template.mem_mib:
        return "has too little memory"
    if g.kind in (GpuKind.WHOLE, GpuKind.FRACTION) and template.mig_layout:
        return "has its GPUs in MIG mode"
    if g.kind is GpuKind.WHOLE and g.count > template.gpus:
        return f"has too few GPUs ({template.gpus})"
    if g.kind is GpuKind.FRACTION and g.mem_mib > template.gpu_mem_mib:
        return "has too little GPU memory"
    if g.kind is GpuKind.MIG:
        per_node = template.mig_layout.count(g.mig_profile or "") * template.gpus
        if per_node == 0:
            return f"has no MIG {g.mig_profile} slices"
        if g.count > per_node:
            return f"has too few MIG {g.mig_profile} slices ({per_node})"
    return None


def no_template_reason(pod: PodSpec, templates: Sequence[NodeTemplate], probes: Sequence[NodeInfo]) -> str:
    """A readable reason why no template can host `pod` (every template fails a static check)."""
    if pod.gpu.kind is not GpuKind.NONE:
        gpu_templates = [t for t in templates if t.gpu_model is not None]
        if not gpu_templates:
            return "no template has GPUs"
        if pod.gpu_models and not any(t.gpu_model in pod.gpu_models for t in gpu_templates):
            return f"no template has GPU model {' or '.join(sorted(pod.gpu_models))}"
    why = Counter(static_reason(t, probe, pod) or "" for t, probe in zip(templates, probes))
    parts = [f"{n} template(s) {r}" for r, n in sorted(why.items(), key=lambda kv: (-kv[1], kv[0])) if r]
    if not parts:
        return "no templates given"
    return f"no template can host it ({Demand.of(pod).describe()}): " + ", ".join(parts)


class Room:
    """What is left on one planned node; `pods` are the pending pods meant for it."""

    __slots__ = ("template", "cpu", "mem", "slots", "milli", "gmem", "gmem_cap", "slices", "pods")

    def __init__(self, template: int, t: NodeTemplate) -> None:
        self.template = template
        self.cpu = t.cpu_milli
        self.mem = t.mem_mib
        self.slots = t.max_pods
        whole = t.gpus if t.gpu_model is not None and not t.mig_layout else 0
        self.milli = [GPU_MILLI] * whole
        self.gmem = [t.gpu_mem_mib] * whole
        self.gmem_cap = t.gpu_mem_mib
        self.slices: dict[str, int] = dict(Counter(s for s in t.mig_layout for _ in range(t.gpus)))
        self.pods: list[PodUid] = []

    def copy(self) -> Room:
        new = object.__new__(Room)
        new.template, new.cpu, new.mem, new.slots = self.template, self.cpu, self.mem, self.slots
        new.milli, new.gmem, new.gmem_cap = list(self.milli), list(self.gmem), self.gmem_cap
        new.slices, new.pods = dict(self.slices), list(self.pods)
        return new

    def restore(self, saved: Room) -> None:
        for name in Room.__slots__:
            setattr(self, name, getattr(saved, name))

    def has_gpu_left(self) -> bool:
        return any(self.milli) or any(self.slices.values())

    def count(self, d: Demand) -> int:
        """How many pods of demand `d` still fit here."""
        n = self.slots
        if d.cpu_milli:
            n = min(n, self.cpu // d.cpu_milli)
        if d.mem_mib:
            n = min(n, self.mem // d.mem_mib)
        if n <= 0 or d.kind is GpuKind.NONE:
            return max(n, 0)
        if d.kind is GpuKind.WHOLE:
            free = sum(1 for m, g in zip(self.milli, self.gmem) if m == GPU_MILLI and g == self.gmem_cap)
            return min(n, free // d.count)
        if d.kind is GpuKind.MIG:
            return min(n, self.slices.get(d.mig_profile or "", 0) // d.count)
        fit = 0
        for m, g in zip(self.milli, self.gmem):
            per = m // d.milli
            if d.gpu_mem_mib:
                per = min(per, g // d.gpu_mem_mib)
            fit += per
        return min(n, fit)

    def take(self, d: Demand, pods: Sequence[PodUid]) -> None:
        """Place `pods` (all of demand `d`; `count(d)` must allow them) the way GpuFit would."""
        k = len(pods)
        self.cpu -= k * d.cpu_milli
        self.mem -= k * d.mem_mib
        self.slots -= k
        self.pods.extend(pods)
        if d.kind is GpuKind.WHOLE:
            need = k * d.count
            for j, m in enumerate(self.milli):
                if need and m == GPU_MILLI and self.gmem[j] == self.gmem_cap:
                    self.milli[j], self.gmem[j] = 0, 0
                    need -= 1
        elif d.kind is GpuKind.MIG:
            self.slices[d.mig_profile or ""] -= k * d.count
        elif d.kind is GpuKind.FRACTION:
            self._take_fractions(d, k)

    def _take_fractions(self, d: Demand, k: int) -> None:
        # Tightest device first, as the core's device picker does for each fraction.
        for j in sorted(range(len(self.milli)), key=lambda j: (self.milli[j], j)):
            while k and self.milli[j] >= d.milli and self.gmem[j] >= d.gpu_mem_mib:
                self.milli[j] -= d.milli
                self.gmem[j] -= d.gpu_mem_mib
                k -= 1
            if not k:
                return
