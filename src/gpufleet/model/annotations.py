"""The contract between the scheduler and the node agent: resource names and annotations.

Both sides import this module and nothing else of each other, so the JSON shapes below are
the whole interface:

* Node annotation `gpufleet.io/gpu-inventory`, written by the agent: a JSON list, one object
  per GPU, `{uuid, model, memMiB, index, numaNode, nvlinkDomain, healthy, mig, migDevices,
  migStarts, migEnabled}`. `model` is the feature-discovery product string
  (`NVIDIA-H100-80GB-HBM3`), `numaNode` is null when unknown, `nvlinkDomain` is null for a
  GPU without NVLink peers and is only meaningful within one node, `mig` lists the profiles
  of the carved GPU instances in order, `migDevices` their MIG UUIDs and `migStarts` their
  first memory slices (null where unknown), parallel to `mig`. `migEnabled` is true for a GPU
  in MIG mode, also with no instance carved (a GPU being repartitioned). `migStarts` and
  `migEnabled` may be absent (agents before them): no starts known, and MIG mode read from `mig`.
* Pod annotation `gpufleet.io/gpu-assignment`, written by the scheduler before binding:
  `{node, gpus, milli, memMiB, mig}` with `milli` and `memMiB` per GPU (milli 1000 = whole
  GPU) and `mig` a list of `{gpu, slice, uuid}`, `slice` indexing that GPU's `mig` list when
  assigned and `uuid` the instance's MIG UUID (absent from schedulers before it). Both sides
  find the instance by `uuid` when it is there: a MIG layout change can move its index. The agent
  trusts it only on a pod whose `spec.schedulerName` is `gpufleet` and which is bound to the
  agent's node, so a user cannot pre-set it to pick a device.

Everything here is pure: encode to and decode from JSON strings. A bad annotation raises
`ModelError` naming the annotation and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from gpufleet.model import documents
from gpufleet.model.errors import ModelError
from gpufleet.model.node import Gpu, GpuUuid

GPU_RESOURCE = "nvidia.com/gpu"
"""Whole GPUs (NVIDIA's name; also MIG devices under the `single` MIG strategy)."""
GPU_MILLI_RESOURCE = "gpufleet.io/gpu-milli"
"""A fraction of one GPU in GPU-milli, 1..999 per pod; an extended resource the agent advertises."""
GPU_MEMORY_RESOURCE = "gpufleet.io/gpu-memory"
"""Optional GPU-memory cap of a fraction, in MiB; a node-level extended resource."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""MIG devices under the `mixed` strategy: `nvidia.com/mig-<profile>` with `+` written as `.`."""
SHARED_SUFFIX = ".shared"
"""Appended to a replicated resource's name when `renameByDefault` is set."""

INVENTORY_ANNOTATION = "gpufleet.io/gpu-inventory"
ASSIGNMENT_ANNOTATION = "gpufleet.io/gpu-assignment"
MIG_LAYOUT_ANNOTATION = "gpufleet.io/mig-layout"
"""On nodes: the MIG layout the scheduler wants; the agent applies it (agent/mig_layout.py)."""
MIG_LAYOUT_STATE_ANNOTATION = "gpufleet.io/mig-layout-state"
"""On nodes: the outcome of the last MIG layout the agent read (written by the agent)."""
SCHEDULER_NAME = "gpufleet"
"""`spec.schedulerName` of the pods gpufleet places; the agent trusts assignments only on these."""

WHOLE_MILLI = 1000


def mig_resource(profile: str) -> str:
    """`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me` (resource names cannot hold `+`)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def mig_profile_of(resource: str) -> str | None:
    """The MIG profile a mixed-strategy resource name stands for, or None for other resources."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    name = resource[len(MIG_RESOURCE_PREFIX):]
    base, sep, extension = name.partition("gb.")
    return f"{base}gb+{extension}" if sep else name


@dataclass(frozen=True, slots=True)
class InventoryGpu:
    """One GPU as the agent reports it in the node's inventory annotation."""

    uuid: str
    model: str
    mem_mib: int
    index: int
    numa_node: int | None = None
    nvlink_domain: str | None = None
    healthy: bool = True
    mig: tuple[str, ...] = ()
    mig_devices: tuple[str, ...] = ()
    mig_starts: tuple[int | None, ...] = ()
    """First memory slice of each `mig` instance (None where unknown); () when none is known."""
    mig_enabled: bool = False
    """MIG mode is on, even with `mig` empty (set whenever `mig` is not)."""

    def __post_init__(self) -> None:
        if self.mig and not self.mig_enabled:
            object.__setattr__(self, "mig_enabled", True)


@dataclass(frozen=True, slots=True)
class MigSliceRef:
    """A carved MIG instance: the GPU, the index into that GPU's `mig` list when assigned, and
    its MIG UUID when the scheduler knew it. The UUID is what counts: a MIG layout change can
    shift the index of an instance that stays (agent/mig_layout.py), never its UUID."""

    gpu: str
    slice: int
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    """The devices the scheduler chose for a pod. `milli` and `mem_mib` are per GPU."""

    node: str
    gpus: tuple[str, ...] = ()
    milli: int = 0
    mem_mib: int = 0
    mig: tuple[MigSliceRef, ...] = ()
    queue: str | None = None
    """The queue the pod was scheduled in, which it stays charged to whatever its label says
    later (absent from assignments written before 2026-11-28, and by other writers)."""

    @property
    def is_fraction(self) -> bool:
        return bool(self.gpus) and self.milli < WHOLE_MILLI


def encode_inventory(gpus: tuple[InventoryGpu, ...]) -> str:
    return json.dumps([{
        "uuid": g.uuid, "model": g.model, "memMiB": g.mem_mib, "index": g.index,
        "numaNode": g.numa_node, "nvlinkDomain": g.nvlink_domain, "healthy": g.healthy,
        "mig": list(g.mig), "migDevices": list(g.mig_devices),
        **({"migStarts": list(g.mig_starts)} if g.mig_starts else {}), "migEnabled": g.mig_enabled,
    } for g in gpus], separators=(",", ":"))


def decode_inventory(text: str) -> tuple[InventoryGpu, ...]:
    items = _load(text, INVENTORY_ANNOTATION)
    if not isinstance(items, list):
        raise ModelError(f"annotation {INVENTORY_ANNOTATION}", "must be a JSON list of GPUs")
    gpus = tuple(_inventory_gpu(item, f"annotation {INVENTORY_ANNOTATION}: [{i}]")
                 for i, item in enumerate(items))
    if len({g.uuid for g in gpus}) != len(gpus):
        raise ModelError(f"annotation {INVENTORY_ANNOTATION}", "duplicate GPU UUIDs")
    return gpus


def inventory_to_gpus(gpus: tuple[InventoryGpu, ...]) -> tuple[Gpu, ...]:
    """The scheduler's view of the GPUs (`NodeInfo.gpus`); an unknown NUMA node reads as 0."""
    return tuple(Gpu(GpuUuid(g.uuid), g.model, g.mem_mib, g.index, g.nvlink_domain,
                     g.numa_node if g.numa_node is not None else 0, g.healthy, g.mig, g.mig_enabled, g.mig_devices,
                     g.mig_starts)
                 for g in gpus)


def encode_assignment(a: GpuAssignment) -> str:
    return json.dumps({"node": a.node, "gpus": list(a.gpus), "milli": a.milli, "memMiB": a.mem_mib,
                       "mig": [{"gpu": m.gpu, "slice": m.slice, **({"uuid": m.uuid} if m.uuid else {})}
                               for m in a.mig],
                       **({"queue": a.queue} if a.queue is not None else {})},
                      separators=(",", ":"))


def decode_assignment(text: str) -> GpuAssignment:
    where = f"annotation {ASSIGNMENT_ANNOTATION}"
    obj = _object(_load(text, ASSIGNMENT_ANNOTATION), where)
    node = _str(obj, "node", where)
    gpus = _str_list(obj.get("gpus", []), f"{where}: gpus")
    if len(set(gpus)) != len(gpus):
        raise ModelError(f"{where}: gpus", "lists a GPU twice")
    milli = _int(obj.get("milli", WHOLE_MILLI if gpus else 0), f"{where}: milli")
    if gpus and not 1 <= milli <= WHOLE_MILLI:
        raise ModelError(f"{where}: milli", f"must be 1..1000 per GPU, got {milli}")
    if gpus and milli < WHOLE_MILLI and len(gpus) != 1:
        raise ModelError(f"{where}: milli", f"a fraction ({milli}) applies to one GPU, not {len(gpus)}")
    if not gpus and milli:
        raise ModelError(f"{where}: milli", "is set but no GPUs are listed")
    mig_items = obj.get("mig", [])
    if not isinstance(mig_items, list):
        raise ModelError(f"{where}: mig", "must be a list of {gpu, slice}")
    mig = tuple(_slice_ref(m, f"{where}: mig[{i}]") for i, m in enumerate(mig_items))
    queue = _str(obj, "queue", where) if "queue" in obj else None
    return GpuAssignment(node, tuple(gpus), milli, _int(obj.get("memMiB", 0), f"{where}: memMiB"), mig, queue)


def _inventory_gpu(item: object, where: str) -> InventoryGpu:
    obj = _object(item, where)
    mig = _str_list(obj.get("mig", []), f"{where}: mig")
    devices = _str_list(obj.get("migDevices", []), f"{where}: migDevices")
    if len(mig) != len(devices):
        raise ModelError(f"{where}: migDevices", f"has {len(devices)} entries for {len(mig)} MIG slices")
    numa = obj.get("numaNode")
    domain = obj.get("nvlinkDomain")
    if domain is not None and not isinstance(domain, str):
        raise ModelError(f"{where}: nvlinkDomain", f"must be a string or null, got {domain!r}")
    healthy = obj.get("healthy", True)
    if not isinstance(healthy, bool):
        raise ModelError(f"{where}: healthy", f"must be true or false, got {healthy!r}")
    starts = obj.get("migStarts", [])
    if not isinstance(starts, list) or (starts and len(starts) != len(mig)):
        raise ModelError(f"{where}: migStarts", f"must be a list with one start (or null) per MIG slice, got {starts!r}")
    enabled = obj.get("migEnabled", bool(mig))
    if not isinstance(enabled, bool) or (mig and not enabled):
        raise ModelError(f"{where}: migEnabled", f"must be true or false (true with MIG slices), got {enabled!r}")
    return InventoryGpu(_str(obj, "uuid", where), _str(obj, "model", where),
                        _int(obj.get("memMiB"), f"{where}: memMiB"), _int(obj.get("index"), f"{where}: index"),
                        None if numa is None else _int(numa, f"{where}: numaNode"), domain, healthy,
                        tuple(mig), tuple(devices),
                        tuple(None if v is None else _int(v, f"{where}: migStarts[{i}]") for i, v in enumerate(starts)),
                        enabled)


def _slice_ref(item: object, where: str) -> MigSliceRef:
    obj = _object(item, where)
    return MigSliceRef(_str(obj, "gpu", where), _int(obj.get("slice"), f"{where}: slice"),
                       _str(obj, "uuid", where) if "uuid" in obj else None)


def _load(text: str, annotation: str) -> Any:
    return documents.loads_json(text, f"annotation {annotation}")


def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise ModelError(where, f"must be a JSON object, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ModelError(f"{where}: {key}", f"must be a non-empty string, got {value!r}")
    return value


def _str_list(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ModelError(where, f"must be a list of non-empty strings, got {value!r}")
    return list(value)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelError(where, f"must be a non-negative integer, got {value!r}")
    return value
