"""Pure: the kubelet's `NodePrepareResources` for one claim, and the CDI spec it hands out.

The kubelet asks the driver to prepare each claim of a pod it is about to start. The answer
names, per allocated device, the CDI device IDs the container runtime injects. Before it
answers, the agent checks the claim as it reads it from the API server, since a scheduler
(gpufleet's or another) may be wrong and double allocation has happened in kube-scheduler
(kubernetes/kubernetes#136269):

- the claim exists, is the one the kubelet means (same UID) and is allocated;
- every result of this driver is from this node's pool and names a device the node publishes;
- no device that takes one claim at a time is already prepared for another claim;
- no device of a partitionable GPU (Dynamic MIG: the whole GPU or a placement) meets one
  already prepared, or one earlier in the same claim: the whole GPU meets every placement,
  two placements meet when they share a memory slice.

Any failure refuses the whole claim with a message naming it and the field, and prepares
nothing. Preparing a claim that is already prepared answers the same again (the kubelet
retries). CDI IDs follow NVIDIA's driver: kind `k8s.<driver>/claim`, device
`<claim UID>-<device name>`.

A placement (`DeviceTarget.carve`) passes these checks uncarved; the DRA plugin then carves its
instance through the backend and records it in `PreparedDevice.carved`, which is what the CDI
spec hands out and what unpreparing destroys. The checks read carved placements from that
record, so they hold after a restart even where the device names published then differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpufleet.agent import devices as dev
from gpufleet.agent.resourceslices import DeviceTarget

CDI_VERSION = "0.5.0"
COMMON_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    carved: dev.CarvedInstance | None = None
    """The MIG instance carved for a partitionable placement, once carved; None for any other device."""


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]


class PrepareError(Exception):
    """The claim cannot be prepared; the message names the claim and what is wrong."""


def prepare(claim: Mapping[str, Any] | None, namespace: str, name: str, uid: str, *, driver: str, node: str,
            targets: Mapping[str, DeviceTarget], prepared: Mapping[str, PreparedClaim]) -> PreparedClaim:
    """The devices of claim `namespace/name` (UID `uid`) to hand out; raises PrepareError.

    `claim` is the ResourceClaim as read now (None: not found); `prepared` holds the claims
    prepared on this node, by UID.
    """
    where = f"ResourceClaim {namespace}/{name}"
    if uid in prepared:
        return prepared[uid]
    if claim is None:
        raise PrepareError(f"{where}: not found")
    stored = _field(_object(claim, where), "", "metadata", where).get("uid")
    if stored != uid:
        raise PrepareError(f"{where}: has UID {stored!r}, not {uid!r}: the claim was replaced")
    allocation = _field(_field(claim, "", "status", where), "status", "allocation", where)
    if not allocation:
        raise PrepareError(f"{where}: status.allocation is empty: the claim is not allocated")
    results = _field(allocation, "status.allocation", "devices", where).get("results") or []
    if not isinstance(results, list):
        raise PrepareError(f"{where}: status.allocation.devices.results is not a list")
    held = _held(prepared)
    parts = _partitions(prepared, targets)
    devices: list[PreparedDevice] = []
    for i, result in enumerate(results):
        field = f"{where}: status.allocation.devices.results[{i}]"
        if _object(result, field).get("driver") != driver:
            continue
        device, pool = str(result.get("device")), str(result.get("pool"))
        if pool != node:
            raise PrepareError(f"{field}: pool {pool!r} is not this node's ({node!r})")
        target = targets.get(device)
        if target is None:
            raise PrepareError(f"{field}: device {device!r} is not one this node publishes")
        other = held.get(device)
        if other is not None and not target.shareable:
            raise PrepareError(f"{field}: device {device!r} is already prepared for ResourceClaim "
                               f"{other.namespace}/{other.name}; refusing to hand it out twice")
        if target.partitionable:
            _check_partition(parts, target, device, field)
            parts.append((target.uuid, target.placement, device, "earlier in this claim"))
        request = str(result.get("request", ""))
        devices.append(PreparedDevice((request.split("/")[0],), pool, device,
                                      (f"{cdi_kind(driver)}={cdi_device_name(uid, device)}",)))
    return PreparedClaim(namespace, name, tuple(devices))


def cdi_kind(driver: str) -> str:
    return f"k8s.{driver}/claim"


def cdi_device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def cdi_spec_name(driver: str, claim_uid: str) -> str:
    """The file name CDI gives a transient spec (`GenerateTransientSpecName`), without the extension."""
    return f"k8s.{driver}-claim_{claim_uid}"


def cdi_spec(driver: str, claim_uid: str, claim: PreparedClaim, targets: Mapping[str, DeviceTarget],
             dev_exists: Callable[[str], bool]) -> dict[str, Any]:
    """The claim's CDI spec: each device's `/dev/nvidia<minor>`, the control nodes that exist, and
    `NVIDIA_VISIBLE_DEVICES` with the claim's GPU or MIG UUIDs (a carved placement's new MIG UUID), for the NVIDIA container toolkit,
    which mounts the driver's libraries as it does for the device plugin."""
    uuids = [d.carved.uuid if d.carved is not None else targets[d.device].uuid for d in claim.devices]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(driver),
        "devices": [{"name": cdi_device_name(claim_uid, d.device),
                     "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{targets[d.device].minor}"}]}}
                    for d in claim.devices],
        "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={','.join(uuids)}"],
                           "deviceNodes": [{"path": p} for p in COMMON_DEVICE_NODES if dev_exists(p)]},
    }


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PrepareError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _field(value: Mapping[str, Any], path: str, key: str, where: str) -> Mapping[str, Any]:
    """`value[key]` as an object, `value` being the claim's field `path` ("" for the claim);
    an absent or null one is empty."""
    found = value.get(key)
    return {} if found is None else _object(found, f"{where}: {f'{path}.' if path else ''}{key}")


def _held(prepared: Mapping[str, PreparedClaim]) -> dict[str, PreparedClaim]:
    """Each device held by a prepared claim, by name. Names are enough for all but a partitionable
    GPU's devices (a GPU in MIG mode publishes its instances, not itself), which `_partitions` covers."""
    return {d.device: claim for claim in prepared.values() for d in claim.devices}


_Part = tuple[str, tuple[int, int] | None, str, str]
"""A partitionable GPU's device in use: (GPU UUID, placement or None for the whole GPU, device, whose)."""


def _partitions(prepared: Mapping[str, PreparedClaim], targets: Mapping[str, DeviceTarget]) -> list[_Part]:
    """The partitionable devices prepared claims hold: carved placements from their record, whole GPUs
    from what this node publishes."""
    parts: list[_Part] = []
    for claim in prepared.values():
        whose = f"prepared for ResourceClaim {claim.namespace}/{claim.name}"
        for d in claim.devices:
            target = targets.get(d.device)
            if d.carved is not None:
                parts.append((d.carved.gpu_uuid, (d.carved.start, d.carved.size), d.device, whose))
            elif target is not None and target.partitionable:
                parts.append((target.uuid, target.placement, d.device, whose))
    return parts


def _check_partition(parts: list[_Part], target: DeviceTarget, device: str, field: str) -> None:
    for gpu, placement, other, whose in parts:
        if gpu == target.uuid and _meets(placement, target.placement):
            raise PrepareError(f"{field}: device {device!r} overlaps {other!r} ({whose}) on GPU {gpu}; "
                               "refusing to hand out its memory slices twice")


def _meets(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Two placements share a memory slice; None is the whole GPU, which meets every placement."""
    return a is None or b is None or (a[0] < b[0] + b[1] and b[0] < a[0] + a[1])
