"""From an HTTP request to an answer: URL layout, query parameters, content negotiation.

Resource URLs are the real ones:

    /api/v1/<plural>[/<name>[/<sub>]]                                cluster-scoped, or all namespaces
    /api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]                namespaced
    /apis/<group>/<version>/...                                      the same under a named group
    .../watch/...                                                    the legacy watch prefix

GET on a collection lists (or watches with `watch=true`), POST creates (or binds/evicts on
`pods/<name>/binding|eviction`), PUT updates, PATCH patches, DELETE deletes. `kubectl get`
asks for `as=Table` in its Accept header and gets a `meta.k8s.io/v1 Table`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from gpufleet.testing.apiserver import discovery, openapi, tables
from gpufleet.testing.apiserver.api import Api
from gpufleet.testing.apiserver.errors import ApiError, bad_request, status_body
from gpufleet.testing.apiserver.events import from_events_v1
from gpufleet.testing.apiserver.resources import ResourceType
from gpufleet.testing.apiserver.selectors import (fields_match, labels_match, parse_field_selector,
                                                  parse_label_selector)
from gpufleet.testing.apiserver.store import Expired
from gpufleet.testing.apiserver.watch import WatchOptions, stream

Obj = dict[str, Any]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1") or "/watch/" in self.path

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


@dataclass
class Response:
    code: int
    body: Obj | None = None
    text: str | None = None
    chunks: Iterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Context:
    """What a request may touch: the API, the server's address, watch settings."""

    api: Api
    address: Callable[[], str]
    bookmark_interval_s: float
    stopping: Callable[[], bool]


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


def dispatch(ctx: Context, req: Request) -> Response:
    path = req.path.rstrip("/") or "/"
    static = _static(ctx, path)
    if static is not None:
        return static
    target = _target(ctx, path)
    if target is None:
        return Response(404, status_body(404, "the server could not find the requested resource", "NotFound"))
    return _resource(ctx, req, target)


def _static(ctx: Context, path: str) -> Response | None:
    reg = ctx.api.registry
    if path in ("/healthz", "/readyz", "/livez"):
        return Response(200, text="ok")
    if path == "/version":
        return Response(200, discovery.version())
    if path == "/api":
        return Response(200, discovery.core_versions(ctx.address()))
    if path == "/apis":
        return Response(200, discovery.group_list(reg))
    if path.startswith("/openapi/"):
        doc = openapi.document(reg, path)
        return Response(200, doc) if doc is not None else \
            Response(404, status_body(404, "the server could not find the requested resource", "NotFound"))
    parts = path.strip("/").split("/")
    found: Obj | None = None
    if parts == ["api", "v1"]:
        found = discovery.resource_list(reg, "", "v1")
    elif len(parts) == 2 and parts[0] == "apis":
        found = discovery.group(reg, parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        found = discovery.resource_list(reg, parts[1], parts[2])
    else:
        return None
    if found is None:
        return Response(404, status_body(404, "the server could not find the requested resource", "NotFound"))
    return Response(200, found)


def _target(ctx: Context, path: str) -> Target | None:
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if rest[:1] == ["watch"]:
        rest = rest[1:]
    reg = ctx.api.registry
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = reg.lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = reg.lookup(group, version, rest[0])
    if rt is None:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in rt.subresources:
        return None
    return Target(rt, namespace, name, sub)


def _resource(ctx: Context, req: Request, t: Target) -> Response:
    api, q = ctx.api, req.query
    strict = q.get("fieldValidation") == "Strict"
    dry = q.get("dryRun") == "All"
    m = req.method
    if m == "GET" and req.watch and t.sub is None:
        return _watch(ctx, req, t)
    if t.name is None:
        if m == "GET":
            return _list(ctx, req, t)
        if m == "POST":
            if t.rt.plural == "bindings":
                body = req.json() or {}
                api.get(api.registry.resolve("namespaces"), None, t.namespace or "default")
                return Response(201, api.bind(t.namespace or "default", (body.get("metadata") or {}).get("name", ""),
                                              body))
            return Response(201, api.create(t.rt, t.namespace, req.json(), strict=strict, dry_run=dry))
        if m == "DELETE":
            return _delete_collection(ctx, req, t)
        raise ApiError(405, f"{m} is not supported on a collection", "MethodNotAllowed")
    if t.sub in ("binding", "eviction"):
        if m != "POST":
            raise ApiError(405, f"{m} is not supported on {t.sub}", "MethodNotAllowed")
        ns = t.namespace or "default"
        return Response(201, api.bind(ns, t.name, req.json()) if t.sub == "binding" else api.evict(ns, t.name, req.json()))
    if m == "GET":
        return _one(req, t, api.get(t.rt, t.namespace, t.name))
    if m == "PUT":
        return Response(200, api.update(t.rt, t.namespace, t.name, req.json(), subresource=t.sub, strict=strict,
                                        dry_run=dry))
    if m == "PATCH":
        return Response(200, api.patch(t.rt, t.namespace, t.name, req.headers.get("content-type", ""), req.json(),
                                       subresource=t.sub, strict=strict, dry_run=dry))
    if m == "DELETE":
        return Response(200, api.delete(t.rt, t.namespace, t.name, req.json(), dry_run=dry))
    raise ApiError(405, f"{m} is not supported", "MethodNotAllowed")


def table_wanted(req: Request) -> bool:
    accept = req.headers.get("accept", "")
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def _one(req: Request, t: Target, obj: Obj) -> Response:
    if table_wanted(req):
        stored = _stored_shape(t, [obj])
        return Response(200, tables.table(t.rt, [obj], stored, obj["metadata"].get("resourceVersion", ""),
                                          req.query.get("includeObject", "Metadata")))
    return Response(200, obj)


def _stored_shape(t: Target, objs: list[Obj]) -> list[Obj]:
    if t.rt.storage_key == "events" and t.rt.group:
        return [from_events_v1(o) for o in objs]
    return objs


def _filters(req: Request, t: Target) -> Callable[[Obj], bool]:
    labels = parse_label_selector(req.query.get("labelSelector", ""))
    fields = parse_field_selector(req.query.get("fieldSelector", ""), t.rt.storage_key)
    return lambda stored: labels_match(labels, stored) and fields_match(fields, stored)


def _list(ctx: Context, req: Request, t: Target) -> Response:
    keep = _filters(req, t)
    rv, stored = ctx.api.store.list(t.rt.storage_key, t.namespace if t.rt.namespaced else None)
    stored = [o for o in stored if keep(o)]
    token = req.query.get("continue")
    if token:
        start = _decode_continue(ctx, token)
        stored = [o for o in stored if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
    meta: Obj = {"resourceVersion": str(rv)}
    limit = int(req.query.get("limit") or 0)
    if limit and len(stored) > limit:
        stored = stored[:limit]
        last = stored[-1]["metadata"]
        meta["continue"] = _encode_continue(rv, (last.get("namespace", ""), last["name"]))
    items = [ctx.api.view(t.rt, o) for o in stored]
    if table_wanted(req):
        return Response(200, tables.table(t.rt, items, stored, str(rv), req.query.get("includeObject", "Metadata")))
    return Response(200, {"kind": t.rt.kind + "List", "apiVersion": t.rt.api_version, "metadata": meta,
                          "items": items})


def _delete_collection(ctx: Context, req: Request, t: Target) -> Response:
    keep = _filters(req, t)
    ctx.api.delete_collection(t.rt, t.namespace, keep)
    return Response(200, {"kind": t.rt.kind + "List", "apiVersion": t.rt.api_version,
                          "metadata": {"resourceVersion": str(ctx.api.store.rv)}, "items": []})


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(start)}).encode()).decode()


def _decode_continue(ctx: Context, token: str) -> tuple[str, str]:
    """The key a continued list starts after; 410 when its snapshot left the history, as in etcd."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError):
        raise bad_request(f"continue key is not valid: {token!r}") from None
    try:
        ctx.api.store.check_rv(rv)
    except Expired:
        raise ApiError(410, "The provided continue parameter is too old to display a consistent list result. "
                            "You can start a new list without the continue parameter.", "Expired") from None
    return start


def _watch(ctx: Context, req: Request, t: Target) -> Response:
    q = req.query
    rv_text = q.get("resourceVersion", "")
    try:
        since = int(rv_text) if rv_text not in ("", "0") else None
    except ValueError:
        raise bad_request(f"invalid resource version: {rv_text!r}") from None
    timeout = q.get("timeoutSeconds")
    options = WatchOptions(
        since=since, keep=_filters(req, t), bookmarks=q.get("allowWatchBookmarks") in ("true", "1"),
        bookmark_interval_s=ctx.bookmark_interval_s, timeout_s=float(timeout) if timeout else None,
        initial_events_end=q.get("sendInitialEvents") in ("true", "1"), table=table_wanted(req),
        include=q.get("includeObject", "Metadata"))
    namespace = t.namespace if t.rt.namespaced else None
    name = t.name
    if name is not None:  # GET .../watch/pods/NAME: a watch of one object
        base = options.keep
        options.keep = lambda o: o["metadata"]["name"] == name and base(o)
    return Response(200, chunks=stream(ctx.api, t.rt, namespace, options, ctx.stopping))
