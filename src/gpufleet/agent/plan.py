"""Which extended resources the node advertises, and which device stands behind each ID.

`plan_resources(inventory, config)` is pure: it applies the MIG strategy, time-slicing or
MPS replicas and gpufleet's fractions, and returns one `ResourcePlan` per resource, each
served by its own device-plugin socket. Rules follow NVIDIA's plugin:

* `migStrategy: none` advertises every GPU, MIG-enabled or not, as `nvidia.com/gpu`;
  `single` advertises the MIG devices as `nvidia.com/gpu` and requires every GPU to be in
  MIG mode with one profile; `mixed` advertises `nvidia.com/mig-<profile>` per profile and
  the GPUs without MIG as `nvidia.com/gpu`.
* A replicated resource advertises `<id>::<k>` for k < replicas, renamed `<name>.shared`
  with `renameByDefault`. MPS does not apply to MIG devices.
* Fractions advertise `gpufleet.io/gpu-milli`: 1000 IDs `<gpu-uuid>::<k>` per non-MIG GPU.
  The IDs only let the kubelet count; the device comes from the scheduler's assignment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gpufleet.agent import config as cfg
from gpufleet.agent.inventory import GpuEntry, MigSlice, NodeGpuInventory
from gpufleet.model import ModelError
from gpufleet.model import annotations as ann


class PlanError(ModelError):
    """The config cannot be served on this node's GPUs (e.g. `single` with mixed layouts)."""


class Kind(str, Enum):
    GPU = "gpu"
    MIG = "mig"
    MILLI = "milli"


@dataclass(frozen=True, slots=True)
class Unit:
    """One advertised device ID and the hardware behind it."""

    id: str
    target: str
    """What NVIDIA_VISIBLE_DEVICES and CDI name: a GPU/MIG UUID, or its index (`0`, `0:1`)."""
    gpu: str
    """Physical GPU UUID: health, NVLink domain and NUMA node come from it."""
    minor: int
    numa: int | None
    mig: str | None = None
    mem_mib: int = 0
    """Memory of the device behind the ID (the MIG slice's, or the whole GPU's)."""


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    resource: str
    kind: Kind
    units: tuple[Unit, ...]
    sharing: cfg.SharingStrategy = cfg.SharingStrategy.NONE
    replicas: int = 1
    fail_requests_greater_than_one: bool = False
    by_id: dict[str, Unit] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id.update((u.id, u) for u in self.units)

    @property
    def socket_name(self) -> str:
        """`gpufleet-<resource without domain>.sock`, e.g. `gpufleet-mig-1g.10gb.sock`."""
        return f"gpufleet-{self.resource.split('/', 1)[1]}.sock"


def plan_resources(inv: NodeGpuInventory, config: cfg.AgentConfig) -> tuple[ResourcePlan, ...]:
    strategy = config.flags.mig_strategy
    mig_gpus = [g for g in inv.gpus if g.mig_enabled]
    if strategy is cfg.MigStrategy.SINGLE and mig_gpus:
        base = {ann.GPU_RESOURCE: _single_mig_units(inv, config)}
    elif strategy is cfg.MigStrategy.MIXED:
        base = {ann.GPU_RESOURCE: [_gpu_unit(g, config) for g in inv.gpus if not g.mig_enabled]}
        for g in mig_gpus:
            for s in g.mig_slices:
                base.setdefault(ann.mig_resource(s.profile), []).append(_mig_unit(g, s, config))
    else:
        base = {ann.GPU_RESOURCE: [_gpu_unit(g, config) for g in inv.gpus]}
    plans = [_replicate(name, units, config) for name, units in base.items() if units]
    known = {name for name, units in base.items() if units}
    for r in config.sharing.resources:
        if r.name not in known:
            raise PlanError(f"config: sharing resource {r.name}",
                            f"is not advertised on this node (it has {', '.join(sorted(known)) or 'no GPUs'})")
    whole = [g for g in inv.gpus if not g.mig_enabled]
    if config.gpufleet.fractions and whole:
        plans.append(ResourcePlan(ann.GPU_MILLI_RESOURCE, Kind.MILLI, tuple(
            Unit(f"{g.uuid}::{k}", _target(g, None, config), g.uuid, g.minor, g.numa_node, None, g.mem_mib)
            for g in whole for k in range(ann.WHOLE_MILLI)), config.sharing.strategy))
    return tuple(plans)


def fraction_memory_mib(inv: NodeGpuInventory, config: cfg.AgentConfig) -> int:
    """Node capacity of `gpufleet.io/gpu-memory`: the memory of the GPUs offering fractions."""
    if not config.gpufleet.fractions:
        return 0
    return sum(g.mem_mib for g in inv.gpus if not g.mig_enabled)


def _single_mig_units(inv: NodeGpuInventory, config: cfg.AgentConfig) -> list[Unit]:
    where = "config: flags.migStrategy single"
    if any(not g.mig_enabled for g in inv.gpus):
        raise PlanError(where, "needs every GPU in MIG mode, but some are not; use mixed")
    profiles = {s.profile for g in inv.gpus for s in g.mig_slices}
    if len(profiles) != 1 or any(not g.mig_slices for g in inv.gpus):
        raise PlanError(where, f"needs one MIG profile on every GPU, found {sorted(profiles) or 'empty GPUs'}; use mixed")
    return [_mig_unit(g, s, config) for g in inv.gpus for s in g.mig_slices]


def _replicate(name: str, units: list[Unit], config: cfg.AgentConfig) -> ResourcePlan:
    kind = Kind.MIG if units[0].mig else Kind.GPU
    sharing = config.sharing
    replicas = sharing.replicas_for(name)
    if replicas == 1:
        return ResourcePlan(name, kind, tuple(units))
    if sharing.strategy is cfg.SharingStrategy.MPS and kind is Kind.MIG:
        raise PlanError(f"config: sharing.mps resource {name}", "MPS sharing is not supported for MIG devices")
    resource = name + ann.SHARED_SUFFIX if sharing.rename_by_default else name
    replicated = tuple(Unit(f"{u.id}::{k}", u.target, u.gpu, u.minor, u.numa, u.mig, u.mem_mib)
                       for u in units for k in range(replicas))
    return ResourcePlan(resource, kind, replicated, sharing.strategy, replicas,
                        sharing.fail_requests_greater_than_one)


def _target(g: GpuEntry, s: MigSlice | None, config: cfg.AgentConfig) -> str:
    if config.flags.plugin.device_id_strategy == "index":
        return f"{g.index}:{g.mig_slices.index(s)}" if s else str(g.index)
    return s.uuid if s else g.uuid


def _gpu_unit(g: GpuEntry, config: cfg.AgentConfig) -> Unit:
    target = _target(g, None, config)
    return Unit(target, target, g.uuid, g.minor, g.numa_node, None, g.mem_mib)


def _mig_unit(g: GpuEntry, s: MigSlice, config: cfg.AgentConfig) -> Unit:
    target = _target(g, s, config)
    return Unit(target, target, g.uuid, g.minor, g.numa_node, s.uuid, s.mem_mib)
