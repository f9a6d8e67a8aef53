"""The resource types the server serves: built-in ones and those CRDs add at run time.

A `ResourceType` is one (group, version, plural) as discovery lists it. Several types may
share one storage: `events` in core/v1 and events.k8s.io/v1 are one set of objects seen
through two schemas, as in kube-apiserver. Built-in types beyond what gpufleet's scheduler
needs (ConfigMaps, RBAC, Deployments, ...) are stored and served generically, with no
controller behind them, so that `kubectl apply -k deploy/` can install a whole base.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource. `subresources` lists `status`, `binding`, `eviction` where served."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()
    storage: str = ""
    """Storage key when it differs from `key` (events.k8s.io events live with core events)."""
    crd: bool = False
    printer_columns: tuple[dict[str, Any], ...] = ()
    """A CRD's additionalPrinterColumns, for `kubectl get`."""
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    """A CRD version's openAPIV3Schema; None for built-in types (not validated by schema)."""

    @property
    def key(self) -> str:
        """`pods`, `leases.coordination.k8s.io`: unique per resource across versions."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> str:
        return self.storage or self.key

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


def _t(group: str, version: str, plural: str, kind: str, namespaced: bool, *short: str,
       sub: tuple[str, ...] = (), cats: tuple[str, ...] = (), storage: str = "") -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, tuple(short), sub, ALL_VERBS, cats, storage)


BUILTIN: tuple[ResourceType, ...] = (
    _t("", "v1", "namespaces", "Namespace", False, "ns", sub=("status",)),
    _t("", "v1", "pods", "Pod", True, "po", sub=("status", "binding", "eviction"), cats=("all",)),
    _t("", "v1", "nodes", "Node", False, "no", sub=("status",)),
    _t("", "v1", "events", "Event", True, "ev"),
    ResourceType("", "v1", "bindings", "Binding", True, verbs=("create",)),
    _t("", "v1", "configmaps", "ConfigMap", True, "cm"),
    _t("", "v1", "secrets", "Secret", True),
    _t("", "v1", "serviceaccounts", "ServiceAccount", True, "sa"),
    _t("", "v1", "services", "Service", True, "svc", sub=("status",), cats=("all",)),
    _t("apps", "v1", "deployments", "Deployment", True, "deploy", sub=("status",), cats=("all",)),
    _t("apps", "v1", "daemonsets", "DaemonSet", True, "ds", sub=("status",), cats=("all",)),
    _t("coordination.k8s.io", "v1", "leases", "Lease", True),
    _t("events.k8s.io", "v1", "events", "Event", True, "ev", storage="events"),
    _t("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, "pdb", sub=("status",)),
    _t("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, "pc"),
    _t("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    _t("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    _t("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    _t("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    _t("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
       "crd", "crds", sub=("status",)),
)


class Registry:
    """Lookup of served types by path, by apiVersion+kind and by a user's short name."""

    def __init__(self, types: tuple[ResourceType, ...] = BUILTIN) -> None:
        self._lock = threading.Lock()
        self._types: list[ResourceType] = []
        self._by_path: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for t in types:
            self.add(t)

    def add(self, t: ResourceType) -> None:
        with self._lock:
            self._types = [x for x in self._types if (x.group, x.version, x.plural) != (t.group, t.version, t.plural)]
            self._types.append(t)
            self._by_path[(t.group, t.version, t.plural)] = t
            self._by_kind[(t.api_version, t.kind)] = t

    def remove_group_resource(self, group: str, plural: str) -> None:
        """Stop serving every version of a resource (its CRD was deleted)."""
        with self._lock:
            gone = [t for t in self._types if t.group == group and t.plural == plural]
            self._types = [t for t in self._types if t not in gone]
            for t in gone:
                self._by_path.pop((t.group, t.version, t.plural), None)
                self._by_kind.pop((t.api_version, t.kind), None)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def for_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((api_version, kind))

    def types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types)

    def versions_of(self, group: str, plural: str) -> list[ResourceType]:
        return [t for t in self.types() if t.group == group and t.plural == plural]

    def groups(self) -> list[tuple[str, list[str]]]:
        """Named groups and their versions, in the order they were first served."""
        seen: dict[str, list[str]] = {}
        for t in self.types():
            if t.group:
                versions = seen.setdefault(t.group, [])
                if t.version not in versions:
                    versions.append(t.version)
        return [(g, sorted(v, key=_version_priority)) for g, v in seen.items()]

    def resolve(self, name: str) -> ResourceType:
        """`pods`, `po`, `leases`, `leases.coordination.k8s.io`, `podgroups`: the core or first match."""
        types = self.types()
        for t in types:
            if name == t.key and not t.storage:
                return t
        plural, _, group = name.partition(".")
        matches = [t for t in types if (t.plural == plural or plural in t.short_names)
                   and (not group or t.group == group)]
        if not matches:
            raise KeyError(f"unknown resource {name!r}")
        matches.sort(key=lambda t: (t.group != "", bool(t.storage), _version_priority(t.version)))
        return matches[0]


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0))
