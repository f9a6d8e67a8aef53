"""OpenAPI v3 documents, as much as `kubectl apply` and `kubectl create` need.

kubectl validates by default (`--validate=strict`). It first asks the server's OpenAPI v3
documents whether the object's PATCH operation accepts the `fieldValidation` query
parameter; if so it leaves validation to the server (sending `fieldValidation=Strict`),
otherwise it validates on the client against full schemas, and when no OpenAPI is served
at all it refuses to go on. So the server publishes, per group-version:

* `/openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}}}`
* `/openapi/v3/<gv>`: paths for every resource, each PATCH operation tagged with
  `x-kubernetes-group-version-kind` and declaring `fieldValidation`; schemas are
  minimal for built-in types (no client-side field checks happen) and the CRD's own
  `openAPIV3Schema` for custom resources.

The PATCH operations do not list `application/strategic-merge-patch+json`, so kubectl
computes strategic merge patches from its compiled-in types, as for any server whose
OpenAPI lacks patch metadata. `/openapi/v2` is not served (kubectl falls back to v3).
The hash changes whenever the document does (a CRD added or changed), so kubectl's
OpenAPI cache never serves a stale document.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpufleet.testing.apiserver.resources import Registry, ResourceType

Obj = dict[str, Any]
_QUERY = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
          for n in ("fieldValidation", "dryRun", "fieldManager", "pretty")]


def document(registry: Registry, path: str) -> Obj | None:
    """The document served at `path` (`/openapi/v3` or `/openapi/v3/<gv>`), or None for 404."""
    if path == "/openapi/v3":
        return root(registry)
    if path.startswith("/openapi/v3/"):
        return group_version(registry, path[len("/openapi/v3/"):])
    return None


def root(registry: Registry) -> Obj:
    paths = {}
    for gv in _group_versions(registry):
        doc = group_version(registry, gv)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def _group_versions(registry: Registry) -> list[str]:
    out = ["api/v1"]
    for t in registry.types():
        gv = f"apis/{t.group}/{t.version}"
        if t.group and gv not in out:
            out.append(gv)
    return out


def group_version(registry: Registry, gv: str) -> Obj | None:
    parts = gv.split("/")
    if parts == ["api", "v1"]:
        group, version = "", "v1"
    elif len(parts) == 3 and parts[0] == "apis":
        group, version = parts[1], parts[2]
    else:
        return None
    types = [t for t in registry.types() if t.group == group and t.version == version]
    if not types:
        return None
    paths: Obj = {}
    schemas: Obj = {}
    for t in types:
        paths.update(_paths(t))
        schemas[_schema_name(t)] = _schema(t)
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (gpufleet test API server)", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": schemas}}


def _schema_name(t: ResourceType) -> str:
    group = ".".join(reversed(t.group.split("."))) if t.group else "core"
    return f"{group}.{t.version}.{t.kind}"


def _schema(t: ResourceType) -> Obj:
    gvk = [{"group": t.group, "version": t.version, "kind": t.kind}]
    if t.schema is not None:
        return {**t.schema, "x-kubernetes-group-version-kind": gvk}
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "x-kubernetes-group-version-kind": gvk}


def _paths(t: ResourceType) -> Obj:
    prefix = f"/apis/{t.group}/{t.version}" if t.group else "/api/v1"
    scope = f"{prefix}/namespaces/{{namespace}}/{t.plural}" if t.namespaced else f"{prefix}/{t.plural}"
    gvk = {"group": t.group, "version": t.version, "kind": t.kind}
    ref = {"$ref": f"#/components/schemas/{_schema_name(t)}"}
    body = {"content": {ct: {"schema": ref} for ct in ("application/json",)}}
    patch_body = {"content": {ct: {"schema": {"type": "object"}} for ct in
                              ("application/json-patch+json", "application/merge-patch+json")}}
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}

    def op(action: str, request: Obj | None = None) -> Obj:
        o: Obj = {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "responses": ok,
                  "parameters": _QUERY}
        if request is not None:
            o["requestBody"] = request
        return o
    item: Obj = {"parameters": _QUERY, "get": op("get"), "put": op("put", body), "patch": op("patch", patch_body),
                 "delete": op("delete")}
    out: Obj = {scope: {"parameters": _QUERY, "get": op("list"), "post": op("post", body)}, f"{scope}/{{name}}": item}
    if "status" in t.subresources:
        out[f"{scope}/{{name}}/status"] = {"parameters": _QUERY, "get": op("get"), "put": op("put", body),
                                           "patch": op("patch", patch_body)}
    return out
