"""Realistic GPU node objects for test clusters: `gpu_nodes(n, seed=...)`.

Each node is what a cluster with NVIDIA's feature discovery and gpufleet's node agent
shows: GFD labels (`nvidia.com/gpu.product`, `.count`, `.memory`, MIG labels under the
mixed strategy), the agent's `gpufleet.io/gpu-inventory` annotation (encoded with
`gpufleet.model.annotations`, the scheduler/agent contract), and capacity/allocatable with
`nvidia.com/gpu` (whole GPUs not in MIG mode), `nvidia.com/mig-<profile>` per carved
slice, `gpufleet.io/gpu-milli` (1000 per whole GPU) and `gpufleet.io/gpu-memory` (MiB).
Shapes are drawn with weights from a seeded RNG, so the same seed gives the same fleet.

Nodes carry KWOK's annotation `kwok.x-k8s.io/node: fake`, so the KWOK controller of
`gpufleet.testing.cluster` plays their kubelets: it keeps the node Ready (lease heartbeats)
and runs the pods bound to it.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpufleet.model import annotations as ann

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
"""The annotation KWOK's controller selects the nodes it manages by (value `fake`)."""


@dataclass(frozen=True)
class Shape:
    """A node type: its GPUs and, per GPU index, the MIG layout carved on it."""

    name: str
    product: str
    gpus: int
    mem_mib: int
    cpu: int
    mem_gib: int
    family: str
    nvlink: bool
    weight: int
    mig: tuple[tuple[str, ...], ...] = ()
    """One MIG layout per GPU (from GPU 0); GPUs beyond the tuple are whole."""


SHAPES = (
    Shape("p4de.24xlarge", "NVIDIA-A100-SXM4-80GB", 8, 81920, 96, 1152, "ampere", True, 3),
    Shape("p5.48xlarge", "NVIDIA-H100-80GB-HBM3", 8, 81559, 192, 2048, "hopper", True, 3),
    Shape("p4de.24xlarge-mig", "NVIDIA-A100-SXM4-80GB", 8, 81920, 96, 1152, "ampere", True, 1,
          mig=(("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"), ("1g.10gb",) * 7)),
    Shape("p5.48xlarge-mig", "NVIDIA-H100-80GB-HBM3", 8, 81559, 192, 2048, "hopper", True, 1,
          mig=(("3g.40gb", "3g.40gb"),)),
    Shape("g6.12xlarge-a10", "NVIDIA-A10", 4, 23028, 48, 192, "ampere", False, 2),
    Shape("g5.xlarge", "NVIDIA-A10", 1, 23028, 4, 16, "ampere", False, 2),
    Shape("g4dn.12xlarge", "Tesla-T4", 4, 15360, 48, 192, "turing", False, 2),
    Shape("g4dn.xlarge", "Tesla-T4", 1, 15360, 4, 16, "turing", False, 3),
)
ZONES = ("zone-a", "zone-b", "zone-c")


def gpu_nodes(n: int, *, seed: int = 0, prefix: str = "gpu-node", taint: bool = False) -> list[dict[str, Any]]:
    """`n` Node objects with mixed GPU models and counts, some with MIG slices carved."""
    rng = random.Random(seed)
    shapes = rng.choices(SHAPES, weights=[s.weight for s in SHAPES], k=n)
    return [gpu_node(f"{prefix}-{i:03d}", shape, rng, index=i, taint=taint) for i, shape in enumerate(shapes)]


def gpu_node(name: str, shape: Shape, rng: random.Random, *, index: int = 0, taint: bool = False) -> dict[str, Any]:
    gpus = _inventory(name, shape, rng)
    whole = [g for g in gpus if not g.mig]
    slices = Counter(p for g in gpus for p in g.mig)
    resources = {"cpu": str(shape.cpu), "memory": f"{shape.mem_gib * 1024 * 1024}Ki", "pods": "110",
                 "ephemeral-storage": "1048576000Ki", "hugepages-2Mi": "0"}
    resources[ann.GPU_RESOURCE] = str(len(whole))
    if whole:
        resources[ann.GPU_MILLI_RESOURCE] = str(ann.WHOLE_MILLI * len(whole))
        resources[ann.GPU_MEMORY_RESOURCE] = str(sum(g.mem_mib for g in whole))
    for profile, count in sorted(slices.items()):
        resources[ann.mig_resource(profile)] = str(count)
    ip = f"10.{index // 250 % 250}.{index % 250}.{10 + index // 62500}"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    node: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": _labels(name, shape, gpus, slices, rng),
                     "annotations": {ann.INVENTORY_ANNOTATION: ann.encode_inventory(tuple(gpus)), KWOK_ANNOTATION: "fake"}},
        "spec": {"providerID": f"kwok://{name}"},
        "status": {
            "capacity": resources, "allocatable": dict(resources),
            "conditions": [_condition("MemoryPressure", "False", "KubeletHasSufficientMemory", now),
                           _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", now),
                           _condition("PIDPressure", "False", "KubeletHasSufficientPID", now),
                           _condition("Ready", "True", "KubeletReady", now)],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.37.0", "containerRuntimeVersion": "containerd://2.1.0",
                         "osImage": "Ubuntu 24.04 LTS", "kernelVersion": "6.8.0", "operatingSystem": "linux",
                         "architecture": "amd64", "machineID": f"{index:032x}", "systemUUID": f"{index:032x}",
                         "bootID": f"{index:032x}", "kubeProxyVersion": ""},
        },
    }
    if taint:
        node["spec"]["taints"] = [{"key": ann.GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    return node


def _inventory(name: str, shape: Shape, rng: random.Random) -> list[ann.InventoryGpu]:
    gpus = []
    for i in range(shape.gpus):
        uuid = f"GPU-{rng.getrandbits(128):032x}"
        layout = shape.mig[i] if i < len(shape.mig) else ()
        devices = tuple(f"MIG-{rng.getrandbits(128):032x}" for _ in layout)
        gpus.append(ann.InventoryGpu(uuid, shape.product, shape.mem_mib, i, numa_node=0 if i < shape.gpus // 2 or
                                     shape.gpus == 1 else 1, nvlink_domain=f"{name}-nvl0" if shape.nvlink else None,
                                     mig=layout, mig_devices=devices))
    return gpus


def _labels(name: str, shape: Shape, gpus: list[ann.InventoryGpu], slices: Counter[str],
            rng: random.Random) -> dict[str, str]:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": shape.name.removesuffix("-mig").removesuffix("-a10"),
              "topology.kubernetes.io/zone": rng.choice(ZONES),
              "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": shape.product,
              "nvidia.com/gpu.count": str(sum(1 for g in gpus if not g.mig)), "nvidia.com/gpu.memory": str(shape.mem_mib),
              "nvidia.com/gpu.family": shape.family, "nvidia.com/gpu.replicas": "1",
              "nvidia.com/mig.capable": "true" if shape.family in ("ampere", "hopper") and shape.gpus == 8 else "false"}
    if slices:
        labels["nvidia.com/mig.strategy"] = "mixed"
        for profile, count in sorted(slices.items()):
            resource = ann.mig_resource(profile)
            labels[f"{resource}.count"] = str(count)
            labels[f"{resource}.product"] = f"{shape.product}-MIG-{profile}"
    return labels


def _condition(kind: str, status: str, reason: str, now: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": reason,
            "lastHeartbeatTime": now, "lastTransitionTime": now}
