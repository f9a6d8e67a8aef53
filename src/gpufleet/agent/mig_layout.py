"""A MIG layout change on one node: the agent's half of demand-driven repartitioning (issue 22, item 2).

The scheduler chooses new MIG geometries from the pending demand and writes the layout it
wants on the node, in the annotation `gpufleet.io/mig-layout`:

    {"generation": 7, "gpus": {"GPU-1d7a...": ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]}}

Each instance is `<profile>@<first memory slice>`, in the profile names and placements NVML
reports (`nvidia-smi mig -lgipp`). GPUs not named keep their layout. The agent destroys the
instances that are not wanted and creates the missing ones (a GPU instance with one compute
instance spanning it, `GpuBackend.create_mig_instance`), then offers the new devices to the
kubelet and in its inventory. It reports the outcome in `gpufleet.io/mig-layout-state`:

    {"generation": 7, "state": "success"}                 or
    {"generation": 7, "state": "failed", "message": "..."}

The states are the ones NVIDIA's MIG manager uses for `nvidia.com/mig.config.state`. The MIG
manager applies a named whole-node config and stops every GPU client first. This layout
changes single instances and never touches one in use: an instance that a pod or prepared
claim holds, or that runs a process, is refused and the whole change is left undone. MIG
mode itself is not switched (that can need a GPU reset); a GPU with MIG off is refused.

A change is all or nothing per GPU. When a destroy or a create fails, what was created is
destroyed and what was destroyed is created again at its placement, so the GPU returns to
its old layout. Recreated instances get new MIG UUIDs, which is harmless because they were
idle. If even that rollback fails, the message says which instances are missing.

`parse` and `diff` are pure (the inventory in, the change out); `apply` drives the backend.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from gpufleet.agent import devices as dev
from gpufleet.agent.backend import BackendError, GpuBackend
from gpufleet.agent.inventory import GpuEntry, MigOption, MigSlice
from gpufleet.model import annotations as ann

log = logging.getLogger(__name__)

LAYOUT_ANNOTATION, STATE_ANNOTATION = ann.MIG_LAYOUT_ANNOTATION, ann.MIG_LAYOUT_STATE_ANNOTATION
SUCCESS, FAILED = "success", "failed"


class LayoutError(ValueError):
    """The layout cannot be applied; the message names the node's GPU and the reason."""


@dataclass(frozen=True, slots=True, order=True)
class Placed:
    """One MIG instance: a profile at its first memory slice."""

    profile: str
    start: int

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


@dataclass(frozen=True, slots=True)
class Desired:
    generation: int
    gpus: Mapping[str, tuple[Placed, ...]]


@dataclass(frozen=True, slots=True)
class Change:
    """What turns one GPU's layout into the wanted one."""

    gpu: str
    destroy: tuple[MigSlice, ...]
    create: tuple[tuple[MigOption, int, int], ...]
    """(profile, start, size) of each instance to create."""

    @property
    def empty(self) -> bool:
        return not self.destroy and not self.create


def parse(text: str) -> Desired:
    """The annotation's value; LayoutError naming what is wrong with it."""
    where = f"annotation {LAYOUT_ANNOTATION}"
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LayoutError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) - {"generation", "gpus"}:
        raise LayoutError(f'{where}: must be an object with "generation" and "gpus" only')
    generation, gpus = data.get("generation"), data.get("gpus")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        raise LayoutError(f"{where}: generation must be a positive integer, not {generation!r}")
    if not isinstance(gpus, dict):
        raise LayoutError(f'{where}: "gpus" must map GPU UUIDs to lists of "<profile>@<start>"')
    return Desired(generation, {str(uuid): _instances(f"{where}: gpus[{uuid}]", items)
                                for uuid, items in gpus.items()})


def _instances(where: str, items: Any) -> tuple[Placed, ...]:
    if not isinstance(items, list):
        raise LayoutError(f'{where}: must be a list of "<profile>@<start>"')
    out = []
    for i, item in enumerate(items):
        profile, at, start = item.partition("@") if isinstance(item, str) else ("", "", "")
        if not at or not profile or not start.isdigit():
            raise LayoutError(f'{where}[{i}]: {item!r} is not "<profile>@<start>" (e.g. "1g.10gb@3")')
        out.append(Placed(profile, int(start)))
    return tuple(sorted(out))


def current(gpu: GpuEntry) -> dict[Placed, MigSlice]:
    """The GPU's instances by placement. Instances whose placement is unknown, or with a compute
    instance smaller than its GPU instance, cannot be kept: they are keyed so that no wanted
    instance matches them."""
    return {Placed(s.profile if s.ci_slices == s.gi_slices else f"~{s.profile}",
                   s.placement_start if s.placement_start is not None else -1 - i): s
            for i, s in enumerate(gpu.mig_slices)}


def diff(gpu: GpuEntry, want: tuple[Placed, ...]) -> Change:
    """The change from the GPU's layout to `want`; LayoutError if `want` is not a layout this
    GPU can hold (MIG off, a profile it does not offer, a placement the profile does not
    allow, two instances on the same memory slice, more instances than the profile allows)."""
    where = f"GPU {gpu.uuid}"
    if not gpu.mig_enabled:
        raise LayoutError(f"{where}: MIG mode is off (the agent does not switch it: that can need a GPU reset)")
    options = {o.profile: o for o in gpu.mig_options}
    held: dict[int, Placed] = {}
    for p in want:
        option = options.get(p.profile)
        if option is None:
            raise LayoutError(f"{where}: {p}: the GPU offers no profile {p.profile!r} "
                              f"(it offers {', '.join(options) or 'none'})")
        size = next((n for s, n in option.placements if s == p.start), None)
        if size is None:
            raise LayoutError(f"{where}: {p}: {p.profile} may start at memory slice "
                              f"{', '.join(str(s) for s, _ in option.placements)}, not {p.start}")
        for m in range(p.start, p.start + size):
            if m in held:
                raise LayoutError(f"{where}: {p} and {held[m]} both hold memory slice {m}")
            held[m] = p
        count = sum(1 for q in want if q.profile == p.profile)
        if count > option.instances:
            raise LayoutError(f"{where}: {count} x {p.profile}; the GPU holds at most {option.instances}")
    have = current(gpu)
    destroy = tuple(s for p, s in sorted(have.items(), key=lambda kv: (kv[0].start, kv[0].profile)) if p not in want)
    create = tuple((options[p.profile], p.start, _size(options[p.profile], p.start)) for p in want if p not in have)
    return Change(gpu.uuid, destroy, create)


def _size(option: MigOption, start: int) -> int:
    return next(n for s, n in option.placements if s == start)


def apply(backend: GpuBackend, change: Change, in_use: frozenset[str]) -> tuple[dev.CarvedInstance, ...]:
    """Make the change on the GPU; the instances created. Raises LayoutError, after putting
    the old layout back, when an instance to destroy is in use or the backend refuses a step."""
    where = f"GPU {change.gpu}"
    busy = [s for s in change.destroy if s.uuid in in_use]
    if busy:
        raise LayoutError(f"{where}: would destroy {', '.join(f'{s.profile} {s.uuid}' for s in busy)}, "
                          "in use by a pod or a prepared claim; nothing changed")
    for s in change.destroy:
        if s.profile_id is None or s.placement_start is None or s.placement_size is None:
            raise LayoutError(f"{where}: MIG device {s.uuid} has no known profile id or placement, so it "
                              "could not be recreated if the change failed; nothing changed")
    destroyed: list[MigSlice] = []
    created: list[dev.CarvedInstance] = []
    try:
        for s in change.destroy:
            if backend.destroy_mig_instance(change.gpu, s.uuid):
                destroyed.append(s)
        for option, start, size in change.create:
            if option.profile_id is None:
                raise BackendError(f"{where}: profile {option.profile} has no NVML profile id")
            created.append(backend.create_mig_instance(change.gpu, option.profile_id, start, size))
    except BackendError as exc:
        lost = _roll_back(backend, change.gpu, destroyed, created)
        restored = ("the old layout is back" if not lost else
                    f"could not restore {', '.join(lost)}: the GPU is left without them")
        raise LayoutError(f"{exc}; {restored}") from None  # the backend's message names the GPU
    return tuple(created)


def _roll_back(backend: GpuBackend, gpu: str, destroyed: list[MigSlice],
               created: list[dev.CarvedInstance]) -> list[str]:
    """Undo a partial change, newest step first; the instances that could not be put back."""
    lost = []
    for c in reversed(created):
        try:
            backend.destroy_mig_instance(gpu, c.uuid)
        except BackendError as exc:
            log.error("GPU %s: rolling back: cannot destroy the new MIG device %s: %s", gpu, c.uuid, exc)
    for s in reversed(destroyed):
        assert s.profile_id is not None and s.placement_start is not None and s.placement_size is not None
        try:
            backend.create_mig_instance(gpu, s.profile_id, s.placement_start, s.placement_size)
        except BackendError as exc:
            log.error("GPU %s: rolling back: cannot recreate %s@%d: %s", gpu, s.profile, s.placement_start, exc)
            lost.append(f"{s.profile}@{s.placement_start}")
    return lost


def state(generation: int, error: str | None) -> str:
    """The value of STATE_ANNOTATION."""
    body: dict[str, Any] = {"generation": generation, "state": FAILED if error else SUCCESS}
    if error:
        body["message"] = error
    return json.dumps(body, separators=(",", ":"))
