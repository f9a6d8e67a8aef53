"""Where a pod runs: node, concrete GPU devices and the resources it holds there."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.dra import ClaimAllocation
from gpufleet.model.node import NodeName
from gpufleet.model.pod import PodUid


@dataclass(frozen=True, slots=True)
class Placement:
    """A bind decision, or a running pod's holding.

    `gpus` are device indices on the node; each holds `milli` GPU-milli (1000 for whole
    GPUs) and `gpu_mem_mib` of GPU memory (whole GPUs hold all of it). `mig_slices` are
    indices into the node's carved MIG instances, in the order `Gpu.mig_slices` lists them.
    """

    pod: PodUid
    node: NodeName
    cpu_milli: int = 0
    mem_mib: int = 0
    gpus: tuple[int, ...] = ()
    milli: int = 0
    gpu_mem_mib: int = 0
    mig_slices: tuple[int, ...] = ()
    pod_group: str | None = None
    """The gang this pod belongs to, so running members count towards minMember."""
    queue: str = "default"
    priority: int = 0
    preemptible: bool = True
    started_s: float = 0.0
    """What preemption and reclaim need to know of a running pod (copied from its PodSpec;
    `started_s` is when it was bound, for the minimum-runtime protection)."""
    claims: tuple[ClaimAllocation, ...] = ()
    """DRA claims this pod's placement allocated (or, for a running pod, the claims only it holds)."""
