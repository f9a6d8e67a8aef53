"""A simulated Karpenter cloud provider: each NodeClaim becomes a GPU node after a delay.

    with ApiServer() as srv, SimulatedKarpenter(srv, launch_delay_s=0.5) as cloud:
        ...                                  # a NodeClaim created through the API...
        cloud.launched                       # ...is now [(claim name, node name)]

What Karpenter and the instance would do, in the order they do it, without the cloud:

1. **Launch** (`launch_delay_s` after the NodeClaim is created): the instance type comes from
   the claim's `node.kubernetes.io/instance-type` requirement (`In` with one value) and must
   be one of `nodes.SHAPES` (p5.48xlarge, p4de.24xlarge, g5.xlarge, ...); otherwise the claim
   gets `Launched=False`, reason `InsufficientCapacity`, and nothing else happens.
2. **Register**: a Node named `ip-10-100-x-y` appears with the shape's CPU, memory and GPUs,
   the claim's labels and single-valued requirements as labels (`karpenter.sh/nodepool`
   among them), its taints, and a Ready condition; the claim's status gets `providerID`,
   `nodeName`, `capacity`, `allocatable` and `Launched`/`Registered`/`Initialized`/`Ready`
   conditions.
3. **The node agent** writes the `gpufleet.io/gpu-inventory` annotation and the device
   plugin registers the GPU resources, `agent_delay_s` after registration (0: at once), so a
   test can see a node that exists but has no GPUs yet.

Deleting a NodeClaim deletes its node (Karpenter's termination, without the drain). Work
runs on the simulator's own thread; the store listener only queues it.
"""

from __future__ import annotations

import copy
import itertools
import random
from types import TracebackType
from typing import Any, Callable, Mapping

from gpufleet.model import annotations as ann
from gpufleet.testing.apiserver.meta import now_rfc3339
from gpufleet.testing.gpu_nodes import SHAPES, Shape, gpu_node
from gpufleet.testing.apiserver.server import ApiServer
from gpufleet.testing.apiserver.store import Event
from gpufleet.testing.apiserver.timers import Timers

Obj = dict[str, Any]
CLAIMS = "nodeclaims.karpenter.sh"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_RESOURCES = (ann.GPU_RESOURCE, ann.GPU_MILLI_RESOURCE, ann.GPU_MEMORY_RESOURCE)


class SimulatedKarpenter:
    def __init__(self, srv: ApiServer, *, launch_delay_s: float = 0.5, agent_delay_s: float = 0.0,
                 shapes: Mapping[str, Shape] | None = None, seed: int = 0) -> None:
        self._srv = srv
        self.launch_delay_s, self.agent_delay_s = launch_delay_s, agent_delay_s
        self._shapes = dict(shapes) if shapes is not None else {s.name: s for s in SHAPES if not s.mig}
        self._rng = random.Random(seed)
        self._timers = Timers("simulated-karpenter")
        self._nodes = itertools.count(1)
        self._node_of: dict[str, str] = {}
        self._pending_inventory: dict[str, Obj] = {}
        self.launched: list[tuple[str, str]] = []
        """(claim name, node name) for every node launched, in order."""
        srv.store.listeners.append(self._on_event)

    def start(self) -> SimulatedKarpenter:
        self._timers.start()
        return self

    def stop(self) -> None:
        self._timers.stop()

    def __enter__(self) -> SimulatedKarpenter:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- events (under the store lock: only queue work) --------------------------------------
    def _on_event(self, ev: Event) -> None:
        if ev.storage_key != CLAIMS:
            return
        name = ev.obj["metadata"]["name"]
        if ev.type == "ADDED":
            self._schedule(self.launch_delay_s, "launch", name)
        elif ev.type == "DELETED":
            self._schedule(0.0, "terminate", name)

    def _schedule(self, delay_s: float, action: str, name: str) -> None:
        run: Callable[[str], None] = getattr(self, f"_{action}")
        self._timers.after(delay_s, lambda: run(name))

    # -- actions ------------------------------------------------------------------------------
    def _launch(self, claim_name: str) -> None:
        claim = self._srv.get("nodeclaims", claim_name)
        if claim is None:
            return
        spec = claim.get("spec") or {}
        single = {r["key"]: r["values"][0] for r in spec.get("requirements") or ()
                  if r.get("operator") == "In" and len(r.get("values") or ()) == 1}
        shape = self._shapes.get(single.get(INSTANCE_TYPE, ""))
        if shape is None:
            self._set_status(claim, {"conditions": [_condition("Launched", "False", "InsufficientCapacity",
                                                               f"no instance type {single.get(INSTANCE_TYPE)!r}")]})
            return
        k = next(self._nodes)
        name = f"ip-10-100-{k // 250}-{k % 250 + 1}"
        node = gpu_node(name, shape, self._rng, index=1000 + k)
        m = node["metadata"]
        m["labels"].update({key: v for key, v in single.items() if key != "kubernetes.io/hostname"})
        m["labels"].update((claim["metadata"].get("labels") or {}))
        m["labels"].update({"karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"})
        node["spec"]["providerID"] = f"gpufleet-test:///{claim_name}"
        if spec.get("taints"):
            node["spec"]["taints"] = [dict(t) for t in spec["taints"]]
        full = copy.deepcopy(node)
        if self.agent_delay_s > 0:  # registered, but the agent and device plugin are not up yet
            m["annotations"].pop(ann.INVENTORY_ANNOTATION, None)
            for r in ("capacity", "allocatable"):
                node["status"][r] = {key: v for key, v in node["status"][r].items()
                                     if key not in GPU_RESOURCES and not key.startswith(ann.MIG_RESOURCE_PREFIX)}
            self._pending_inventory[name] = full
            self._schedule(self.agent_delay_s, "agent", name)
        self._srv.create(node)
        self._node_of[claim_name] = name
        self.launched.append((claim_name, name))
        self._set_status(claim, {
            "providerID": node["spec"]["providerID"], "nodeName": name,
            "capacity": full["status"]["capacity"], "allocatable": full["status"]["allocatable"],
            "conditions": [_condition(c, "True", c, "") for c in ("Launched", "Registered", "Initialized", "Ready")]})

    def _agent(self, node_name: str) -> None:
        full = self._pending_inventory.pop(node_name, None)
        node = self._srv.get("nodes", node_name)
        if full is None or node is None:
            return
        node["metadata"].setdefault("annotations", {})[ann.INVENTORY_ANNOTATION] = \
            full["metadata"]["annotations"][ann.INVENTORY_ANNOTATION]
        self._srv.update(node)
        node = self._srv.get("nodes", node_name) or node
        node["status"]["capacity"] = full["status"]["capacity"]
        node["status"]["allocatable"] = full["status"]["allocatable"]
        self._srv.update(node, status=True)

    def _terminate(self, claim_name: str) -> None:
        node = self._node_of.pop(claim_name, None)
        if node is not None and self._srv.get("nodes", node) is not None:
            self._srv.delete("nodes", node)

    def _set_status(self, claim: Obj, status: Obj) -> None:
        claim = copy.deepcopy(claim)
        claim["status"] = {**(claim.get("status") or {}), **status}
        self._srv.update(claim, status=True)


def _condition(kind: str, status: str, reason: str, message: str) -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now_rfc3339()}
