"""GPU feature discovery's node labels, computed purely from the inventory and the config.

Names and values follow NVIDIA's GFD (`internal/lm`): version labels (new and deprecated
names), `mig.capable`, `mps.capable`, `gpu.sharing-strategy`, `gpu.mode`, `gpu.machine`,
full-GPU labels under `nvidia.com/gpu.*` counted per product name, and per-strategy MIG
labels (`single` overrides `nvidia.com/gpu.*`, `mixed` adds `nvidia.com/mig-<profile>.*`).
Deliberate differences, listed in docs/labels.md: no `gfd.timestamp` (it would rewrite the
node every cycle for no scheduling value), `gpu.clique`/`imex-domain` are not produced
(single-node NVLink only), MIG label keys write `+` as `.` as resource names do, and
`renameByDefault` counts as renaming for the `-SHARED` product suffix.
"""

from __future__ import annotations

from collections import Counter

from gpufleet.agent import config as cfg
from gpufleet.agent.inventory import GpuEntry, MigSlice, NodeGpuInventory
from gpufleet.model import annotations as ann

P = "nvidia.com/"


def gfd_labels(inv: NodeGpuInventory, config: cfg.AgentConfig) -> dict[str, str]:
    if not inv.gpus:
        return {}
    labels = _versions(inv)
    labels[P + "mig.capable"] = _bool(any(g.mig_capable for g in inv.gpus))
    mps = config.sharing.strategy is cfg.SharingStrategy.MPS
    labels[P + "mps.capable"] = _bool(mps and not any(g.mig_enabled for g in inv.gpus))
    labels[P + "gpu.sharing-strategy"] = config.sharing.strategy.value
    modes = {g.mode for g in inv.gpus}
    labels[P + "gpu.mode"] = modes.pop() if len(modes) == 1 else "unknown"
    if inv.machine:
        labels[P + "gpu.machine"] = inv.machine.replace(" ", "-")
    labels.update(_full_gpu_labels(inv, config))
    strategy = config.flags.mig_strategy
    if strategy is not cfg.MigStrategy.NONE:
        labels[P + "mig.strategy"] = strategy.value
        labels.update(_single_labels(inv, config) if strategy is cfg.MigStrategy.SINGLE
                      else _mixed_labels(inv, config))
    return labels


def _versions(inv: NodeGpuInventory) -> dict[str, str]:
    parts = inv.driver_version.split(".")
    major, minor, rev = parts[0], parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = (str(v) for v in inv.cuda_version)
    return {
        P + "cuda.driver.major": major, P + "cuda.driver.minor": minor, P + "cuda.driver.rev": rev,
        P + "cuda.runtime.major": cuda_major, P + "cuda.runtime.minor": cuda_minor,
        P + "cuda.driver-version.major": major, P + "cuda.driver-version.minor": minor,
        P + "cuda.driver-version.revision": rev, P + "cuda.driver-version.full": inv.driver_version,
        P + "cuda.runtime-version.major": cuda_major, P + "cuda.runtime-version.minor": cuda_minor,
        P + "cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


def _full_gpu_labels(inv: NodeGpuInventory, config: cfg.AgentConfig) -> dict[str, str]:
    """GFD counts GPUs per product name; a GPU without MIG mode sets the sharing-aware labels."""
    counts = Counter(g.product for g in inv.gpus)
    labels: dict[str, str] = {}
    ordered = sorted(inv.gpus, key=lambda g: not g.mig_enabled)  # full GPUs last: they override
    for g in ordered:
        sharing = None if g.mig_enabled else config
        labels.update(_resource(ann.GPU_RESOURCE, sharing, counts[g.product], [g.product]))
        labels.update(_architecture(g))
        if g.mem_mib:
            labels[P + "gpu.memory"] = str(g.mem_mib)
    return labels


def _single_labels(inv: NodeGpuInventory, config: cfg.AgentConfig) -> dict[str, str]:
    mig_gpus = [g for g in inv.gpus if g.mig_enabled]
    if not mig_gpus:
        return {}
    slices = [s for g in mig_gpus for s in g.mig_slices]
    reason_invalid = (any(not g.mig_slices for g in mig_gpus) or len(mig_gpus) != len(inv.gpus)
                      or len({s.profile for s in slices}) != 1)
    if reason_invalid:
        key = P + "gpu."
        return {key + "product": f"{mig_gpus[0].product}-MIG-INVALID", key + "count": "0",
                key + "replicas": "0", key + "memory": "0"}
    return _mig_resource(ann.GPU_RESOURCE, config, mig_gpus[0], slices[0], len(slices))


def _mixed_labels(inv: NodeGpuInventory, config: cfg.AgentConfig) -> dict[str, str]:
    first: dict[str, tuple[GpuEntry, MigSlice]] = {}
    counts: Counter[str] = Counter()
    for g in inv.gpus:
        for s in g.mig_slices:
            first.setdefault(s.profile, (g, s))
            counts[s.profile] += 1
    labels: dict[str, str] = {}
    for profile, (g, s) in first.items():
        labels.update(_mig_resource(ann.mig_resource(profile), config, g, s, counts[profile]))
    return labels


def _mig_resource(resource: str, config: cfg.AgentConfig, g: GpuEntry, s: MigSlice, count: int) -> dict[str, str]:
    labels = _resource(resource, config, count, [g.product, "MIG", s.profile])
    attributes = [("memory", s.mem_mib), ("multiprocessors", s.multiprocessors),
                  ("slices.gi", s.gi_slices), ("slices.ci", s.ci_slices)]
    attributes += [(f"engines.{name}", n) for name, n in s.engines]
    labels.update((f"{resource}.{key}", str(value)) for key, value in attributes)
    return labels


def _resource(resource: str, config: cfg.AgentConfig | None, count: int, parts: list[str]) -> dict[str, str]:
    """GFD's base labels of one resource: product (with -SHARED), count and replicas."""
    replicas = 0 if config is None else config.sharing.replicas_for(resource)
    shared = replicas > 1
    product = "-".join(p.replace(" ", "-") for p in parts if p)
    if shared and config is not None and not config.sharing.rename_by_default:
        product += "-SHARED"
    return {f"{resource}.product": product, f"{resource}.count": str(count),
            f"{resource}.replicas": str(replicas if config is None or shared else 1)}


def _architecture(g: GpuEntry) -> dict[str, str]:
    major, minor = g.compute
    if major == 0:
        return {}
    return {P + "gpu.family": g.family, P + "gpu.compute.major": str(major), P + "gpu.compute.minor": str(minor)}


def _bool(value: bool) -> str:
    return "true" if value else "false"
