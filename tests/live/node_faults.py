"""Node faults on the real control plane, written by the component that reports each one there.

* `set_gpu_health`: a GPU fails or recovers. The write is the node agent's (docs/health.md):
  the GPU's `healthy` flag in the `gpufleet.io/gpu-inventory` annotation, the taint
  `unhealthy.gpufleet.io/<uuid>=<fault>:PreferNoSchedule` and the `GpuUnhealthy` condition,
  sent through the agent's own API path (`KubeNodeApi.patch_node`) with the `gpufleet-agent`
  ServiceAccount's kubeconfig, so `deploy/agent/rbac.yaml` applies.
* `stop_kubelet` / `start_kubelet`: the node's kubelet goes away or comes back. Nothing here
  writes the node's Ready condition: KWOK stops (or resumes) playing the node's kubelet (see
  each function for how KWOK is made to), its lease stops being renewed,
  and kube-controller-manager's node-lifecycle controller marks it Unknown and taints it
  `node.kubernetes.io/unreachable` after the grace period (20 s in `ClusterOptions`), as it
  would any node whose kubelet died.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gpufleet.agent.kube import NodeCondition, NodePatch
from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.model import Taint, TaintEffect
from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION

HEALTH_TAINT_PREFIX = "unhealthy.gpufleet.io/"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
LEASE_NAMESPACE = "kube-node-lease"
Obj = dict[str, Any]


def set_gpu_health(c: Cluster, agent_kubeconfig: Path, node: str, index: int, healthy: bool, *,
                   fault: str = "xid-79") -> str:
    """Mark GPU `index` of `node` healthy or not, as its agent; returns the GPU's UUID."""
    obj = c.admin.get("nodes", node)
    if obj is None:
        raise KeyError(f"no node {node}")
    gpus = list(ann.decode_inventory(obj["metadata"]["annotations"][ann.INVENTORY_ANNOTATION]))
    j = next((j for j, g in enumerate(gpus) if g.index == index), None)
    if j is None:
        raise KeyError(f"node {node} has no GPU with index {index}")
    gpus[j] = dataclasses.replace(gpus[j], healthy=healthy)
    bad = [g.uuid for g in gpus if not g.healthy]
    condition = (NodeCondition("GpuUnhealthy", "True", "GpuFault", f"{len(bad)} unhealthy: {', '.join(bad)}") if bad
                 else NodeCondition("GpuUnhealthy", "False", "GpusHealthy", "all GPUs are healthy"))
    patch = NodePatch(annotations={ann.INVENTORY_ANNOTATION: ann.encode_inventory(tuple(gpus))},
                      conditions=(condition,), taint_prefix=HEALTH_TAINT_PREFIX,
                      taints=tuple(Taint(HEALTH_TAINT_PREFIX + u, fault, TaintEffect.PREFER_NO_SCHEDULE) for u in bad))
    client = config.connect(config.from_kubeconfig(agent_kubeconfig))
    try:
        KubeNodeApi(client, node).patch_node(patch)
    finally:
        client.close()
    return gpus[j].uuid


def stop_kubelet(c: Cluster, node: str) -> None:
    """`node`'s kubelet dies: KWOK stops playing it (no more lease renewals, no more pod updates)."""
    c.admin.patch("nodes", node, {"metadata": {"annotations": {KWOK_ANNOTATION: None}}})
    restart_kwok(c)


def start_kubelet(c: Cluster, node: str) -> None:
    """`node`'s kubelet is back: KWOK plays it again."""
    c.admin.patch("nodes", node, {"metadata": {"annotations": {KWOK_ANNOTATION: "fake"}}})
    restart_kwok(c)


def restart_kwok(c: Cluster) -> None:
    """Restart KWOK so that it manages exactly the nodes annotated now, the other nodes' kubelets
    running on without a gap.

    KWOK picks the nodes it manages when it lists them at start, and keeps renewing a node's
    lease after the annotation is gone (it lets go of a node only when the node is deleted),
    so it is restarted. A new KWOK has a new lease holder identity and waits for leases held by
    another identity to expire (40 s) before renewing them, past the node-monitor grace (20 s),
    where a kubelet's identity is its node's name, the same after a restart. So the leases are
    released while KWOK is down, and the new instance creates those of its nodes at once.
    """
    kwok = c.component("kwok")
    kwok.stop()
    for lease in c.admin.list("leases", LEASE_NAMESPACE):
        c.admin.delete("leases", lease["metadata"]["name"], LEASE_NAMESPACE)
    kwok.start()


def ready(node: Obj) -> str:
    """The status of the node's Ready condition ("True", "False", "Unknown"; "" without one)."""
    return next((c["status"] for c in (node.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), "")


def lifecycle_taints(node: Obj) -> set[str]:
    """The node-lifecycle controller's taints on the node (`key:effect`)."""
    return {f"{t['key']}:{t['effect']}" for t in (node.get("spec") or {}).get("taints") or ()
            if t["key"] in (UNREACHABLE, NOT_READY)}
