"""The agent's narrow view of the Kubernetes API, as a Protocol with in-memory implementations.

The agent needs these from the API server: its node's labels (to pick a config) and
annotations (the MIG layout the scheduler wants), the pods bound to its node (to find the
scheduler's assignment in `Allocate`), a way to write its node's labels, annotations,
conditions, taints and extended-resource capacity, events on pods, and, when DRA is on, its
node's ResourceSlices.
Requests are plain data (`NodePatch`) built before any I/O. The live client is
`gpufleet.kube.node_api.KubeNodeApi`, which the CLI wires in (the agent may not import
`kube/`); here are:

* `FakeNodeApi` - an in-memory node and pod list for tests;
* `OfflineNodeApi` - for `gpufleet agent run` without a cluster: reading pods fails (so
  fractions are refused with that reason, and preferences fall back to topology), and the
  node state the agent *would* write goes to a JSON file and, optionally, an NFD feature file
  (`key=value` lines, the way GPU feature discovery hands labels to node-feature-discovery).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Protocol, Sequence

from gpufleet.agent.files import write_atomically
from gpufleet.model import Taint


class KubeAccessError(RuntimeError):
    """The API call failed; callers retry on their next cycle."""


@dataclass(frozen=True, slots=True)
class PodView:
    """What the agent reads of a pod bound to its node."""

    namespace: str
    name: str
    uid: str
    node_name: str | None
    scheduler_name: str
    phase: str = "Pending"
    created: str = ""
    """metadata.creationTimestamp (RFC 3339, so it sorts as text)."""
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str
    status: str
    """"True", "False" or "Unknown", as in the API."""
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class NodePatch:
    """The agent-owned part of a node, to be merged into it.

    Labels and annotations merge, a None value removes the key; conditions replace those of
    the same type; taints whose key starts with `taint_prefix` are replaced by `taints`;
    capacity sets extended resources (a value of None removes one).
    """

    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    conditions: tuple[NodeCondition, ...] = ()
    taint_prefix: str | None = None
    taints: tuple[Taint, ...] = ()
    capacity: Mapping[str, int | None] = field(default_factory=dict)


class NodeApi(Protocol):
    """The agent's access to its own node and the pods bound to it. Methods raise KubeAccessError."""

    def node_labels(self) -> Mapping[str, str]:
        """The node's current labels."""
        ...

    def node_annotations(self) -> Mapping[str, str]:
        """The node's current annotations (the scheduler's MIG layout among them)."""
        ...

    def pods_on_node(self) -> Sequence[PodView]:
        """Pods whose spec.nodeName is this node, in any phase."""
        ...

    def patch_node(self, patch: NodePatch) -> None:
        """Merge `patch` into the node (metadata, status conditions, status capacity, spec taints)."""
        ...

    def pod_event(self, pod: PodView, reason: str, note: str) -> None:
        """A Warning event on a pod bound to this node (a refused assignment). Raises KubeAccessError."""
        ...

    def publish_resource_slices(self, driver: str, slices: Sequence[Mapping[str, Any]]) -> int:
        """Make the node's DRA pool of `driver` hold `slices` (none: delete it); returns its generation."""
        ...

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ResourceClaim as the API server has it now; None if there is none."""
        ...


@dataclass
class NodeState:
    """A node as the fakes hold it."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, NodeCondition] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    capacity: dict[str, int] = field(default_factory=dict)

    def apply(self, patch: NodePatch) -> None:
        for target, changes in ((self.labels, patch.labels), (self.annotations, patch.annotations)):
            for key, value in changes.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        self.conditions.update((c.type, c) for c in patch.conditions)
        if patch.taint_prefix is not None:
            prefix = patch.taint_prefix
            self.taints = [t for t in self.taints if not t.key.startswith(prefix)] + list(patch.taints)
        for key, amount in patch.capacity.items():
            if amount is None:
                self.capacity.pop(key, None)
            else:
                self.capacity[key] = amount

    def to_json(self) -> dict[str, object]:
        return {"labels": dict(sorted(self.labels.items())), "annotations": dict(sorted(self.annotations.items())),
                "conditions": [_condition(c) for c in self.conditions.values()],
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in self.taints],
                "capacity": dict(sorted(self.capacity.items()))}


def _condition(c: NodeCondition) -> dict[str, str]:
    return {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}


class FakeNodeApi:
    """An in-memory node and pod list; tests set `pods`, read `node` and `patches`."""

    def __init__(self, labels: Mapping[str, str] | None = None, pods: Sequence[PodView] = ()) -> None:
        self.node = NodeState(labels=dict(labels or {}))
        self.pods: list[PodView] = list(pods)
        self.patches: list[NodePatch] = []
        self.events: list[tuple[str, str, str]] = []
        """(namespace/name, reason, note) of each pod event sent."""
        self.fail = False
        """Set to make every call raise KubeAccessError (an unreachable API server)."""
        self.slices: dict[str, list[Mapping[str, Any]]] = {}
        """The published DRA pool of each driver."""
        self.generations: dict[str, int] = {}
        self.claims: dict[tuple[str, str], Mapping[str, Any]] = {}
        """ResourceClaims by (namespace, name), for the DRA plugin to read."""
        self._lock = threading.Lock()

    def node_labels(self) -> Mapping[str, str]:
        with self._lock:
            self._check()
            return dict(self.node.labels)

    def node_annotations(self) -> Mapping[str, str]:
        with self._lock:
            self._check()
            return dict(self.node.annotations)

    def pods_on_node(self) -> Sequence[PodView]:
        with self._lock:
            self._check()
            return list(self.pods)

    def patch_node(self, patch: NodePatch) -> None:
        with self._lock:
            self._check()
            self.patches.append(patch)
            self.node.apply(patch)

    def pod_event(self, pod: PodView, reason: str, note: str) -> None:
        with self._lock:
            self._check()
            self.events.append((f"{pod.namespace}/{pod.name}", reason, note))

    def publish_resource_slices(self, driver: str, slices: Sequence[Mapping[str, Any]]) -> int:
        with self._lock:
            self._check()
            if list(slices) != self.slices.get(driver, []):
                self.generations[driver] = self.generations.get(driver, 0) + 1
            if slices:
                self.slices[driver] = list(slices)
            else:
                self.slices.pop(driver, None)
            return self.generations.get(driver, 0)

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            self._check()
            return self.claims.get((namespace, name))

    def _check(self) -> None:
        if self.fail:
            raise KubeAccessError("fake API server unreachable")


class OfflineNodeApi:
    """No API server: static labels, pods unreadable, node writes recorded to files."""

    def __init__(self, state_file: Path | None = None, nfd_file: Path | None = None,
                 labels: Mapping[str, str] | None = None) -> None:
        self._labels = dict(labels or {})
        self._state_file = state_file
        self._nfd_file = nfd_file
        self.node = NodeState()

    def node_labels(self) -> Mapping[str, str]:
        return dict(self._labels)

    def node_annotations(self) -> Mapping[str, str]:
        """What this agent wrote: with no API server, no scheduler writes a MIG layout."""
        return dict(self.node.annotations)

    def pods_on_node(self) -> Sequence[PodView]:
        raise KubeAccessError("no Kubernetes API access (run with --kubeconfig, or in a pod), "
                              "so the scheduler's assignments cannot be read")

    def pod_event(self, pod: PodView, reason: str, note: str) -> None:
        raise KubeAccessError("no Kubernetes API access: cannot record an event")

    def publish_resource_slices(self, driver: str, slices: Sequence[Mapping[str, Any]]) -> int:
        raise KubeAccessError("no Kubernetes API access: cannot publish ResourceSlices "
                              "(`gpufleet agent resourceslices` prints them)")

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        raise KubeAccessError("no Kubernetes API access: cannot read ResourceClaims")

    def patch_node(self, patch: NodePatch) -> None:
        self.node.apply(patch)
        try:
            if self._state_file:
                write_atomically(self._state_file, json.dumps(self.node.to_json(), indent=2) + "\n")
            if self._nfd_file:
                write_atomically(self._nfd_file, "".join(f"{k}={v}\n" for k, v in sorted(self.node.labels.items())))
        except OSError as exc:
            raise KubeAccessError(f"cannot write node state: {exc}") from exc
