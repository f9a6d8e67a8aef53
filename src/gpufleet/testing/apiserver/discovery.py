"""Discovery documents: /version, /api, /api/v1, /apis, /apis/<group>[/<version>].

These are the legacy (unaggregated) documents; kubectl asks for the aggregated form first
and falls back to these when the answer is plain `application/json`. CRD-served resources
appear as soon as their CRD is created, so kubectl's next discovery sees them.
"""

from __future__ import annotations

from typing import Any

from gpufleet.testing.apiserver.resources import Registry, ResourceType

Obj = dict[str, Any]
KUBE_VERSION = ("1", "37", "v1.37.0-gpufleet-test")


def version() -> Obj:
    major, minor, git = KUBE_VERSION
    return {"major": major, "minor": minor, "gitVersion": git, "gitCommit": "0" * 40, "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25.0", "compiler": "gc", "platform": "linux/amd64"}


def core_versions(address: str) -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def group_list(registry: Registry) -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, v) for g, v in registry.groups()]}


def group(registry: Registry, name: str) -> Obj | None:
    for g, versions in registry.groups():
        if g == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(g, versions)}
    return None


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def resource_list(registry: Registry, group_name: str, version_name: str) -> Obj | None:
    types = [t for t in registry.types() if t.group == group_name and t.version == version_name]
    if not types:
        return None
    gv = f"{group_name}/{version_name}" if group_name else version_name
    resources: list[Obj] = []
    for t in types:
        resources.append(_entry(t))
        for sub in t.subresources:
            resources.append(_sub_entry(t, sub))
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _entry(t: ResourceType) -> Obj:
    entry: Obj = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
                  "verbs": list(t.verbs)}
    if t.short_names:
        entry["shortNames"] = list(t.short_names)
    if t.categories:
        entry["categories"] = list(t.categories)
    return entry


def _sub_entry(t: ResourceType, sub: str) -> Obj:
    if sub == "binding":
        return {"name": f"{t.plural}/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                "verbs": ["create"]}
    if sub == "eviction":
        return {"name": f"{t.plural}/eviction", "singularName": "", "namespaced": True, "group": "policy",
                "version": "v1", "kind": "Eviction", "verbs": ["create"]}
    return {"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced, "kind": t.kind,
            "verbs": ["get", "patch", "update"]}
