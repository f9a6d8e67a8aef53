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
    """Discovery and health events of one node's GPUs, and carving MIG devices on them.

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

    def create_mig_instance(self, gpu_uuid: str, profile_id: int, start: int, size: int) -> dev.CarvedInstance:
        """Carve a MIG device: a GPU instance of profile `profile_id` (NVML's id, as in
        `MigProfileInfo.profile_id`) at memory slices `start`..`start + size - 1`, and one compute
        instance spanning all of it. Needs root.

        Raises BackendError naming the GPU, profile and placement when the GPU is unknown, MIG mode
        is off, the profile or placement is not one the GPU offers, or the placement is taken (an
        instance there or overlapping it). On any failure nothing is left carved: a GPU instance
        whose compute instance could not be created is destroyed again.
        """
        ...

    def destroy_mig_instance(self, gpu_uuid: str, mig_uuid: str) -> bool:
        """Destroy the MIG device `mig_uuid` of GPU `gpu_uuid`: its compute instance, then its GPU
        instance. False when the GPU has no such MIG device (already destroyed, or the node
        rebooted): nothing is touched then, never an instance found some other way. Needs root.

        Raises BackendError when the device is busy (a process runs on it) or NVML refuses; the
        device is then left as it was.
        """
        ...

    def close(self) -> None:
        """Release the driver (idempotent)."""
        ...
