"""What a container gets for its devices: environment, mounts, device nodes, CDI names.

Pure: `allocate(plan, ids, config, grant=...)` returns a `ContainerAllocation` value that
the gRPC layer copies into a `ContainerAllocateResponse`. The output follows NVIDIA's
plugin for each `deviceListStrategy` (envvar, volume-mounts, cdi-annotations, cdi-cri),
`passDeviceSpecs` and MPS, and adds what fractions need:

* MPS replicas get per-container limits of `1/replicas` of the GPU's memory and threads,
  set with the MPS client variables CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (per visible device
  ordinal) and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. NVIDIA's plugin relies on the daemon's
  defaults alone, which are the same for every client; setting them per container is what
  lets a fraction get a share of its own.
* A fraction (`FractionGrant`) gets the scheduler's GPU, a memory limit when the pod asked
  for `gpufleet.io/gpu-memory`, a thread share of ceil(milli/10) percent under MPS, and
  GPUFLEET_GPU_MILLI / GPUFLEET_GPU_MEMORY_MIB so frameworks can limit themselves where MPS
  does not run (time slicing cannot enforce either limit).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

from gpufleet.agent import config as cfg
from gpufleet.agent.plan import Kind, ResourcePlan, Unit
from gpufleet.model import annotations as ann

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CONTAINER_DEVICES_DIR = "/var/run/nvidia-container-devices"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
MPS_CONTAINER_ROOT = "/mps"
MPS_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MPS_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
FRACTION_MILLI_ENV = "GPUFLEET_GPU_MILLI"
FRACTION_MEMORY_ENV = "GPUFLEET_GPU_MEMORY_MIB"


class AllocationError(Exception):
    """The request cannot be served; the kubelet fails the pod with UnexpectedAdmissionError."""


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class FractionGrant:
    """The scheduler's choice for a fractional pod: the GPU (as a unit) and the per-GPU share."""

    unit: Unit
    milli: int
    mem_mib: int


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def allocate(plan: ResourcePlan, ids: list[str], config: cfg.AgentConfig, *, grant: FractionGrant | None = None,
             dev_exists: Callable[[str], bool] = lambda path: True) -> ContainerAllocation:
    unknown = [i for i in ids if i not in plan.by_id]
    if unknown:
        raise AllocationError(f"{plan.resource}: unknown device IDs {unknown[:3]}")
    if plan.replicas > 1 and plan.fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationError(f"{plan.resource}: maximum request size for shared resources is 1, got {len(ids)}")
    if plan.kind is Kind.MILLI:
        if grant is None:
            raise AllocationError(f"{plan.resource}: no scheduler assignment for this fraction")
        units = [grant.unit]
    else:
        units = list({plan.by_id[i].target: plan.by_id[i] for i in ids}.values())
    flags = config.flags.plugin
    envs, mounts, annotations, cdi = _device_list([u.target for u in units], flags, ids)
    if plan.sharing is cfg.SharingStrategy.MPS:
        mounts += _mps(plan, units, config, grant, envs)
    if grant is not None:
        envs[FRACTION_MILLI_ENV] = str(grant.milli)
        envs[FRACTION_MEMORY_ENV] = str(grant.mem_mib)
    specs = _device_specs(units, config.flags.nvidia_dev_root, dev_exists) if flags.pass_device_specs else ()
    return ContainerAllocation(envs, tuple(mounts), specs, annotations, tuple(cdi))


def mps_resource(config: cfg.AgentConfig) -> str:
    """The resource whose MPS daemon fractions share: the first MPS-replicated one."""
    name = config.sharing.resources[0].name if config.sharing.resources else ann.GPU_RESOURCE
    return name + ann.SHARED_SUFFIX if config.sharing.rename_by_default else name


def _device_list(targets: list[str], flags: cfg.PluginFlags,
                 ids: list[str]) -> tuple[dict[str, str], list[Mount], dict[str, str], list[str]]:
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    names = [f"nvidia.com/gpu={t}" for t in targets]
    for strategy in flags.device_list_strategy:
        if strategy == "envvar":
            envs[VISIBLE_DEVICES] = ",".join(targets)
        elif strategy == "volume-mounts":
            envs[VISIBLE_DEVICES] = CONTAINER_DEVICES_DIR
            mounts += [Mount(f"{CONTAINER_DEVICES_DIR}/{t}", "/dev/null", True) for t in targets]
        elif strategy == "cdi-annotations":
            digest = hashlib.sha1(",".join(sorted(ids)).encode()).hexdigest()[:12]
            annotations[f"{flags.cdi_annotation_prefix}gpufleet-agent_{digest}"] = ",".join(names)
        else:  # cdi-cri
            cdi += names
    if VISIBLE_DEVICES not in envs:
        envs[VISIBLE_DEVICES] = "void"  # CDI alone injects the devices; keep the hook from adding all
    return envs, mounts, annotations, cdi


def _mps(plan: ResourcePlan, units: list[Unit], config: cfg.AgentConfig, grant: FractionGrant | None,
         envs: dict[str, str]) -> list[Mount]:
    resource = mps_resource(config) if plan.kind is Kind.MILLI else plan.resource
    pipe = f"{MPS_CONTAINER_ROOT}/{resource}/pipe"
    root = config.flags.mps_root.rstrip("/")
    envs[MPS_PIPE_DIRECTORY] = pipe
    if grant is not None:
        if grant.mem_mib:
            envs[MPS_MEMORY_LIMIT] = f"0={grant.mem_mib}M"
        envs[MPS_THREAD_PERCENTAGE] = str(min(100, max(1, -(-grant.milli // 10))))
    else:
        envs[MPS_MEMORY_LIMIT] = ",".join(f"{i}={u.mem_mib // plan.replicas}M" for i, u in enumerate(units))
        envs[MPS_THREAD_PERCENTAGE] = str(100 // plan.replicas)
    return [Mount(pipe, f"{root}/{resource}/pipe"), Mount("/dev/shm", f"{root}/shm")]


def _device_specs(units: list[Unit], dev_root: str, dev_exists: Callable[[str], bool]) -> tuple[DeviceNode, ...]:
    root = dev_root.rstrip("/")
    paths = [p for p in CONTROL_DEVICES if dev_exists(root + p)]
    paths += list(dict.fromkeys(f"/dev/nvidia{u.minor}" for u in units))
    return tuple(DeviceNode(p, root + p) for p in paths)
