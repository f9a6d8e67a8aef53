"""The pure heart of discovery: raw device facts in, a node's GPU inventory out.

`inventory(system, devices)` names MIG profiles, groups NVLink domains and derives the
feature-discovery product and family, with no I/O, so the NVML shell stays thin and the
same code runs against fixtures in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpufleet.agent import devices as dev
from gpufleet.model import ModelError
from gpufleet.model import annotations as ann

_ME_PROFILE_INDICES = (dev.PROFILE_1_SLICE_REV1, 8)  # 1g / 2g "+me" (media extensions)


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A carved MIG device with its profile name and the attributes GFD labels."""

    uuid: str
    profile: str
    gi: int
    ci: int
    mem_mib: int
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    engines: tuple[tuple[str, int], ...]
    """(copy, decoder, encoder, jpeg, ofa) counts, by GFD's engine label names."""
    profile_id: int | None = None
    placement_start: int | None = None
    """First memory slice of its GPU instance; None when the source did not say."""
    placement_size: int | None = None
    """Memory slices its GPU instance spans; None when the profile's placements are unknown."""


@dataclass(frozen=True, slots=True)
class MigOption:
    """A GPU-instance profile this GPU can be carved into, with where instances of it may go."""

    profile: str
    profile_id: int | None
    instances: int
    mem_mib: int
    multiprocessors: int
    engines: tuple[tuple[str, int], ...]
    placements: tuple[tuple[int, int], ...]
    """(start, size) in memory slices; empty when the source did not report placements."""


@dataclass(frozen=True, slots=True)
class GpuEntry:
    uuid: str
    index: int
    minor: int
    name: str
    product: str
    """GFD's `nvidia.com/gpu.product` form of the name: spaces become dashes."""
    mem_mib: int
    pci_bus_id: str
    pci_device_id: int
    numa_node: int | None
    compute: tuple[int, int]
    family: str
    mode: str
    """`compute`, `graphics` or `unknown` (GFD's `gpu.mode`, from the PCI class)."""
    mig_capable: bool
    mig_enabled: bool
    mig_slices: tuple[MigSlice, ...]
    mig_profiles: tuple[tuple[str, int], ...]
    """Profiles this GPU could be carved into, with the maximum instance count of each."""
    nvlink_domain: str | None
    mig_options: tuple[MigOption, ...] = ()
    """Every whole-instance profile (compute slices = GPU slices) with its placements."""


@dataclass(frozen=True, slots=True)
class NodeGpuInventory:
    driver_version: str
    cuda_version: tuple[int, int]
    machine: str | None
    gpus: tuple[GpuEntry, ...]

    def gpu(self, uuid: str) -> GpuEntry | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


def inventory(system: dev.SystemInfo, devices: tuple[dev.DeviceInfo, ...]) -> NodeGpuInventory:
    domains = nvlink_domains(devices)
    cuda = (system.cuda_driver_version // 1000, system.cuda_driver_version % 1000 // 10)
    return NodeGpuInventory(system.driver_version, cuda, system.machine,
                            tuple(_entry(d, domains.get(d.uuid)) for d in sorted(devices, key=lambda d: d.index)))


def without_mig(inv: NodeGpuInventory, uuids: frozenset[str]) -> NodeGpuInventory:
    """The inventory less the MIG devices `uuids` (those the DRA plugin carved for prepared claims,
    which belong to their claims, not to the node's free devices)."""
    if not uuids:
        return inv
    return replace(inv, gpus=tuple(replace(g, mig_slices=tuple(s for s in g.mig_slices if s.uuid not in uuids))
                                   for g in inv.gpus))


def mig_profile_name(profile: dev.MigProfileInfo, ci_slices: int, total_mem_mib: int) -> str:
    """go-nvlib's naming rule: memory rounded up to eighths of the GPU, scaled to whole GiB.

    `GB = round(ceil(8 * mig / total) / 8 * ceil(total / 1 GiB))`, rounding half away from
    zero (H100 NVL 2g: 23.5 -> 24; H200 3g: 70.5 -> 71), computed in integers.
    """
    eighths = -(-8 * profile.mem_mib // total_mem_mib)
    total_gib = -(-total_mem_mib // 1024)
    gb = (eighths * total_gib * 2 + 8) // 16
    name = f"{profile.slices}g.{gb}gb"
    if ci_slices != profile.slices:
        name = f"{ci_slices}c.{name}"
    return name + ("+me" if profile.index in _ME_PROFILE_INDICES else "")


def nvlink_domains(devices: tuple[dev.DeviceInfo, ...]) -> dict[str, str]:
    """Connected components of the NVLink graph, named `nvl0`, `nvl1`, ... by lowest index.

    A GPU without NVLink peers belongs to no domain. Names are meaningful within one node.
    """
    uuids = {d.uuid for d in devices}
    neighbours = {d.uuid: {p for p in d.nvlink_peers if p in uuids} for d in devices}
    for d in devices:  # NVLink is symmetric even if one side failed to report a link
        for p in neighbours[d.uuid]:
            neighbours[p].add(d.uuid)
    result: dict[str, str] = {}
    for d in sorted(devices, key=lambda d: d.index):
        if d.uuid in result or not neighbours[d.uuid]:
            continue
        name = f"nvl{len(set(result.values()))}"
        stack = [d.uuid]
        while stack:
            u = stack.pop()
            if u not in result:
                result[u] = name
                stack.extend(neighbours[u])
    return result


def family(compute: tuple[int, int]) -> str:
    """GFD's `gpu.family` from the compute capability."""
    major, minor = compute
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 8: "ampere",
             9: "hopper", 10: "blackwell", 12: "blackwell"}
    if major == 7:
        return "volta" if minor < 5 else "turing"
    return names.get(major, "undefined")


def to_annotation(inv: NodeGpuInventory, unhealthy: frozenset[str] = frozenset()) -> tuple[ann.InventoryGpu, ...]:
    """The `gpufleet.io/gpu-inventory` entries; `unhealthy` holds GPU UUIDs to report unhealthy."""
    return tuple(ann.InventoryGpu(g.uuid, g.product, g.mem_mib, g.index, g.numa_node, g.nvlink_domain,
                                  g.uuid not in unhealthy, tuple(s.profile for s in g.mig_slices),
                                  tuple(s.uuid for s in g.mig_slices),
                                  tuple(s.placement_start for s in g.mig_slices)
                                  if any(s.placement_start is not None for s in g.mig_slices) else (),
                                  g.mig_enabled)
                 for g in inv.gpus)


def to_json(inv: NodeGpuInventory) -> dict[str, Any]:
    """Everything discovery saw, as plain JSON data (`gpufleet agent inventory --json`)."""
    return {
        "driverVersion": inv.driver_version,
        "cudaVersion": f"{inv.cuda_version[0]}.{inv.cuda_version[1]}",
        "machine": inv.machine,
        "gpus": [{
            "uuid": g.uuid, "index": g.index, "minor": g.minor, "name": g.name, "product": g.product,
            "memMiB": g.mem_mib, "pciBusId": g.pci_bus_id, "pciDeviceId": f"0x{g.pci_device_id:08X}",
            "numaNode": g.numa_node, "compute": f"{g.compute[0]}.{g.compute[1]}", "family": g.family,
            "mode": g.mode, "migCapable": g.mig_capable, "migEnabled": g.mig_enabled,
            "migProfiles": {name: count for name, count in g.mig_profiles},
            "mig": [{"uuid": s.uuid, "profile": s.profile, "gi": s.gi, "ci": s.ci, "memMiB": s.mem_mib,
                     "multiprocessors": s.multiprocessors} for s in g.mig_slices],
            "nvlinkDomain": g.nvlink_domain,
        } for g in inv.gpus],
    }


def _entry(d: dev.DeviceInfo, domain: str | None) -> GpuEntry:
    profiles = {p.index: p for p in d.mig_profiles}
    for m in d.mig_devices:
        if m.profile_index not in profiles:
            raise ModelError(f"GPU {d.uuid}: MIG device {m.uuid}",
                             f"has GPU-instance profile index {m.profile_index}, which the GPU does not list")
    slices = tuple(_slice(d.uuid, m, profiles[m.profile_index], d.mem_mib) for m in d.mig_devices)
    ordered = sorted(d.mig_profiles, key=lambda p: (p.slices, p.mem_mib, p.index))
    possible = tuple((mig_profile_name(p, p.slices, d.mem_mib), p.instances) for p in ordered)
    options = tuple(MigOption(mig_profile_name(p, p.slices, d.mem_mib), p.profile_id, p.instances, p.mem_mib,
                              p.multiprocessors, _engines(p), p.placements) for p in ordered)
    mode = {0x030000: "graphics", 0x030200: "compute"}.get(d.pci_class or -1, "unknown")
    return GpuEntry(d.uuid, d.index, d.minor, d.name, d.name.replace(" ", "-"), d.mem_mib, d.pci_bus_id,
                    d.pci_device_id, d.numa_node, d.compute, family(d.compute), mode, d.mig_capable,
                    d.mig_enabled, slices, possible, domain, options)


def _engines(p: dev.MigProfileInfo) -> tuple[tuple[str, int], ...]:
    return (("copy", p.copy_engines), ("decoder", p.decoders), ("encoder", p.encoders),
            ("jpeg", p.jpegs), ("ofa", p.ofas))


def _slice(gpu: str, m: dev.MigDeviceInfo, p: dev.MigProfileInfo, total_mem_mib: int) -> MigSlice:
    size = next((size for start, size in p.placements if start == m.placement_start), None)
    if m.placement_start is not None and size is None and p.placements:
        raise ModelError(f"GPU {gpu}: MIG device {m.uuid}",
                         f"starts at memory slice {m.placement_start}, which its profile does not allow "
                         f"(allowed: {sorted(start for start, _ in p.placements)})")
    return MigSlice(m.uuid, mig_profile_name(p, m.ci_slices, total_mem_mib), m.gi, m.ci, p.mem_mib,
                    m.multiprocessors, p.slices, m.ci_slices, _engines(p), p.profile_id, m.placement_start, size)
