"""Injected failures for the time-driven replay: what fails, how often, for how long, and how
the cluster reacts (the fault policy).

Default rates come from the one large public account of failures in GPU training at scale:
Llama 3 405B pre-training (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4 and
Table 5): 16,384 H100 GPUs for 54 days, 419 unexpected interruptions, 58.7 % of them GPU
issues and about 78 % confirmed or suspected hardware. Scaled per GPU-hour of existence,
that is 419 / (16,384 x 54 x 24) = 1.97e-5 interruptions per GPU-hour. The classes below
are Table 5's hardware rows, with their shares of the 419:
- device classes (one GPU goes, 58.7 % in all): faulty GPU (XID 79, fallen off the bus),
  HBM3 memory (XID 48 / 95 uncontained ECC), SRAM memory (XID 94 contained ECC), GPU system
  processor (XID 119 / 120, GSP), thermal interface and sensor, silent data corruption;
- node classes (the host goes, 21.1 %): network switch or cable, host maintenance, NIC,
  SSD, power supply, chassis, IO expansion board, CPU, system memory.
Software bugs, NCCL watchdog timeouts and dependencies (the rest) take no capacity away and
hit every policy alike; they are not modelled. Repair times are not in the paper: the
defaults below are assumptions (a GPU reset for contained errors, hours for a host, a day
for a part that needs replacing), stated in docs/results.md and configurable.

Fault times are a Poisson process over the cluster's GPUs, drawn from their own random
stream, so every policy replayed with one seed meets the same faults at the same moments.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, Sequence

from gpufleet.core.faults import DeviceFault, Fault, NodeFault
from gpufleet.model import NodeInfo

LLAMA3_INTERRUPTIONS = 419
LLAMA3_GPU_HOURS = 16_384 * 54 * 24
HOUR = 3600.0

Scope = Literal["device", "node"]


@dataclass(frozen=True, slots=True)
class FaultClass:
    name: str
    scope: Scope
    share: float
    """Fraction of Llama 3's 419 interruptions."""
    repair_s: float
    xid: int | None = None

    @property
    def reason(self) -> str:
        return f"XID {self.xid} ({self.name})" if self.xid is not None else self.name


DEFAULT_CLASSES: tuple[FaultClass, ...] = (
    FaultClass("faulty GPU, fallen off the bus", "device", 0.301, 24 * HOUR, 79),
    FaultClass("HBM3 memory, uncontained ECC", "device", 0.172, 2 * HOUR, 95),
    FaultClass("SRAM memory, contained ECC", "device", 0.045, 0.5 * HOUR, 94),
    FaultClass("GPU system processor", "device", 0.041, 1 * HOUR, 119),
    FaultClass("GPU thermal interface or sensor", "device", 0.014, 24 * HOUR),
    FaultClass("silent data corruption", "device", 0.014, 24 * HOUR),
    FaultClass("network switch or cable", "node", 0.084, 2 * HOUR),
    FaultClass("host maintenance", "node", 0.076, 4 * HOUR),
    FaultClass("NIC", "node", 0.017, 8 * HOUR),
    FaultClass("SSD", "node", 0.007, 24 * HOUR),
    FaultClass("power supply", "node", 0.007, 24 * HOUR),
    FaultClass("server chassis", "node", 0.005, 24 * HOUR),
    FaultClass("IO expansion board", "node", 0.005, 24 * HOUR),
    FaultClass("CPU", "node", 0.005, 24 * HOUR),
    FaultClass("system memory", "node", 0.005, 24 * HOUR),
)


@dataclass(frozen=True, slots=True)
class FaultModel:
    classes: tuple[FaultClass, ...] = DEFAULT_CLASSES
    rate_scale: float = 1.0
    """Multiplies every class's rate (1 = Llama 3's rate per GPU-hour)."""

    def __post_init__(self) -> None:
        if not (self.rate_scale >= 0 and math.isfinite(self.rate_scale)):
            raise ValueError(f"fault rate scale must be a non-negative number, got {self.rate_scale}")
        for c in self.classes:
            if not (c.share >= 0 and c.repair_s >= 0):
                raise ValueError(f"fault class {c.name!r}: share and repair time must be non-negative")

    def per_gpu_hour(self) -> float:
        return self.rate_scale * sum(c.share for c in self.classes) * LLAMA3_INTERRUPTIONS / LLAMA3_GPU_HOURS


@dataclass(frozen=True, slots=True)
class FaultPolicy:
    """How the cluster reacts to a fault. Delays are from the fault to the moment the job's
    pods are released (its job controller then recreates them and they wait to be placed)."""

    name: str
    isolate: Scope
    """What a device fault takes out of service: the device, or its whole node (drained)."""
    device_repaired: bool
    """False: a failed device stays out until its node restarts (NVIDIA's plugin)."""
    gang_release_s: float
    """Until the surviving members of a gang that lost one are released."""
    node_release_s: float
    """Until the pods of a failed node are released (detection included)."""
    avoid_recent: bool
    """Whether the scheduler scores down nodes with recent faults (RecentFaults)."""


NODE_MONITOR_GRACE_S = 40.0
"""kube-controller-manager's --node-monitor-grace-period: a dead node is NotReady after it."""
GPUFLEET_GRACE_S = 30.0
"""gpufleet's grace before evicting the rest of a gang whose member lost its GPU (the live
scheduler's --device-fault-grace). For a NotReady node it waits as long as Kubernetes does
(--node-fault-grace, tolerationSeconds), then evicts the node's pods and their gang mates."""
NCCL_TIMEOUT_S = 600.0
"""PyTorch's default NCCL process-group timeout: survivors of a dead rank hang this long."""
TOLERATION_S = 300.0
"""Kubernetes' default tolerationSeconds for not-ready/unreachable: pods stay bound this long."""

POLICIES: dict[str, FaultPolicy] = {
    "gpufleet": FaultPolicy("gpufleet", "device", True, GPUFLEET_GRACE_S, NODE_MONITOR_GRACE_S + TOLERATION_S,
                            True),
    "drain-node": FaultPolicy("drain-node", "node", True, NCCL_TIMEOUT_S, NODE_MONITOR_GRACE_S + TOLERATION_S,
                              False),
    "unhealthy-forever": FaultPolicy("unhealthy-forever", "device", False, NCCL_TIMEOUT_S,
                                     NODE_MONITOR_GRACE_S + TOLERATION_S, False),
}
"""gpufleet; an operator who cordons and drains a node on any GPU fault and uncordons it once
repaired; NVIDIA's device plugin (the device is Unhealthy until the plugin restarts, with
its node). Neither baseline knows gangs: survivors hang until NCCL times out."""


@dataclass(frozen=True, slots=True)
class InjectedFault:
    time_s: float
    fault: Fault
    cls: FaultClass


class FaultInjector:
    """Draws the next fault, lazily, from a stream seeded independently of scheduling (or
    replays a script)."""

    def __init__(self, model: FaultModel, nodes: Sequence[NodeInfo], seed: int,
                 script: Sequence[InjectedFault] | None = None) -> None:
        self.model = model
        self.script = sorted(script, key=lambda f: f.time_s) if script is not None else None
        """Scripted faults not yet handed out, in time order."""
        self.rng = random.Random(f"faults-{seed}")
        self.gpus = [(n.name, j) for n in nodes for j in range(len(n.gpus))]
        self.node_weights = [len(n.gpus) for n in nodes]
        self.nodes = [n.name for n in nodes]
        per_s = model.per_gpu_hour() * len(self.gpus) / HOUR
        self.rate_s = per_s
        self.weights = [c.share for c in model.classes]

    def next_after(self, t: float) -> InjectedFault | None:
        if self.script is not None:
            return self.script.pop(0) if self.script else None
        if self.rate_s <= 0 or not self.gpus or sum(self.weights) <= 0:
            return None
        when = t + self.rng.expovariate(self.rate_s)
        cls = self.rng.choices(self.model.classes, self.weights)[0]
        if cls.scope == "device":
            node, gpu = self.gpus[self.rng.randrange(len(self.gpus))]
            return InjectedFault(when, DeviceFault(node, gpu, cls.reason), cls)
        node = self.rng.choices(self.nodes, self.node_weights)[0]
        return InjectedFault(when, NodeFault(node, cls.reason), cls)


@dataclass(frozen=True, slots=True)
class FaultSetup:
    """What the replay needs to inject faults: the model (what fails) and the policy (the reaction)."""

    model: FaultModel
    policy: FaultPolicy
    script: tuple[InjectedFault, ...] | None = None
    """Exactly these faults instead of drawing from the model (tests, what-if scenarios)."""
