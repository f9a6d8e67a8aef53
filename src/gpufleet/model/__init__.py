"""Typed data of gpufleet: resources in integer base units, nodes, GPUs, pods, snapshots.

Imports nothing else of gpufleet (a test enforces the layering).
"""

from gpufleet.model.cluster import Cluster, Usage
from gpufleet.model.errors import ModelError, read_text
from gpufleet.model.node import GPU_PRODUCT_LABEL, Gpu, GpuUuid, NodeInfo, NodeName, Taint, TaintEffect
from gpufleet.model.placement import Placement
from gpufleet.model.pod import (GPU_MILLI, NO_GPU, GpuKind, GpuRequest, NodeSelectorRequirement,
                                NodeSelectorTerm, Operator, PodGroup, PodSpec, PodUid, Toleration,
                                TolerationOperator, gpu_fraction, mig_slices, whole_gpus)
from gpufleet.model.queue import Queue, QueueTree
from gpufleet.model.snapshot import ClusterSnapshot

__all__ = [
    "Cluster", "ClusterSnapshot", "GPU_MILLI", "GPU_PRODUCT_LABEL", "Gpu", "GpuKind", "GpuRequest",
    "GpuUuid", "ModelError", "NO_GPU", "NodeInfo", "NodeName", "NodeSelectorRequirement",
    "NodeSelectorTerm", "Operator", "Placement", "PodGroup", "PodSpec", "PodUid", "Queue", "QueueTree", "Taint",
    "TaintEffect", "Toleration", "TolerationOperator", "Usage", "gpu_fraction", "mig_slices",
    "read_text", "whole_gpus",
]
