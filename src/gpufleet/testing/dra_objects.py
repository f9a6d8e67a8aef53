"""DRA API objects for live tests and benchmarks, shaped as NVIDIA's DRA driver publishes them.

A node's ResourceSlices come from the agent's own publisher (`agent/resourceslices.py`, whose
names and attributes follow NVIDIA's `gpu.nvidia.com` driver) run on a shipped fixture's
inventory with the node's own GPU UUIDs, so what a test or benchmark publishes is what a
gpufleet agent on such a node would publish: whole GPUs, Dynamic MIG placements as
partitionable devices (`mig=MigMode.DYNAMIC`), or GPUs shared by memory (`memory_shares=True`).
The DeviceClasses are NVIDIA's `gpu.nvidia.com` and `mig.nvidia.com` (for another driver
domain, `gpu.<domain>` and `mig.<domain>` with the same selectors).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any, Sequence

from gpufleet.agent.fake import load_fixture
from gpufleet.agent.inventory import NodeGpuInventory, inventory
from gpufleet.agent.resourceslices import MigMode, SliceOptions, resource_slices

Obj = dict[str, Any]
NVIDIA = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
FIXTURE = "h100-sxm-8"


def class_names(driver: str = NVIDIA) -> tuple[str, str]:
    """The whole-GPU and MIG DeviceClass names of `driver` (`gpu.nvidia.com`, `mig.nvidia.com`)."""
    domain = driver.split(".", 1)[1]
    return f"gpu.{domain}", f"mig.{domain}"


def device_classes(driver: str = NVIDIA) -> list[Obj]:
    """NVIDIA's two DeviceClasses (deployments/helm/.../deviceclass-{gpu,mig}.yaml) for `driver`."""
    return [{"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name},
             "spec": {"selectors": [{"cel": {
                 "expression": f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'"}}]}}
            for name, kind in zip(class_names(driver), ("gpu", "mig"))]


@cache
def _fixture(name: str) -> NodeGpuInventory:
    backend = load_fixture(name)
    return inventory(backend.system(), backend.devices())


def node_slices(node: str, uuids: Sequence[str], *, driver: str = NVIDIA, mig: MigMode = MigMode.STATIC,
                memory_shares: bool = False, fixture: str = FIXTURE) -> tuple[Obj, ...]:
    """The pool the agent publishes for `node` whose GPUs have `uuids` (one per GPU of `fixture`, in order)."""
    base = _fixture(fixture)
    if len(uuids) != len(base.gpus):
        raise ValueError(f"node {node}: {len(uuids)} GPU UUIDs for fixture {fixture} with {len(base.gpus)} GPUs")
    inv = replace(base, gpus=tuple(replace(g, uuid=u) for g, u in zip(base.gpus, uuids)))
    return resource_slices(inv, node, 1, SliceOptions(driver=driver, mig=mig, memory_shares=memory_shares))


def whole_gpus(count: int, driver: str = NVIDIA, name: str = "gpu") -> Obj:
    """A request for `count` whole GPUs of `driver`'s GPU class."""
    return {"name": name, "exactly": {"deviceClassName": class_names(driver)[0], "count": count}}


def mig_device(profile: str, driver: str = NVIDIA, name: str = "gpu") -> Obj:
    """A request for one MIG device of `profile` (`1g.10gb`), carved or a partitionable placement."""
    return {"name": name, "exactly": {"deviceClassName": class_names(driver)[1], "count": 1, "selectors": [
        {"cel": {"expression": f"device.attributes['{driver}'].profile == '{profile}'"}}]}}


def gpu_memory(amount: str, driver: str = NVIDIA, name: str = "gpu") -> Obj:
    """A request for `amount` of one shared GPU's memory (consumable capacity); only GPUs
    published for sharing (`allowMultipleAllocations`) match."""
    return {"name": name, "exactly": {"deviceClassName": class_names(driver)[0], "count": 1,
                                      "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
                                      "capacity": {"requests": {"memory": amount}}}}


def claim(name: str, namespace: str, *requests: Obj) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}}}
