"""DRA workloads for the benchmarks: GPU nodes with ResourceSlices shaped as NVIDIA's driver
publishes them (`gpufleet.testing.dra_objects`), its DeviceClasses, and pods each with their own claim (as a
ResourceClaimTemplate makes them) for 1, 2, 4 or 8 whole GPUs."""

from __future__ import annotations

import random
from typing import Any

from gpufleet.model import Gpu, NodeInfo, PodSpec, PodUid
from gpufleet.model.dra import DeviceClass, ResourceClaim, ResourceSlice, parse_claim, parse_device_class, parse_slice
from gpufleet.testing import dra_objects as dra

SIZES = ((1, 0.6), (2, 0.2), (4, 0.15), (8, 0.05))
"""Whole GPUs per claim, and the share of pods asking that many."""


def classes() -> list[DeviceClass]:
    return [parse_device_class(c) for c in dra.device_classes()]


def cluster(n: int, gpus: int = 8) -> tuple[list[NodeInfo], list[ResourceSlice]]:
    nodes = [NodeInfo(f"node-{i:05d}", 128_000, 1024 * 1024, max_pods=110,
                      gpus=tuple(Gpu(f"GPU-node-{i:05d}-{m}", "H100", 80 * 1024, m) for m in range(gpus)))
             for i in range(n)]
    return nodes, [parse_slice(s) for node in nodes for s in dra.node_slices(node.name, [g.uuid for g in node.gpus])]


def claim_object(name: str, count: int, namespace: str = "default") -> dict[str, Any]:
    return dra.claim(name, namespace, dra.whole_gpus(count))


def size(rng: random.Random) -> int:
    r = rng.random()
    for count, share in SIZES:
        if r < share:
            return count
        r -= share
    return SIZES[-1][0]


def pods(n: int, rng: random.Random) -> tuple[list[PodSpec], list[ResourceClaim]]:
    out: list[PodSpec] = []
    claims: list[ResourceClaim] = []
    for k in range(n):
        name = f"job-{k:06d}"
        c = parse_claim(claim_object(f"{name}-gpu", size(rng)))
        claims.append(c)
        out.append(PodSpec(PodUid(f"default/{name}"), name, cpu_milli=4000, mem_mib=16 * 1024, created_s=float(k),
                           claims=(c.key,)))
    return out, claims
