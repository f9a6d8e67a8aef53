"""A workload's GPU requests expressed as DRA claims, for the simulator.

Each node's GPUs become a ResourceSlice of gpufleet's driver (`gpu.gpufleet.io`, devices
`gpu-<index>` with the attributes its agent publishes: `type`, `uuid`, `productName`) and each
pod asking for whole GPUs or a share of one gets its own ResourceClaim of the
`gpu.gpufleet.io` DeviceClass (deploy/dra/deviceclasses.yaml) instead: `count` devices, or one
device with capacity requests `share` (the fraction as a quantity: 500 GPU-milli is "500m")
and `memory`. When some pod asks for a share, every device is shared
(`allowMultipleAllocations`, capacities `share: 1` and the GPU's memory, of which a claim that
names none takes none); a whole-GPU claim then takes all of a device's share. Whether the API
server accepts a memory policy with default 0 has not been checked: these objects stay inside
the simulator. MIG requests stay extended resources (the simulator's MIG model
is carved slices, not partitionable devices).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from gpufleet.model import NO_GPU, GpuKind, ModelError, NodeInfo, PodSpec
from gpufleet.model.dra import DeviceClass, ResourceClaim, ResourceSlice, parse_claim, parse_device_class, parse_slice
from gpufleet.sim.workload import Job

DRIVER = "gpu.gpufleet.io"
CLASS = {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {
    "expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'}}]}}


@dataclass(frozen=True, slots=True)
class AsClaims:
    """What `ClusterSnapshot.build` takes for DRA, and the pods asking through claims."""

    classes: tuple[DeviceClass, ...]
    slices: tuple[ResourceSlice, ...]
    claims: tuple[ResourceClaim, ...]
    pods: tuple[PodSpec, ...]


def as_claims(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec]) -> AsClaims:
    shared = any(p.gpu.kind is GpuKind.FRACTION for p in pods)
    slices = tuple(parse_slice(_slice(n, shared)) for n in nodes if any(not g.mig_enabled for g in n.gpus))
    claims: list[ResourceClaim] = []
    keys: set[str] = set()
    out: list[PodSpec] = []
    for pod in pods:
        request = _request(pod)
        if request is None:
            out.append(pod)
            continue
        claim = parse_claim({"metadata": {"name": f"{pod.name}-gpu", "namespace": pod.namespace},
                             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}})
        if claim.key in keys:
            raise ModelError(f"pod {pod.uid}", f"its claim would be named {claim.key}, as another pod's is: "
                                               f"two pods named {pod.namespace}/{pod.name}")
        keys.add(claim.key)
        claims.append(claim)
        out.append(replace(pod, gpu=NO_GPU, claims=pod.claims + (claim.key,)))
    return AsClaims((parse_device_class(CLASS),), slices, tuple(claims), tuple(out))


def jobs_as_claims(nodes: Sequence[NodeInfo], jobs: Sequence[Job]) -> tuple[AsClaims, tuple[Job, ...]]:
    """`as_claims` over every job's pods, and the jobs with their pods asking through the claims."""
    dra = as_claims(nodes, [p for job in jobs for p in job.pods])
    by_uid = {p.uid: p for p in dra.pods}
    return dra, tuple(replace(job, pods=tuple(by_uid[p.uid] for p in job.pods)) for job in jobs)


def _request(pod: PodSpec) -> dict[str, Any] | None:
    g = pod.gpu
    if g.kind is GpuKind.WHOLE:
        return {"deviceClassName": DRIVER, "count": g.count}
    if g.kind is GpuKind.FRACTION:
        requests = {"share": f"{g.milli}m"}
        if g.mem_mib:
            requests["memory"] = f"{g.mem_mib}Mi"
        return {"deviceClassName": DRIVER, "count": 1, "capacity": {"requests": requests}}
    return None


def _slice(node: NodeInfo, shared: bool) -> dict[str, Any]:
    devices = []
    for j, g in enumerate(node.gpus):
        if g.mig_enabled:
            continue
        device: dict[str, Any] = {"name": f"gpu-{j}", "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": g.uuid}, "productName": {"string": g.model}},
            "capacity": {"memory": {"value": f"{g.mem_mib}Mi"}}}
        if shared:
            device["allowMultipleAllocations"] = True
            device["capacity"]["share"] = {"value": "1"}
            # A claim that names no memory takes none, as an extended-resource share that asks
            # none does (without a policy it would take all of it).
            device["capacity"]["memory"]["requestPolicy"] = {"default": "0", "validRange": {"min": "0"}}
        devices.append(device)
    return {"metadata": {"name": f"{node.name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node.name,
                     "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}
