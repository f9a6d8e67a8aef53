"""A small JSON client of the Kubernetes REST API for tests and the dev cluster.

Objects are plain dicts, as `kubectl get -o json` shows them; resources are named by their
plural (`pods`, `podgroups`, `nodeclaims`) or found from an object's apiVersion and kind,
both resolved through the server's discovery documents (refreshed when a CRD appears).
"""

from __future__ import annotations

import builtins
import json
import ssl
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import httpx2

Obj = dict[str, Any]


class ApiError(RuntimeError):
    """A request the API server refused: its HTTP status, reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


@dataclass(frozen=True, slots=True)
class Resource:
    plural: str
    kind: str
    group_version: str
    """"v1" for the core group, "group/version" otherwise."""
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


class KubeClient:
    """Blocking JSON requests with one identity (a bearer token), TLS checked against the cluster's CA."""

    def __init__(self, server: str, token: str, ca_file: str, *, timeout_s: float = 30.0,
                 headers: Mapping[str, str] | None = None) -> None:
        """`headers` go with every request, e.g. Impersonate-User and Impersonate-Group to act as
        another identity (which the token's user must be allowed to impersonate)."""
        self.server = server
        self._http = httpx2.Client(base_url=server, headers={"Authorization": f"Bearer {token}", **(headers or {})},
                                   verify=ssl.create_default_context(cafile=ca_file), timeout=timeout_s,
                                   trust_env=False)
        self._by_plural: dict[str, Resource] = {}
        self._by_kind: dict[tuple[str, str], Resource] = {}

    def close(self) -> None:
        self._http.close()

    # --- raw requests

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                params: Mapping[str, str] | None = None) -> httpx2.Response:
        content = None if body is None else json.dumps(body).encode()
        return self._http.request(method, path, content=content, params=params,
                                  headers={"Content-Type": content_type} if body is not None else None)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             params: Mapping[str, str] | None = None) -> Obj:
        r = self.request(method, path, body, content_type=content_type, params=params)
        if r.status_code >= 400:
            try:
                status = r.json()
                raise ApiError(r.status_code, str(status.get("reason", "")), str(status.get("message", r.text)))
            except ValueError:
                raise ApiError(r.status_code, "", r.text) from None
        return r.json() if r.content else {}

    # --- discovery

    def resource(self, plural: str) -> Resource:
        if plural not in self._by_plural:
            self.discover()
        try:
            return self._by_plural[plural]
        except KeyError:
            raise ApiError(404, "NotFound", f"the server serves no resource named {plural!r}") from None

    def resource_of(self, obj: Mapping[str, Any]) -> Resource:
        key = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if key not in self._by_kind:
            self.discover()
        try:
            return self._by_kind[key]
        except KeyError:
            raise ApiError(404, "NotFound", f"the server serves no kind {key[1]!r} in {key[0]!r}") from None

    def discover(self) -> None:
        """Read every group's preferred version; the core group's names win over same-named others."""
        versions = ["v1"]
        for group in self.call("GET", "/apis").get("groups", []):
            versions.append(group["preferredVersion"]["groupVersion"])
        by_plural: dict[str, Resource] = {}
        by_kind: dict[tuple[str, str], Resource] = {}
        for gv in versions:
            path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
            for r in self.call("GET", path).get("resources", []):
                if "/" in r["name"]:
                    continue
                res = Resource(r["name"], r["kind"], gv, bool(r["namespaced"]))
                by_plural.setdefault(res.plural, res)
                by_kind.setdefault((gv, res.kind), res)
        self._by_plural, self._by_kind = by_plural, by_kind

    # --- objects

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        """POST `obj`; with `dry_run` the server admits and validates it (`?dryRun=All`) but stores nothing."""
        res = self.resource_of(obj)
        namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if res.namespaced else None)
        return self.call("POST", res.path(namespace), obj, params={"dryRun": "All"} if dry_run else None)

    def create_all(self, objs: Iterable[Mapping[str, Any]]) -> builtins.list[Obj]:
        return [self.create(o) for o in objs]

    def get(self, plural: str, name: str, namespace: str | None = None) -> Obj | None:
        res = self.resource(plural)
        r = self.request("GET", res.path(namespace or ("default" if res.namespaced else None), name))
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise ApiError(r.status_code, "", r.text)
        data: Obj = r.json()
        return data

    def list(self, plural: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None) -> builtins.list[Obj]:
        res = self.resource(plural)
        params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        items: builtins.list[Obj] = []
        token = ""
        while True:
            page = self.call("GET", res.path(namespace), params={**params, "limit": "5000",
                                                                 **({"continue": token} if token else {})})
            items.extend(page.get("items", []))
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def delete(self, plural: str, name: str, namespace: str | None = None, *, grace_period_s: int | None = None) -> None:
        res = self.resource(plural)
        body = None if grace_period_s is None else {"apiVersion": "v1", "kind": "DeleteOptions",
                                                    "gracePeriodSeconds": grace_period_s}
        r = self.request("DELETE", res.path(namespace or ("default" if res.namespaced else None), name), body)
        if r.status_code >= 400 and r.status_code != 404:
            raise ApiError(r.status_code, "", r.text)

    def patch(self, plural: str, name: str, patch: Any, namespace: str | None = None, *,
              subresource: str | None = None, content_type: str = "application/merge-patch+json") -> Obj:
        res = self.resource(plural)
        return self.call("PATCH", res.path(namespace or ("default" if res.namespaced else None), name, subresource),
                         patch, content_type=content_type)

    def update(self, obj: Mapping[str, Any], *, status: bool = False) -> Obj:
        res = self.resource_of(obj)
        meta = obj.get("metadata") or {}
        path = res.path(meta.get("namespace") or ("default" if res.namespaced else None), meta["name"],
                        "status" if status else None)
        return self.call("PUT", path, obj)
