"""Faults injected into node objects, written as the components that report them would write them.

* `set_gpu_health(srv, node, index, healthy)`: what the gpufleet node agent writes when a GPU
  fails or recovers (docs/health.md): the GPU's `healthy` flag in the `gpufleet.io/gpu-inventory`
  annotation, the taint `unhealthy.gpufleet.io/<uuid>=<fault>:PreferNoSchedule`, and the
  `GpuUnhealthy` node condition.
* `set_node_ready(srv, node, ready)`: what the kubelet (Ready=False) or the node controller
  (Ready=Unknown, with `status="Unknown"`) writes, optionally with the
  `node.kubernetes.io/not-ready` / `unreachable` NoSchedule taint the node controller adds.

Both write through the server's store like any client, so watchers see MODIFIED events.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpufleet.model import annotations as ann
from gpufleet.testing.apiserver.meta import now_rfc3339
from gpufleet.testing.apiserver.server import ApiServer

Obj = dict[str, Any]
HEALTH_TAINT_PREFIX = "unhealthy.gpufleet.io/"


def set_gpu_health(srv: ApiServer, node: str, index: int, healthy: bool, *, fault: str = "xid-79") -> str:
    """Mark GPU `index` (its `index` in the inventory) of `node` healthy or not; returns its UUID."""
    obj = _node(srv, node)
    annotations = obj["metadata"].setdefault("annotations", {})
    gpus = list(ann.decode_inventory(annotations[ann.INVENTORY_ANNOTATION]))
    j = next((j for j, g in enumerate(gpus) if g.index == index), None)
    if j is None:
        raise KeyError(f"node {node} has no GPU with index {index}")
    gpus[j] = dataclasses.replace(gpus[j], healthy=healthy)
    uuid = gpus[j].uuid
    annotations[ann.INVENTORY_ANNOTATION] = ann.encode_inventory(tuple(gpus))
    key = HEALTH_TAINT_PREFIX + uuid
    taints = [t for t in obj["spec"].get("taints") or () if t.get("key") != key]
    if not healthy:
        taints.append({"key": key, "value": fault, "effect": "PreferNoSchedule"})
    obj["spec"]["taints"] = taints
    srv.update(obj)
    bad = [g.uuid for g in gpus if not g.healthy]
    _set_condition(srv, node, {"type": "GpuUnhealthy", "status": "True" if bad else "False",
                               "reason": "GpuFault" if bad else "GpusHealthy",
                               "message": f"{len(bad)} unhealthy: {', '.join(bad)}" if bad else "all GPUs are healthy"})
    return uuid


def set_node_ready(srv: ApiServer, node: str, ready: bool, *, status: str | None = None, taint: bool = False) -> None:
    """Set the Ready condition (`status` overrides "True"/"False", e.g. "Unknown"); with `taint`,
    add (or on recovery remove) the node controller's not-ready/unreachable NoSchedule taint."""
    value = status or ("True" if ready else "False")
    reason = {"True": "KubeletReady", "False": "KubeletNotReady", "Unknown": "NodeStatusUnknown"}.get(value, value)
    key = "node.kubernetes.io/unreachable" if value == "Unknown" else "node.kubernetes.io/not-ready"
    obj = _node(srv, node)
    taints = [t for t in obj["spec"].get("taints") or ()
              if t.get("key") not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    if taint and not ready:
        taints.append({"key": key, "effect": "NoSchedule", "timeAdded": now_rfc3339()})
    if taints != (obj["spec"].get("taints") or []):
        obj["spec"]["taints"] = taints
        srv.update(obj)
    _set_condition(srv, node, {"type": "Ready", "status": value, "reason": reason, "message": reason})


def _node(srv: ApiServer, node: str) -> Obj:
    obj = srv.get("nodes", node)
    if obj is None:
        raise KeyError(f"no node {node}")
    obj.setdefault("spec", {})
    return obj


def _set_condition(srv: ApiServer, node: str, condition: Obj) -> None:
    obj = _node(srv, node)
    now = now_rfc3339()
    conditions = list((obj.get("status") or {}).get("conditions") or ())
    old = next((c for c in conditions if c.get("type") == condition["type"]), None)
    changed = old is None or old.get("status") != condition["status"]
    entry = {**condition, "lastHeartbeatTime": now,
             "lastTransitionTime": now if changed else (old or {}).get("lastTransitionTime", now)}
    conditions = [c for c in conditions if c.get("type") != condition["type"]] + [entry]
    obj.setdefault("status", {})["conditions"] = conditions
    srv.update(obj, status=True)
