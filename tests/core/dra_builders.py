"""ResourceSlices, DeviceClasses and ResourceClaims in their API shape, for the claim allocator's tests.

Shaped as NVIDIA's DRA driver publishes them (`gpu.nvidia.com`: devices `gpu-<minor>` with
`type`, `uuid`, `productName` and capacity `memory`; DeviceClasses `gpu.nvidia.com` and
`mig.nvidia.com` with the driver's own CEL selectors, deployments/helm/.../deviceclass-*.yaml).
"""

from __future__ import annotations

from typing import Any

from gpufleet.model import Gpu, NodeInfo, PodSpec, PodUid
from gpufleet.model.dra import DeviceClass, ResourceClaim, ResourceSlice, parse_claim, parse_device_class, parse_slice

NV = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"


def nvidia_classes() -> list[DeviceClass]:
    return [parse_device_class({"metadata": {"name": "gpu.nvidia.com"}, "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                             "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
        "extendedResourceName": "nvidia.com/gpu"}}),
        parse_device_class({"metadata": {"name": "mig.nvidia.com"}, "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                 "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}})]


def uuid(node: str, minor: int) -> str:
    return f"GPU-{node}-{minor}"


def gpu_device(node: str, minor: int, product: str = H100, domain: str | None = None,
               shared: bool = False) -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": "gpu"}, "uuid": {"string": uuid(node, minor)},
                             "productName": {"string": product}, "driverVersion": {"version": "570.86.15"},
                             "cudaComputeCapability": {"version": "9.0.0"}}
    if domain is not None:
        attrs["gpu.gpufleet.io/nvlinkDomain"] = {"string": domain}
    device: dict[str, Any] = {"name": f"gpu-{minor}", "attributes": attrs, "capacity": {"memory": {"value": "80Gi"}}}
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def node_slice(node: str, devices: list[dict[str, Any]], *, generation: int = 1, count: int = 1, index: int = 0,
               counters: list[dict[str, Any]] | None = None, driver: str = NV) -> ResourceSlice:
    spec: dict[str, Any] = {"driver": driver, "nodeName": node,
                            "pool": {"name": node, "generation": generation, "resourceSliceCount": count}}
    if devices:
        spec["devices"] = devices
    if counters:
        spec["sharedCounters"] = counters
    return parse_slice({"metadata": {"name": f"{node}-{driver}-{index}"}, "spec": spec})


def gpu_slice(node: str, gpus: int = 8, **kw: Any) -> ResourceSlice:
    return node_slice(node, [gpu_device(node, m, **kw) for m in range(gpus)])


def gpu_node(name: str, gpus: int = 8, cpu: int = 64_000) -> NodeInfo:
    return NodeInfo(name, cpu, 512 * 1024, gpus=tuple(Gpu(uuid(name, m), "H100", 80 * 1024, m) for m in range(gpus)))


def plain_node(name: str, cpu: int = 64_000) -> NodeInfo:
    return NodeInfo(name, cpu, 512 * 1024)


def claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None,
          namespace: str = "default", status: dict[str, Any] | None = None) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
                           "spec": {"devices": devices}}
    if status:
        obj["status"] = status
    return parse_claim(obj)


def exactly(name: str = "gpu", device_class: str = "gpu.nvidia.com", count: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "count": count, **extra}}


def claim_pod(name: str, claim_name: str) -> PodSpec:
    """Pod `default/<name>` (1 CPU, 1 GiB) using the claim `default/<claim_name>`."""
    return PodSpec(PodUid(f"default/{name}"), name, cpu_milli=1000, mem_mib=1024, claims=(f"default/{claim_name}",))
