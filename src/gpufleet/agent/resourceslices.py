"""A node's GPUs as DRA ResourceSlices (`resource.k8s.io/v1`): inventory in, API objects out.

Pure: no I/O, so the same code runs on NVML and on fixtures, and the objects can be printed
(`gpufleet agent resourceslices`) before any API server sees them.

Names and attributes follow NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu,
`cmd/gpu-kubelet-plugin/deviceinfo.go`, `mig.go`, `partitions.go`), so a DeviceClass or claim
selector written for `gpu.nvidia.com` works here once its domain is changed:

- a whole GPU is `gpu-<minor>`; a MIG device is `gpu-<minor>-mig-<profile>-<profile id>-<start>`
  (`gpu-0-mig-1g10gb-19-3`), its profile without dots;
- attributes `type` (`gpu` or `mig`), `uuid`, `productName`, `architecture`, and the versions
  `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`; MIG devices add `parentUUID`
  and `profile`; the standard `resource.kubernetes.io/pciBusID` and `resource.kubernetes.io/numaNode`;
  gpufleet adds `nvlinkDomain` (the node-local NVLink group, `nvl0`, ...);
- capacity `memory`; MIG devices add `multiprocessors`, `copyEngines`, `decoders`, `encoders`,
  `jpegEngines`, `ofaEngines` and, when carved, `memorySlice<i>` for each memory slice they hold.

Not published, unlike NVIDIA's driver: `brand`, `addressingMode`, `resource.kubernetes.io/pcieRoot`
(discovery does not read them).

Two ways to publish MIG (`MigMode`):

- `static` (NVIDIA's default): a GPU in MIG mode offers the instances carved on it, nothing else;
  a GPU not in MIG mode offers itself whole.
- `dynamic` (NVIDIA's `DynamicMIG`, KEP-4815 partitionable devices): each MIG-capable GPU with no
  instances carved gets a counter set (one counter per capacity, one per memory slice); the
  whole GPU consumes all of it and every possible placement of every profile is a device
  consuming its share, so the allocator cannot hand out overlapping placements. A GPU that
  already has instances is published as in `static`. The agent carves a placement's instance
  when it prepares the claim (`draplugin`) and leaves the instances it carved for prepared
  claims out of discovery, so the GPU stays partitionable while they are in use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gpufleet.agent.inventory import GpuEntry, MigOption, MigSlice, NodeGpuInventory
from gpufleet.model import ModelError

DRIVER = "gpu.gpufleet.io"
API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
"""Devices in one slice (`ResourceSliceMaxDevices`)."""
MAX_DEVICES_ADVANCED = 64
"""Devices in one slice when any consumes counters or carries a taint (`ResourceSliceMaxDevicesWithAdvancedFeatures`)."""
MAX_COUNTER_SETS = 8
"""Counter sets in one slice (`ResourceSliceMaxCounterSets`)."""
UNHEALTHY_TAINT = "gpufleet.io/unhealthy"

_ARCHITECTURES = {(7, 0): "Volta", (7, 2): "Volta", (7, 5): "Turing", (8, 9): "Ada Lovelace"}
_ARCHITECTURE_BY_MAJOR = {3: "Kepler", 5: "Maxwell", 6: "Pascal", 8: "Ampere", 9: "Hopper", 10: "Blackwell",
                          12: "Blackwell"}
_CAPACITIES = (("multiprocessors", "multiprocessors"), ("copyEngines", "copy"), ("decoders", "decoder"),
               ("encoders", "encoder"), ("jpegEngines", "jpeg"), ("ofaEngines", "ofa"))
"""DRA capacity name, and the engine's name in the inventory (`multiprocessors` is not an engine)."""


class MigMode(str, Enum):
    STATIC = "static"
    DYNAMIC = "dynamic"


@dataclass(frozen=True, slots=True)
class SliceOptions:
    driver: str = DRIVER
    mig: MigMode = MigMode.STATIC
    memory_shares: bool = False
    """Whole GPUs take several allocations, each asking for part of the GPU's memory (consumable
    capacity, KEP-5075); a claim that asks for no amount gets the whole memory, so sharing is opt-in
    per claim. Set where the node's config shares GPUs (time slicing or MPS). Not for a GPU published
    as partitionable: its whole-GPU device already shares a counter set with its MIG placements."""


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """What a published device is on this node, for preparing it (`agent/draprepare.py`)."""

    uuid: str
    """The GPU's UUID, or the MIG device's."""
    minor: int
    """The GPU's minor number (`/dev/nvidia<minor>`); a MIG device's parent's."""
    shareable: bool = False
    """Several claims may hold it at once (`allowMultipleAllocations`)."""
    carve: str | None = None
    """Set for a partitionable MIG placement: the profile an instance must be carved with first."""
    profile_id: int | None = None
    """A placement's NVML GPU-instance profile id, to carve it with."""
    placement: tuple[int, int] | None = None
    """A placement's (start, size) in memory slices."""
    partitionable: bool = False
    """One of a partitionable GPU's devices (the whole GPU, placement None, or a placement): two of them
    on one GPU must not be prepared at once when either is the whole GPU or their memory slices meet."""


@dataclass(frozen=True, slots=True)
class _Group:
    """One GPU's devices: they stay in one slice, so a GPU is never split across slices."""

    devices: tuple[dict[str, Any], ...]
    targets: tuple[DeviceTarget, ...]
    """What each of `devices` is, in the same order."""
    advanced: bool
    counter_set: dict[str, Any] | None = None


def resource_slices(inv: NodeGpuInventory, node: str, generation: int, options: SliceOptions = SliceOptions(),
                    unhealthy: frozenset[str] = frozenset(), node_uid: str | None = None) -> tuple[dict[str, Any], ...]:
    """The node's pool: every slice, all of one `generation`, named `<node>-<driver>-<i>`.

    `unhealthy` holds GPU and MIG UUIDs: their devices carry a `NoSchedule` taint `gpufleet.io/unhealthy`
    instead of vanishing, so a claim already allocated stays visible while no new claim gets them.
    `node_uid`, when given, makes the Node the slices' owner, so they go when it goes.
    """
    groups = _groups(inv, options, unhealthy)
    counter_sets = [g.counter_set for g in groups if g.counter_set is not None]
    specs = [{"sharedCounters": counter_sets[i:i + MAX_COUNTER_SETS]}
             for i in range(0, len(counter_sets), MAX_COUNTER_SETS)]
    specs += [{"devices": devices} for devices in _pack(groups)]
    if not specs:
        specs = [{"devices": []}]  # an empty pool still says "this node has no GPUs for this driver"
    prefix = f"{node[:253 - len(options.driver) - 8]}-{options.driver}"
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}] if node_uid else []
    return tuple({
        "apiVersion": API_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": f"{prefix}-{i}", **({"ownerReferences": owner} if owner else {})},
        "spec": {"driver": options.driver, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": len(specs)}, **spec},
    } for i, spec in enumerate(specs))


def device_targets(inv: NodeGpuInventory, options: SliceOptions = SliceOptions()) -> dict[str, DeviceTarget]:
    """Every device `resource_slices` publishes with these options, by name."""
    return {d["name"]: t for g in _groups(inv, options, frozenset()) for d, t in zip(g.devices, g.targets)}


def _groups(inv: NodeGpuInventory, options: SliceOptions, unhealthy: frozenset[str]) -> list[_Group]:
    """Each GPU's devices as `options` publish them, with what each device is."""
    groups: list[_Group] = []
    for g in inv.gpus:
        taints = _taint(g.uuid in unhealthy)
        if options.mig is MigMode.DYNAMIC and _partitionable(g):
            counters = _full_counters(g)
            whole = {**_whole(inv, g, False, taints), "consumesCounters": [{"counterSet": _counter_set(g),
                                                                            "counters": counters}]}
            placed = [(o, start, size) for o in g.mig_options for start, size in o.placements]
            groups.append(_Group(
                (whole, *(_placement(inv, g, o, start, size, taints) for o, start, size in placed)),
                (DeviceTarget(g.uuid, g.minor, partitionable=True),
                 *(DeviceTarget(g.uuid, g.minor, carve=o.profile, profile_id=o.profile_id, placement=(start, size),
                                partitionable=True) for o, start, size in placed)),
                True, {"name": _counter_set(g), "counters": counters}))
        elif g.mig_enabled:
            carved = tuple(_carved(inv, g, s, taints or _taint(s.uuid in unhealthy)) for s in g.mig_slices)
            groups.append(_Group(carved, tuple(DeviceTarget(s.uuid, g.minor) for s in g.mig_slices),
                                 any("taints" in d for d in carved)))
        else:
            groups.append(_Group((_whole(inv, g, options.memory_shares, taints),),
                                 (DeviceTarget(g.uuid, g.minor, shareable=options.memory_shares),), bool(taints)))
    return groups


def semver(version: str, what: str) -> str:
    """NVIDIA's dotted versions as semantic versions: `580.159.04` -> `580.159.4`, `13.0` -> `13.0.0`."""
    parts = version.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ModelError(what, f"{version!r} is not a dotted version of up to three numbers")
    return ".".join(str(int(p)) for p in (*parts, "0", "0")[:3])


def architecture(compute: tuple[int, int]) -> str:
    """NVML's architecture name (go-nvlib `GetArchitectureAsString`) from the compute capability."""
    return _ARCHITECTURES.get(compute) or _ARCHITECTURE_BY_MAJOR.get(compute[0], "Unknown")


def pci_bus_id(nvml_bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` in the standard attribute's form, `0000:3b:00.0`."""
    m = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", nvml_bus_id.strip())
    if m is None:
        raise ModelError("PCI bus id", f"{nvml_bus_id!r} is not domain:bus:device.function")
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def mebibytes(mib: int) -> str:
    """A quantity in the canonical form kube-apiserver stores (`40960` MiB is `40Gi`), so a slice
    read back compares equal to the one built."""
    if mib == 0:
        return "0"
    for suffix, power in (("Pi", 30), ("Ti", 20), ("Gi", 10)):
        if mib % 2**power == 0:
            return f"{mib >> power}{suffix}"
    return f"{mib}Mi"


def mig_device_name(g: GpuEntry, profile: str, profile_id: int, start: int) -> str:
    return f"gpu-{g.minor}-mig-{re.sub(r'[^a-z0-9-]', '-', profile.replace('.', '').lower())}-{profile_id}-{start}"


def _pack(groups: list[_Group]) -> list[list[dict[str, Any]]]:
    """Whole GPUs into slices, in order, each slice within its device limit."""
    slices: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    advanced = False
    for group in groups:
        limit = MAX_DEVICES_ADVANCED if advanced or group.advanced else MAX_DEVICES
        if current and len(current) + len(group.devices) > limit:
            slices.append(current)
            current, advanced = [], False
        current.extend(group.devices)
        advanced = advanced or group.advanced
    if current:
        slices.append(current)
    return slices


def _partitionable(g: GpuEntry) -> bool:
    return g.mig_capable and not g.mig_slices and any(o.placements for o in g.mig_options) \
        and all(o.profile_id is not None for o in g.mig_options)


def _attributes(inv: NodeGpuInventory, g: GpuEntry, kind: str, uuid: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": kind},
        "productName": {"string": g.name},
        "architecture": {"string": architecture(g.compute)},
        "cudaComputeCapability": {"version": f"{g.compute[0]}.{g.compute[1]}.0"},
        "driverVersion": {"version": semver(inv.driver_version, "driver version")},
        "cudaDriverVersion": {"version": f"{inv.cuda_version[0]}.{inv.cuda_version[1]}.0"},
        "resource.kubernetes.io/pciBusID": {"string": pci_bus_id(g.pci_bus_id)},
    }
    if uuid is not None:
        attributes["uuid"] = {"string": uuid}
    if kind == "mig":
        attributes["parentUUID"] = {"string": g.uuid}
    if g.numa_node is not None and g.numa_node >= 0:
        attributes["resource.kubernetes.io/numaNode"] = {"int": g.numa_node}
    if g.nvlink_domain is not None:
        attributes["nvlinkDomain"] = {"string": g.nvlink_domain}
    return attributes


def _taint(unhealthy: bool) -> tuple[dict[str, str], ...]:
    return ({"key": UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"},) if unhealthy else ()


def _with_taints(device: dict[str, Any], taints: tuple[dict[str, str], ...]) -> dict[str, Any]:
    return {**device, "taints": list(taints)} if taints else device


def _whole(inv: NodeGpuInventory, g: GpuEntry, shares: bool, taints: tuple[dict[str, str], ...]) -> dict[str, Any]:
    memory: dict[str, Any] = {"value": mebibytes(g.mem_mib)}
    device: dict[str, Any] = {"name": f"gpu-{g.minor}", "attributes": _attributes(inv, g, "gpu", g.uuid),
                              "capacity": {"memory": memory}}
    if shares:
        device["allowMultipleAllocations"] = True
        memory["requestPolicy"] = {"default": mebibytes(g.mem_mib),
                                   "validRange": {"min": "1Mi", "max": mebibytes(g.mem_mib), "step": "1Mi"}}
    return _with_taints(device, taints)


def _mig_capacity(mem_mib: int, multiprocessors: int, engines: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    counts = {"multiprocessors": multiprocessors, **dict(engines)}
    return {**{name: {"value": str(counts[key])} for name, key in _CAPACITIES}, "memory": {"value": mebibytes(mem_mib)}}


def _carved(inv: NodeGpuInventory, g: GpuEntry, s: MigSlice, taints: tuple[dict[str, str], ...]) -> dict[str, Any]:
    name = _carved_name(g, s)
    capacity = _mig_capacity(s.mem_mib, s.multiprocessors, s.engines)
    if s.placement_start is not None and s.placement_size is not None:
        capacity.update({f"memorySlice{i}": {"value": "1"}
                         for i in range(s.placement_start, s.placement_start + s.placement_size)})
    attributes = {**_attributes(inv, g, "mig", s.uuid), "profile": {"string": s.profile}}
    return _with_taints({"name": name, "attributes": attributes, "capacity": capacity}, taints)


def _carved_name(g: GpuEntry, s: MigSlice) -> str:
    if s.profile_id is not None and s.placement_start is not None:
        return mig_device_name(g, s.profile, s.profile_id, s.placement_start)
    return f"gpu-{g.minor}-mig-gi{s.gi}-ci{s.ci}"  # the driver did not say where it sits: its instance ids


def _placement(inv: NodeGpuInventory, g: GpuEntry, o: MigOption, start: int, size: int,
               taints: tuple[dict[str, str], ...]) -> dict[str, Any]:
    assert o.profile_id is not None  # _partitionable checked
    capacity = _mig_capacity(o.mem_mib, o.multiprocessors, o.engines)
    counters = {**_counters(capacity), **{f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)}}
    return _with_taints({
        "name": mig_device_name(g, o.profile, o.profile_id, start),
        "attributes": {**_attributes(inv, g, "mig", None), "profile": {"string": o.profile}},
        "capacity": capacity,
        "consumesCounters": [{"counterSet": _counter_set(g), "counters": counters}],
    }, taints)


def _counter_set(g: GpuEntry) -> str:
    return f"gpu-{g.minor}-counter-set"


def _counters(capacity: dict[str, Any]) -> dict[str, Any]:
    """Capacities as counters: counter names are DNS labels (`copyEngines` -> `copy-engines`)."""
    return {re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name).lower(): {"value": c["value"]} for name, c in capacity.items()}


def _full_counters(g: GpuEntry) -> dict[str, Any]:
    """The GPU's counter set: each capacity's largest value over all profiles, and every memory slice."""
    top: dict[str, int] = {}
    for o in g.mig_options:
        counts = {"multiprocessors": o.multiprocessors, **dict(o.engines)}
        for name, key in _CAPACITIES:
            top[name] = max(top.get(name, 0), counts[key])
        top["memory"] = max(top.get("memory", 0), o.mem_mib)
    slices = max(start + size for o in g.mig_options for start, size in o.placements)
    capacity = {name: {"value": mebibytes(value) if name == "memory" else str(value)} for name, value in top.items()}
    return {**_counters(capacity), **{f"memory-slice-{i}": {"value": "1"} for i in range(slices)}}
