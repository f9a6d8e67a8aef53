"""The two patches that write the agent's part of a node, built as plain data before any I/O.

The agent hands over what it owns (`NodeChanges`, which the agent's `NodePatch` satisfies
structurally, so this package need not import the agent); given the node as last read,
this module answers with request bodies:

* `metadata_patch`, a JSON merge patch (RFC 7386) for `/api/v1/nodes/N`. Labels and
  annotations merge key by key, and null removes a key, so labels the agent never set stay.
  `spec.taints` is a list without a merge key, which merge patch and strategic merge patch
  alike replace whole. So the body carries the full list: every taint outside the agent's
  prefix as read, then the agent's own. It also carries the resourceVersion that was read,
  so that a concurrent change to the node fails with 409 and the caller reads and tries
  again instead of dropping someone else's taint. Taints are sent only when they differ.
* `status_patch`, a strategic merge patch for `/api/v1/nodes/N/status`, where
  `status.conditions` merges by `type` (the kubelet's Ready and others stay) and
  `status.capacity` merges by key (null removes one). A condition keeps its
  lastTransitionTime while its status is unchanged, as the kubelet does.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping, Protocol, Sequence

from lightkube.models import core_v1
from lightkube.resources.core_v1 import Node

from gpufleet.model import Taint


class Condition(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


class NodeChanges(Protocol):
    """The agent-owned part of a node, with the semantics of the agent's `NodePatch`."""

    @property
    def labels(self) -> Mapping[str, str | None]: ...
    @property
    def annotations(self) -> Mapping[str, str | None]: ...
    @property
    def conditions(self) -> Sequence[Condition]: ...
    @property
    def taint_prefix(self) -> str | None:
        """Taints whose key starts with this are the agent's, replaced by `taints`; None: leave taints alone."""
    @property
    def taints(self) -> Sequence[Taint]: ...
    @property
    def capacity(self) -> Mapping[str, int | None]: ...


def metadata_patch(changes: NodeChanges, node: Node) -> dict[str, Any]:
    """The merge patch for the node object, or {} when there is nothing to send."""
    metadata: dict[str, Any] = {}
    if changes.labels:
        metadata["labels"] = dict(changes.labels)
    if changes.annotations:
        metadata["annotations"] = dict(changes.annotations)
    body: dict[str, Any] = {}
    taints = _taints(changes, node.spec.taints if node.spec and node.spec.taints else [])
    if taints is not None:
        metadata["resourceVersion"] = node.metadata.resourceVersion if node.metadata else None
        body["spec"] = {"taints": taints}
    if metadata:
        body["metadata"] = metadata
    return body


def status_patch(changes: NodeChanges, node: Node, now: datetime) -> dict[str, Any]:
    """The strategic merge patch for the node's status, or {} when there is nothing to send."""
    status: dict[str, Any] = {}
    if changes.conditions:
        current = {c.type: c for c in (node.status.conditions or [])} if node.status else {}
        status["conditions"] = [_condition(c, current.get(c.type), now) for c in changes.conditions]
    if changes.capacity:
        status["capacity"] = {k: None if v is None else str(v) for k, v in changes.capacity.items()}
    return {"status": status} if status else {}


def rfc3339(moment: datetime) -> str:
    """The API's Time format: UTC, whole seconds, a Z suffix."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _taints(changes: NodeChanges, current: Sequence[core_v1.Taint]) -> list[dict[str, str]] | None:
    """The node's full new taint list, or None when it would not change."""
    prefix = changes.taint_prefix
    if prefix is None:
        return None
    previous = {_identity(t): t for t in current}
    wanted = [_taint_json(t) for t in current if not t.key.startswith(prefix)]
    for t in changes.taints:
        old = previous.get((t.key, t.value, t.effect.value))  # keep its timeAdded
        wanted.append(_taint_json(old) if old else {"key": t.key, "value": t.value, "effect": t.effect.value})
    unchanged = sorted((w["key"], w.get("value", ""), w["effect"]) for w in wanted) == sorted(map(_identity, current))
    return None if unchanged else wanted


def _identity(t: core_v1.Taint) -> tuple[str, str, str]:
    return t.key, t.value or "", t.effect


def _taint_json(t: core_v1.Taint) -> dict[str, str]:
    out = {"key": t.key, "effect": t.effect}
    if t.value:
        out["value"] = t.value
    if t.timeAdded:
        out["timeAdded"] = rfc3339(t.timeAdded)
    return out


def _condition(c: Condition, current: core_v1.NodeCondition | None, now: datetime) -> dict[str, str]:
    transition = now
    if current is not None and current.status == c.status and current.lastTransitionTime is not None:
        transition = current.lastTransitionTime
    return {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
            "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": rfc3339(transition)}
