"""XID fault classes: what the agent does with each kind of GPU fault.

NVIDIA's device plugin knows two answers, ignore (application XIDs) or unhealthy forever.
gpufleet adds a third: a fault whose class is *recoverable* marks the device unhealthy, and
the device comes back once no new fault arrived for a quiet period. The classes follow the
"immediate action" column of NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors):
RESTART_APP-style faults of the application are ignored, faults after which the GPU keeps
working (contained ECC errors, row-remap bookkeeping) recover, and faults that need a GPU
reset or a reboot keep the device out until the agent restarts after that reset.
`docs/health.md` carries the same table for operators.
"""

from __future__ import annotations

from enum import Enum

from gpufleet.agent.devices import EventKind


class FaultClass(str, Enum):
    APPLICATION = "application"
    """Caused by the workload; the GPU is fine. Ignored (configurable)."""
    RECOVERABLE = "recoverable"
    """Unhealthy now; healthy again after the quiet period with no new fault."""
    RESET = "reset"
    """Unhealthy until the GPU is reset and the agent restarted."""
    NODE = "node"
    """The GPU is gone from the bus (or NVML lost track of all GPUs); needs a reboot."""


CATALOG: dict[int, tuple[str, FaultClass]] = {
    13: ("Graphics engine exception", FaultClass.APPLICATION),
    31: ("GPU memory page fault", FaultClass.APPLICATION),
    43: ("GPU stopped processing (the application's channel was reset)", FaultClass.APPLICATION),
    45: ("Preemptive cleanup after a previous error", FaultClass.APPLICATION),
    48: ("Double-bit ECC error", FaultClass.RESET),
    63: ("ECC page retirement or row-remapping recorded (takes effect at reset)", FaultClass.RECOVERABLE),
    64: ("ECC page retirement or row-remapping failed", FaultClass.RESET),
    68: ("Video decoder (NVDEC) exception", FaultClass.APPLICATION),
    74: ("NVLink error", FaultClass.RESET),
    79: ("GPU has fallen off the bus", FaultClass.NODE),
    92: ("High single-bit ECC error rate", FaultClass.RECOVERABLE),
    94: ("Contained ECC error (the affected application was stopped)", FaultClass.RECOVERABLE),
    95: ("Uncontained ECC error", FaultClass.RESET),
    109: ("Context switch timeout", FaultClass.APPLICATION),
    119: ("GSP RPC timeout", FaultClass.RESET),
    120: ("GSP error", FaultClass.RESET),
    140: ("Unrecovered ECC error", FaultClass.RESET),
}
"""Documented XIDs (docs/health.md shows this table; a test keeps them equal). An XID not
listed here is treated as RESET, as NVIDIA's plugin does."""


def _xids_of(cls: FaultClass) -> tuple[int, ...]:
    return tuple(x for x, (_, c) in CATALOG.items() if c is cls)


APPLICATION_XIDS = _xids_of(FaultClass.APPLICATION)
"""Ignored by default: 13, 31, 43, 45, 68, 109, as in NVIDIA's device plugin."""
RECOVERABLE_XIDS = _xids_of(FaultClass.RECOVERABLE)
"""Recover after the quiet period by default."""
NODE_XIDS = _xids_of(FaultClass.NODE)


def classify(kind: EventKind, xid: int | None, ignored: frozenset[int],
             recoverable: frozenset[int]) -> FaultClass:
    """The class of one event under the configured XID sets."""
    if kind is EventKind.LOST:
        return FaultClass.NODE
    if kind is not EventKind.XID or xid is None:
        return FaultClass.RESET  # double-bit ECC, row-remap failure
    if xid in ignored:
        return FaultClass.APPLICATION
    if xid in recoverable:
        return FaultClass.RECOVERABLE
    return FaultClass.NODE if xid in NODE_XIDS else FaultClass.RESET
