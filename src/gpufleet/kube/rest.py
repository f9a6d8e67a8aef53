"""`Rest`: raw JSON requests to the API server, with lightkube's connection settings.

lightkube resolves the kubeconfig or service account (server, token, client certificates,
CA) into httpx client settings; the scheduler sends its requests with them as plain dicts
instead of lightkube's typed models. Why: the scheduler's hot paths (a watch of every pod,
hundreds of binds a second) only read a handful of fields, the translation to model
objects wants the JSON anyway, and decoding every pod into a full typed model would cost
more than the scheduling itself. Requests and watches go over `keepalive.KeepAlive`
(a sixth of httpx's CPU per request: `http.client` connects, httptools reads the replies), or
over httpx when a proxy from the environment applies. JSON is msgspec's. Errors become lightkube's
`ApiError` (with the server's Status) so that `errors.api_errors` translates them in one place.

Every method raises lightkube/httpx exceptions; callers wrap them in `api_errors` (usually
through a `Retrier`). Requests on any thread: the connections are per thread (`KeepAlive`) or
in httpx's thread-safe pool.
"""

from __future__ import annotations

import ssl
from typing import Any, Iterator, Mapping
from urllib.parse import quote, urlencode, urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx2
import msgspec
from lightkube.config import client_adapter
from lightkube.core.exceptions import ApiError

from gpufleet.kube.config import SCHEDULER_FIELD_MANAGER, ApiConfig
from gpufleet.kube.decoders import build_decoders
from gpufleet.kube.http1 import Reply
from gpufleet.kube.keepalive import KeepAlive
from gpufleet.kube.tls import settle

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
        if isinstance(kwargs["verify"], ssl.SSLContext):
            kwargs["verify"] = settle(kwargs["verify"])  # shared by httpx's threads and KeepAlive (kube/tls.py)
        self._http = httpx2.Client(**kwargs)
        self._unary = (KeepAlive(kwargs["base_url"], kwargs["verify"], kwargs["auth"], timeout_s=timeout_s)
                       if not _proxied(kwargs["base_url"]) else None)
        """Requests other than watches, on `http.client` (a third of httpx's CPU per request,
        kube/keepalive.py); None where a proxy from the environment applies (httpx honours it)."""
        self._field_manager = field_manager
        self.source = config.source

    def close(self) -> None:
        self._http.close()
        if self._unary is not None:
            self._unary.close()

    def request(self, method: str, url: str, *, body: Any = None, params: Mapping[str, str] | None = None,
                content_type: str = "application/json") -> Obj:
        query = dict(params or {})
        if method in ("POST", "PUT", "PATCH"):
            query.setdefault("fieldManager", self._field_manager)
        content = None if body is None else _encode(body)
        if self._unary is None:
            headers = {"Content-Type": content_type} if content is not None else None
            resp = self._http.request(method, url, params=query, content=content, headers=headers)
            _raise_for_status(resp)
            reply = resp.content
        else:
            target = f"{url}?{urlencode(query)}" if query else url
            status, headers_back, reply = self._unary.request(method, target, content,
                                                              content_type if content is not None else None)
            if status >= 400:
                _raise_for_status(httpx2.Response(status, headers=headers_back, content=reply,
                                                  request=httpx2.Request(method, self._unary.base_url + target)))
        data: Obj = _decode(reply) if reply else {}
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
        if self._unary is not None:
            yield from _events(_body(self._unary, f"{url}?{urlencode(query)}", timeout_s))
            return
        timeout = httpx2.Timeout(10.0, read=timeout_s)
        with self._http.stream("GET", url, params=query, timeout=timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for_status(resp)
            yield from _events(resp.iter_bytes())


def _body(client: KeepAlive, target: str, timeout_s: float) -> Iterator[bytes]:
    """The body of a streamed GET; an error status raised as `_raise_for_status` does."""
    for piece in client.stream(target, timeout_s):
        if isinstance(piece, Reply):
            _raise_for_status(httpx2.Response(piece.status, headers=piece.headers, content=piece.content,
                                              request=httpx2.Request("GET", client.base_url + target)))
            return
        yield piece


def _events(pieces: Iterator[bytes]) -> Iterator[Obj]:
    """One decoded object per line of a watch body (the server ends each event with a newline)."""
    tail = b""
    for piece in pieces:
        *lines, tail = (tail + piece).split(b"\n")
        for line in lines:
            if line.strip():
                event: Obj = _decode(line)
                yield event
    if tail.strip():
        yield _decode(tail)


build_decoders()  # before threads raise lightkube's ApiError, which decodes a Status
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode
"""msgspec's JSON codec: the same dicts as the json module's, in a third of the time (a watch of
every pod decodes one object per bind)."""


def _proxied(base_url: str) -> bool:
    """Whether a proxy from the environment applies to the server (as httpx's trust_env reads it)."""
    parts = urlsplit(base_url)
    proxies = getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not proxy_bypass(parts.hostname or "")


def _raise_for_status(resp: httpx2.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        resp.raise_for_status()
    except httpx2.HTTPStatusError as exc:
        if "json" in resp.headers.get("Content-Type", ""):
            raise ApiError(request=exc.request, response=exc.response) from exc
        raise
