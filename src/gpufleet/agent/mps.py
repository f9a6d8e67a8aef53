"""What the MPS control daemons of a node must be: one per MPS-shared resource, computed purely.

NVIDIA's layout (its `mps-control-daemon`, which pods of its device plugin expect too):
under the config's `flags.mpsRoot`, each resource has `<root>/<resource>/pipe` (the
`CUDA_MPS_PIPE_DIRECTORY` that clients mount) and `<root>/<resource>/log`; `<root>/shm`
is mounted into clients as `/dev/shm`.

The daemon's defaults are ceilings. On an H100 with driver 580 (docs/hardware.md) a
client asking for more pinned memory through `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` than the
daemon's default got the default; asking for less got less. Since a pod author can
override the environment the device plugin sets, the defaults are the limit that holds:
each replica's share of memory and threads, as NVIDIA's daemon sets them. Fractions
(`gpufleet.fractions`) grant shares of any size through the same daemon, so with them the
defaults are the whole GPU and only each container's environment limits it (docs/agent.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.agent import config as cfg
from gpufleet.agent.allocate import mps_resource
from gpufleet.agent.plan import Kind, ResourcePlan

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class DeviceLimit:
    device: str
    """GPU UUID: the daemon accepts an index or a UUID, and CUDA's index order need not be NVML's."""
    pinned_mem_mib: int


@dataclass(frozen=True, slots=True)
class MpsDaemonSpec:
    """One control daemon: where it lives, which GPUs it serves, and its default limits."""

    resource: str
    root: str
    gpus: tuple[str, ...]
    """GPU UUIDs, in the order of the plan."""
    thread_percentage: int
    limits: tuple[DeviceLimit, ...]
    exclusive_process: bool

    @property
    def pipe_dir(self) -> str:
        return f"{self.root}/{self.resource}/pipe"

    @property
    def log_dir(self) -> str:
        return f"{self.root}/{self.resource}/log"

    @property
    def shm_dir(self) -> str:
        return f"{self.root}/shm"

    def env(self) -> dict[str, str]:
        """The daemon's own environment (NVIDIA's daemon gets the two directories; the GPUs are ours)."""
        return {PIPE_ENV: self.pipe_dir, LOG_ENV: self.log_dir, VISIBLE_ENV: ",".join(self.gpus)}

    def default_commands(self) -> tuple[str, ...]:
        """Control commands that set the defaults, in NVIDIA's order; sent after every (re)start,
        because a restarted daemon starts without them (seen on hardware)."""
        memory = tuple(f"set_default_device_pinned_mem_limit {d.device} {d.pinned_mem_mib}M" for d in self.limits)
        return memory + (f"set_default_active_thread_percentage {self.thread_percentage}",)


@dataclass(frozen=True, slots=True)
class MpsStatus:
    managed: tuple[str, ...]
    down: dict[str, str]
    """Resource -> why its daemon is not serving."""
    retiring: dict[str, str]
    """Resource -> why its daemon has not quit yet."""


def daemon_resource(plan: ResourcePlan, config: cfg.AgentConfig) -> str | None:
    """The resource whose daemon the plan's containers talk to, or None when it uses no MPS."""
    if plan.sharing is not cfg.SharingStrategy.MPS:
        return None
    if plan.kind is Kind.MILLI:
        return mps_resource(config)
    return plan.resource if plan.replicas > 1 else None


def daemon_specs(plans: tuple[ResourcePlan, ...], config: cfg.AgentConfig) -> tuple[MpsDaemonSpec, ...]:
    """One spec per MPS-replicated resource; none when the daemons are not managed by the agent."""
    if not config.gpufleet.mps.manage_daemon:
        return ()
    fractions = any(p.kind is Kind.MILLI for p in plans)
    root = config.flags.mps_root.rstrip("/")
    specs = []
    for plan in plans:
        if plan.kind is Kind.MILLI or daemon_resource(plan, config) != plan.resource:
            continue
        whole = {u.gpu: u.mem_mib for u in plan.units}
        share = 1 if fractions else plan.replicas
        limits = tuple(DeviceLimit(gpu, mem // share) for gpu, mem in whole.items())
        specs.append(MpsDaemonSpec(plan.resource, root, tuple(whole), 100 // share, limits,
                                   config.gpufleet.mps.exclusive_process))
    return tuple(specs)
