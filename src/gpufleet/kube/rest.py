"""`Rest`: raw JSON requests to the API server, on lightkube's configured HTTP client.

lightkube resolves the kubeconfig or service account (server, token, client certificates,
CA) into an httpx client; the scheduler sends its requests on that client as plain dicts
instead of lightkube's typed models. Why: the scheduler's hot paths (a watch of every pod,
hundreds of binds a second) only read a handful of fields, the translation to model
objects wants the JSON anyway, and decoding every pod into a full typed model would cost
more than the scheduling itself. Errors become lightkube's `ApiError` (with the server's
Status) so that `errors.api_errors` translates them in one place.

Every method raises lightkube/httpx exceptions; callers wrap them in `api_errors` (usually
through a `Retrier`). Requests on any thread: the underlying client's pool is thread-safe.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping
from urllib.parse import quote

import httpx2
from lightkube.config import client_adapter
from lightkube.core.exceptions import ApiError

from gpufleet.kube.config import SCHEDULER_FIELD_MANAGER, ApiConfig

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def path(group_version: str, plural: str, name: str | None = None, namespace: str | None = None,
         sub: str | None = None) -> str:
    """`/api/v1/namespaces/ns/pods/p/binding` and the like; group_version "v1" is the core group."""
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if sub:
        parts.append(sub)
    return "/".join(parts)


class Rest:
    """A thin JSON client; `field_manager` is recorded on every write."""

    def __init__(self, config: ApiConfig, *, timeout_s: float = 10.0, field_manager: str = SCHEDULER_FIELD_MANAGER,
                 pool: int = 64) -> None:
        params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(timeout_s))
        kwargs = params.httpx_params(config.single)
        kwargs["limits"] = httpx2.Limits(max_connections=pool, max_keepalive_connections=pool)
        self._http = httpx2.Client(**kwargs)
        self._field_manager = field_manager
        self.source = config.source

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, url: str, *, body: Any = None, params: Mapping[str, str] | None = None,
                content_type: str = "application/json") -> Obj:
        query = dict(params or {})
        if method in ("POST", "PUT", "PATCH"):
            query.setdefault("fieldManager", self._field_manager)
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        resp = self._http.request(method, url, params=query, content=content, headers=headers)
        _raise_for_status(resp)
        data: Obj = resp.json() if resp.content else {}
        return data

    def get(self, url: str) -> Obj:
        return self.request("GET", url)

    def post(self, url: str, body: Obj) -> Obj:
        return self.request("POST", url, body=body)

    def put(self, url: str, body: Obj) -> Obj:
        return self.request("PUT", url, body=body)

    def patch(self, url: str, body: Obj, content_type: str = MERGE) -> Obj:
        return self.request("PATCH", url, body=body, content_type=content_type)

    def list(self, url: str, params: Mapping[str, str] | None = None) -> Obj:
        """One LIST (no paging: the informers want one consistent resourceVersion)."""
        return self.request("GET", url, params=params)

    def watch(self, url: str, params: Mapping[str, str], timeout_s: float) -> Iterator[Obj]:
        """Watch events (`{type, object}`) until the server ends the stream; bookmarks included.

        `timeout_s` bounds the wait for the next line, so a silently dead connection ends too.
        """
        query = dict(params)
        query.update({"watch": "true", "allowWatchBookmarks": "true"})
        timeout = httpx2.Timeout(10.0, read=timeout_s)
        with self._http.stream("GET", url, params=query, timeout=timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for_status(resp)
            for line in resp.iter_lines():
                if line:
                    event: Obj = json.loads(line)
                    yield event


def _raise_for_status(resp: httpx2.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        resp.raise_for_status()
    except httpx2.HTTPStatusError as exc:
        if "json" in resp.headers.get("Content-Type", ""):
            raise ApiError(request=exc.request, response=exc.response) from exc
        raise
