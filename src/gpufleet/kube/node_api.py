"""`KubeNodeApi`: the node agent's access to its node and the pods bound to it, through lightkube.

It has the three methods of the agent's `NodeApi` Protocol. Layering keeps the two drivers
apart (`kube` may not import `agent`, nor the reverse), so it reads pods into its own
`BoundPod` and raises `KubeError`s; the CLI adapts both to the agent's types.

Requests, and the RBAC each needs:

* `GET /api/v1/pods?fieldSelector=spec.nodeName=N` (list pods, all namespaces): the pods
  bound to this node with their annotations and `spec.schedulerName`, so that Allocate can
  trust the scheduler's assignment annotation only on pods the scheduler bound here.
* `GET /api/v1/nodes/N` (get nodes): labels for choosing a config, and the node as read
  before a write.
* `PATCH /api/v1/nodes/N` (patch nodes) and `PATCH /api/v1/nodes/N/status` (patch
  nodes/status): see `node_patch` for what the bodies hold and why.
* `POST /apis/events.k8s.io/v1/namespaces/NS/events` (create events): a Warning on a pod
  whose GPU assignment the agent refuses (`AssignmentRejected`).
* `GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=N,spec.driver=D`
  (list resourceslices), then `POST`, `PUT` and `DELETE` of this node's slices (create, update,
  delete resourceslices): the node's DRA pool, when the agent publishes one (`slice_sync`).
* `GET /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/C` (get resourceclaims): a claim
  the kubelet asks the agent to prepare, read as it is now.

Every call goes through a `Retrier`: temporary failures are retried with backoff, and node
writes that still fail are cooled down between calls (see `retry`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence, cast

import lightkube
from lightkube.models import meta_v1
from lightkube.resources.core_v1 import Node, NodeStatus, Pod
from lightkube.resources.events_v1 import Event
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from gpufleet.kube import node_patch, slice_sync
from gpufleet.kube.decoders import build_decoders
from gpufleet.kube.events import event_body
from gpufleet.kube.retry import Retrier, RetryPolicy

log = logging.getLogger(__name__)
build_decoders(Node, NodeStatus, Pod, Event, ResourceClaim, ResourceSlice)  # before the agent's threads decode them
AGENT_CONTROLLER = "gpufleet.io/agent"


@dataclass(frozen=True, slots=True)
class BoundPod:
    """What the agent reads of a pod bound to its node (the fields of the agent's PodView)."""

    namespace: str
    name: str
    uid: str
    node_name: str | None
    scheduler_name: str
    phase: str
    created: str
    """metadata.creationTimestamp as RFC 3339 text (which sorts in time order), "" if unset."""
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class KubeNodeApi:
    """One node's view of the API server. Methods raise `gpufleet.kube.errors.KubeError`."""

    def __init__(self, client: lightkube.Client, node_name: str, retrier: Retrier | None = None, *,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self._client, self._node, self._now = client, node_name, now
        self._retrier = retrier or Retrier(RetryPolicy(), log)

    def node_labels(self) -> dict[str, str]:
        """The node's current labels (404 if the node does not exist: a wrong --node-name)."""
        node = self._retrier.call(f"get node {self._node}", lambda: self._client.get(Node, self._node))
        return dict(node.metadata.labels or {}) if node.metadata else {}

    def node_annotations(self) -> dict[str, str]:
        """The node's current annotations."""
        node = self._retrier.call(f"get node {self._node}", lambda: self._client.get(Node, self._node))
        return dict(node.metadata.annotations or {}) if node.metadata else {}

    def pods_on_node(self) -> list[BoundPod]:
        """Pods whose spec.nodeName is this node, in every namespace and phase."""
        def list_pods() -> list[BoundPod]:  # iterate inside the call: the list is fetched lazily
            found = self._client.list(Pod, namespace=lightkube.ALL_NS, fields={"spec.nodeName": self._node})
            return [_bound_pod(p) for p in found]
        return self._retrier.call(f"list pods on node {self._node}", list_pods)

    def patch_node(self, changes: node_patch.NodeChanges) -> None:
        """Read the node, then merge `changes` into its metadata, taints and status (two PATCHes)."""
        self._retrier.call(f"patch node {self._node}", lambda: self._patch(changes), cooldown=True)

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, note: str) -> None:
        """A Warning event about a pod on this node, from `gpufleet.io/agent` (its instance: the node)."""
        pod = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        body = event_body(pod, reason=reason, note=note, type_="Warning", action="Allocate", instance=self._node,
                          now=self._now().timestamp(), controller=AGENT_CONTROLLER)
        event = cast(Event, Event.from_dict(body))
        self._retrier.call(f"create event on pod {namespace}/{name}", lambda: self._client.create(event))

    def publish_resource_slices(self, driver: str, slices: Sequence[Mapping[str, Any]]) -> int:
        """Make this node's pool of `driver` hold `slices` (an empty sequence deletes it); the Node
        becomes their owner, so they go with it. Returns the pool's generation."""
        def sync() -> int:  # one unit of retry: after a 409 the pool is listed again
            node = self._client.get(Node, self._node)
            owner = [{"apiVersion": "v1", "kind": "Node", "name": self._node,
                      "uid": node.metadata.uid if node.metadata else "", "controller": True}]
            wanted = [{**o, "metadata": {**o["metadata"], "ownerReferences": owner}} for o in slices]
            found = self._client.list(ResourceSlice, fields={"spec.nodeName": self._node, "spec.driver": driver})
            todo = slice_sync.plan([o.to_dict() for o in found], wanted)
            for body in todo.create:
                self._client.create(cast(ResourceSlice, ResourceSlice.from_dict(body)))
            for body in todo.replace:
                self._client.replace(cast(ResourceSlice, ResourceSlice.from_dict(body)))
            for name in todo.delete:
                try:
                    self._client.delete(ResourceSlice, name)
                except lightkube.ApiError as exc:
                    if exc.status.code != 404:  # gone already is what we wanted
                        raise
            if not todo.empty:
                log.info("published %d ResourceSlices of %s for node %s (generation %d; %d created, %d replaced, "
                         "%d deleted)", len(wanted), driver, self._node, todo.generation, len(todo.create),
                         len(todo.replace), len(todo.delete))
            return todo.generation
        return self._retrier.call(f"publish ResourceSlices of node {self._node}", sync, cooldown=True)

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as stored now; None if there is none."""
        def get() -> dict[str, Any] | None:
            try:
                return cast(dict[str, Any], self._client.get(ResourceClaim, name, namespace=namespace).to_dict())
            except lightkube.ApiError as exc:
                if exc.status.code == 404:
                    return None
                raise
        return self._retrier.call(f"get ResourceClaim {namespace}/{name}", get)

    def _patch(self, changes: node_patch.NodeChanges) -> None:
        # One unit of retry: after a 409 the node is read again and both bodies rebuilt.
        node = self._client.get(Node, self._node)
        body = node_patch.metadata_patch(changes, node)
        if body:
            self._client.patch(Node, self._node, body, patch_type=PatchType.MERGE)
        status = node_patch.status_patch(changes, node, self._now())
        if status:
            self._client.patch(NodeStatus, self._node, status, patch_type=PatchType.STRATEGIC)


def _bound_pod(pod: Pod) -> BoundPod:
    meta = pod.metadata or meta_v1.ObjectMeta()
    spec, status = pod.spec, pod.status
    return BoundPod(
        namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "",
        node_name=spec.nodeName if spec else None,
        scheduler_name=spec.schedulerName if spec and spec.schedulerName else "default-scheduler",
        phase=status.phase if status and status.phase else "Pending",
        created=node_patch.rfc3339(meta.creationTimestamp) if meta.creationTimestamp else "",
        annotations=MappingProxyType(dict(meta.annotations or {})))
