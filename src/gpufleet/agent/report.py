"""What the agent writes on its node, as one `NodePatch` computed purely from its state.

* GFD labels (`labels.gfd_labels`); labels the agent set before and no longer computes are
  removed, labels it never set are left alone.
* The `gpufleet.io/gpu-inventory` annotation, with each GPU's health. The contract has no
  per-MIG-slice health, so a faulty MIG device reports its whole GPU unhealthy: the
  scheduler then avoids the GPU's healthy slices too, rather than placing on the broken one.
* The node condition `GpuUnhealthy` (True while any device is faulty; the message names
  each device, its fault and class), always written so that it also clears.
* One taint per faulty device, `unhealthy.gpufleet.io/<device UUID>=<fault>`, with the
  configured effect (default PreferNoSchedule: the node's other GPUs stay usable, while
  the scheduler, reading the inventory annotation, avoids the faulty one exactly).
* Capacity `gpufleet.io/gpu-memory` in MiB when fractions are on, so the kubelet admits
  pods that ask for a memory cap; removed when they are off.
* The node condition `GpuMpsDaemonDown` (True while an MPS control daemon the agent runs
  does not answer; the message names the resource and why), always written so that it clears.
"""

from __future__ import annotations

from typing import Mapping

from gpufleet.agent import config as cfg
from gpufleet.agent.health import Fault
from gpufleet.agent.inventory import NodeGpuInventory, to_annotation
from gpufleet.agent.kube import NodeCondition, NodePatch
from gpufleet.agent.labels import gfd_labels
from gpufleet.agent.mps import MpsStatus
from gpufleet.agent.plan import fraction_memory_mib
from gpufleet.model import Taint, TaintEffect
from gpufleet.model import annotations as ann

CONDITION_TYPE = "GpuUnhealthy"
MPS_CONDITION_TYPE = "GpuMpsDaemonDown"
TAINT_PREFIX = "unhealthy.gpufleet.io/"


def node_patch(inv: NodeGpuInventory, config: cfg.AgentConfig, faults: Mapping[str, Fault],
               previous_labels: frozenset[str] = frozenset(), mps: MpsStatus | None = None) -> NodePatch:
    labels: dict[str, str | None] = dict.fromkeys(previous_labels)
    labels.update(gfd_labels(inv, config))
    unhealthy_gpus = frozenset(g.uuid for g in inv.gpus
                               if g.uuid in faults or any(s.uuid in faults for s in g.mig_slices))
    annotations: dict[str, str | None] = {
        ann.INVENTORY_ANNOTATION: ann.encode_inventory(to_annotation(inv, unhealthy_gpus))}
    effect = config.gpufleet.health.taint_effect
    taints = () if effect == "none" else tuple(
        Taint(TAINT_PREFIX + d, f.reason, TaintEffect(effect)) for d, f in sorted(faults.items()))
    memory = fraction_memory_mib(inv, config)
    conditions = (_condition(faults), _mps_condition(mps or MpsStatus((), {}, {})))
    return NodePatch(labels, annotations, conditions, TAINT_PREFIX, taints,
                     {ann.GPU_MEMORY_RESOURCE: memory or None})


def _condition(faults: Mapping[str, Fault]) -> NodeCondition:
    if not faults:
        return NodeCondition(CONDITION_TYPE, "False", "GpusHealthy", "all GPUs are healthy")
    details = "; ".join(f"{d}: {f.reason} ({f.fault_class.value})" for d, f in sorted(faults.items()))
    return NodeCondition(CONDITION_TYPE, "True", "GpuFault", f"{len(faults)} unhealthy: {details}")


def _mps_condition(mps: MpsStatus) -> NodeCondition:
    retiring = "".join(f"; {r}: daemon being retired, {why}" for r, why in sorted(mps.retiring.items()))
    if mps.down:
        details = "; ".join(f"{r}: {why}" for r, why in sorted(mps.down.items()))
        return NodeCondition(MPS_CONDITION_TYPE, "True", "MpsDaemonDown", details + retiring)
    if not mps.managed:
        return NodeCondition(MPS_CONDITION_TYPE, "False", "MpsNotManaged",
                             "the agent runs no MPS control daemon on this node" + retiring)
    return NodeCondition(MPS_CONDITION_TYPE, "False", "MpsDaemonsReady",
                         f"MPS control daemon answering for {', '.join(sorted(mps.managed))}{retiring}")
