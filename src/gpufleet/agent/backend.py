"""The seam between the agent and the GPUs: a `GpuBackend` protocol with NVML and fake implementations.

Errors raised by a backend form a small tree whose type says what the caller can do::

    BackendError                 the backend failed; the message says which call and why
    └── BackendUnavailableError  no usable driver on this machine (no libnvidia-ml, no GPU):
                                 a user mistake or a node without GPUs, reported in one line

Every NVML exception is translated into one of these at the NVML boundary, so nothing
above it ever sees a `pynvml.NVMLError`.
"""

from __future__ import annotations

from typing import Protocol

from gpufleet.agent import devices as dev


class BackendError(RuntimeError):
    """A backend call failed."""


class BackendUnavailableError(BackendError):
    """No GPU driver is usable on this machine."""


class GpuBackend(Protocol):
    """Discovery and health events of one node's GPUs.

    Implementations are used from two threads: discovery from the agent's main thread and
    `wait_event` from the health monitor; they must allow that.
    """

    def system(self) -> dev.SystemInfo:
        """Driver and CUDA versions and machine type. Raises BackendError."""
        ...

    def devices(self) -> tuple[dev.DeviceInfo, ...]:
        """Every GPU, ordered by index. Raises BackendError."""
        ...

    def wait_event(self, timeout_s: float) -> dev.HealthEvent | None:
        """Block up to `timeout_s` for the next health event; None when none came.

        A failure of the wait itself is returned as an `EventKind.LOST` event rather than
        raised, because the caller's answer (mark every GPU unhealthy) is the same.
        """
        ...

    def set_exclusive_process(self, gpu_uuid: str, exclusive: bool) -> None:
        """Compute mode EXCLUSIVE_PROCESS (True) or DEFAULT (False), as for MPS. Needs root. Raises BackendError."""
        ...

    def close(self) -> None:
        """Release the driver (idempotent)."""
        ...
