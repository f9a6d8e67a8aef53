"""Raw facts about a node's GPUs, as a `GpuBackend` reports them (NVML or a fixture).

These are deliberately close to what NVML returns (MiB, profile indices, peer UUIDs), with
no interpretation: naming MIG profiles, grouping NVLink domains and choosing labels happen
in the pure `inventory` module, so the same logic runs on real hardware and on fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# NVML_GPU_INSTANCE_PROFILE_* indices whose names carry a suffix (interfaces.md section 3).
PROFILE_1_SLICE_REV1 = 7
"""The 1-slice profile with media extensions (`1g.10gb+me`)."""


@dataclass(frozen=True, slots=True)
class MigProfileInfo:
    """One GPU-instance profile a MIG-capable GPU supports (`nvmlDeviceGetGpuInstanceProfileInfo`)."""

    index: int
    """The NVML_GPU_INSTANCE_PROFILE_* index it was queried with."""
    slices: int
    instances: int
    """How many instances of this profile fit on an empty GPU."""
    multiprocessors: int
    mem_mib: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0
    profile_id: int | None = None
    """NVML's id of the profile (`GpuInstanceProfileInfo.id`, e.g. 19 for an H100's `1g.10gb`);
    None when the source did not report it."""
    placements: tuple[tuple[int, int], ...] = ()
    """(start, size) memory-slice placements an instance of this profile may take on an empty GPU
    (`nvmlDeviceGetGpuInstancePossiblePlacements`); empty when the source did not report them."""


@dataclass(frozen=True, slots=True)
class MigDeviceInfo:
    """A carved MIG device (one compute instance in one GPU instance)."""

    uuid: str
    gi: int
    ci: int
    profile_index: int
    """Index of its GPU-instance profile, to look up in `DeviceInfo.mig_profiles`."""
    ci_slices: int
    multiprocessors: int
    placement_start: int | None = None
    """First memory slice of its GPU instance (`nvmlGpuInstanceGetInfo`); None when unknown."""


@dataclass(frozen=True, slots=True)
class CarvedInstance:
    """A MIG device the agent carved: one GPU instance at a placement with one compute instance
    spanning it, as `GpuBackend.create_mig_instance` returns it and `prepared.json` records it."""

    gpu_uuid: str
    """The parent GPU."""
    uuid: str
    """The new MIG device's UUID: what the claim's container sees, and what destroying it looks up."""
    gi: int
    ci: int
    profile_id: int
    """NVML's GPU-instance profile id it was created with."""
    start: int
    size: int
    """Its placement: memory slices `start` to `start + size - 1`."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One physical GPU."""

    uuid: str
    index: int
    minor: int
    name: str
    """NVML name, e.g. `NVIDIA H100 80GB HBM3`."""
    mem_mib: int
    pci_bus_id: str
    pci_device_id: int
    compute: tuple[int, int]
    numa_node: int | None = None
    pci_class: int | None = None
    """PCI class code (0x030200 = 3D controller, i.e. compute mode); None when unknown."""
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_profiles: tuple[MigProfileInfo, ...] = ()
    mig_devices: tuple[MigDeviceInfo, ...] = ()
    nvlink_peers: tuple[str, ...] = ()
    """UUIDs of GPUs on this node reachable over NVLink (directly or through NVSwitch)."""


@dataclass(frozen=True, slots=True)
class SystemInfo:
    driver_version: str
    """Driver version string, e.g. `550.54.15`."""
    cuda_driver_version: int
    """CUDA driver API version as NVML encodes it, e.g. 12040 for 12.4."""
    machine: str | None = None
    """Machine type (DMI product name), e.g. `DGXH100`."""


class EventKind(str, Enum):
    XID = "xid"
    DOUBLE_BIT_ECC = "double-bit-ecc"
    ROW_REMAP_FAILURE = "row-remap-failure"
    LOST = "lost"
    """The event wait itself failed: the agent can no longer tell which GPU is healthy."""


WHOLE_GPU = 0xFFFFFFFF
"""NVML's GPU/compute-instance id in an event that concerns the whole GPU."""


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """A fault reported by the backend. `gpu_uuid` is None only for `LOST` (all GPUs)."""

    kind: EventKind
    gpu_uuid: str | None
    xid: int | None = None
    gi: int = WHOLE_GPU
    ci: int = WHOLE_GPU
