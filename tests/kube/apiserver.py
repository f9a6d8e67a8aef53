"""A fake Kubernetes API server for the agent's endpoints, on 127.0.0.1 in a thread.

It speaks just what `KubeNodeApi` uses, the way the real server does:

* `GET /api/v1/pods?fieldSelector=spec.nodeName=N`: a PodList of the pods bound to N;
* `GET /api/v1/nodes/N`, `PATCH /api/v1/nodes/N`: JSON merge patch (RFC 7386), or strategic
  merge patch; a `metadata.resourceVersion` in the body that is not the current one is a
  409 Conflict, as optimistic concurrency demands;
* `PATCH /api/v1/nodes/N/status`: only `status` changes; in a strategic merge patch
  `conditions` merge by `type`, as the real NodeStatus schema declares;
* errors as `Status` objects; anything else is 404.

Tests script failures with `fail()` (a status, optional Retry-After, optionally without a
Content-Type, as a bare proxy reply) and `delay()` (a reply held back, to provoke client
timeouts), each for the next N matching requests, and races with `meanwhile()` (another
client's write just before a request is served). Every request is recorded.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
STRATEGIC_MERGE_KEYS = {"conditions": "type"}
"""The list fields of Node the agent patches by strategic merge, with their patchMergeKey."""
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
           415: "UnsupportedMediaType", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any


@dataclass
class _Rule:
    method: str | None
    path: str | None
    times: int
    status: int = 0
    delay_s: float = 0.0
    retry_after: str | None = None
    content_type: bool = True
    message: str = ""
    meanwhile: Callable[[FakeApiServer], None] | None = None


@dataclass
class FakeApiServer:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # releases delayed replies
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(5)

    def add_node(self, name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                 conditions: list[dict[str, str]] | None = None) -> None:
        self.nodes[name] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                                         "labels": dict(labels or {}), "annotations": {}},
                            "spec": {"taints": list(taints or [])},
                            "status": {"conditions": list(conditions or []), "capacity": {"cpu": "64"}}}

    def add_pod(self, namespace: str, name: str, node: str | None, scheduler: str = "default-scheduler",
                annotations: dict[str, str] | None = None, phase: str = "Pending",
                created: str = "2025-01-01T00:00:00Z") -> None:
        self.pods.append({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}",
                                       "creationTimestamp": created, "annotations": dict(annotations or {})},
                          "spec": {"nodeName": node, "schedulerName": scheduler,
                                   "containers": [{"name": "main", "image": "busybox"}]},
                          "status": {"phase": phase}})

    def fail(self, status: int, times: int = 1, *, method: str | None = None, path: str | None = None,
             retry_after: str | None = None, content_type: bool = True, message: str = "") -> None:
        """Answer the next `times` requests matching `method` and `path` (None: any) with `status`."""
        with self._lock:
            self._rules.append(_Rule(method, path, times, status=status, retry_after=retry_after,
                                     content_type=content_type, message=message))

    def delay(self, seconds: float, times: int = 1, *, method: str | None = None, path: str | None = None) -> None:
        """Hold back the reply to the next `times` matching requests by `seconds` (then serve them)."""
        with self._lock:
            self._rules.append(_Rule(method, path, times, delay_s=seconds))

    def meanwhile(self, change: Callable[[FakeApiServer], None], *, method: str, path: str) -> None:
        """Call `change(self)` just before serving the next matching request: another client's racing write."""
        with self._lock:
            self._rules.append(_Rule(method, path, 1, meanwhile=change))

    def bump(self, node: str) -> None:
        """Record a change to `node` made by someone else: a new resourceVersion."""
        meta = self.nodes[node]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and r.path == path)

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self.nodes[name])

    def _take_rule(self, method: str, path: str) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.method in (None, method) and rule.path in (None, path):
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
                    return rule
        return None

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def _serve(self, req: Request) -> tuple[int, dict[str, Any]]:
        """The reply to one request that no rule intercepted."""
        with self._lock:
            self.requests.append(req)
            parts = req.path.strip("/").split("/")
            if req.method == "GET" and parts == ["api", "v1", "pods"]:
                return self._list_pods(req.query)
            if parts[:3] != ["api", "v1", "nodes"] or len(parts) not in (4, 5):
                return _status(404, f"the server could not find the requested resource ({req.path})")
            node = self.nodes.get(parts[3])
            if node is None:
                return _status(404, f'nodes "{parts[3]}" not found')
            subresource = parts[4] if len(parts) == 5 else None
            if subresource not in (None, "status"):
                return _status(404, f"no subresource {subresource}")
            if req.method == "GET":
                return 200, copy.deepcopy(node)
            if req.method == "PATCH":
                return self._patch_node(node, req, subresource == "status")
            return _status(405, f"{req.method} is not supported here")

    def _list_pods(self, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        selector = query.get("fieldSelector", [""])[0]
        key, _, node = selector.partition("=")
        if key != "spec.nodeName" or not node:
            return _status(400, f"this fake supports only fieldSelector=spec.nodeName=N, got {selector!r}")
        items = [copy.deepcopy(p) for p in self.pods if p["spec"].get("nodeName") == node]
        return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": items}

    def _patch_node(self, node: dict[str, Any], req: Request, status_only: bool) -> tuple[int, dict[str, Any]]:
        if req.content_type not in (MERGE, STRATEGIC) or not isinstance(req.body, dict):
            return _status(415, f"unsupported patch type {req.content_type!r}")
        wanted_version = req.body.get("metadata", {}).get("resourceVersion")
        if wanted_version is not None and wanted_version != node["metadata"]["resourceVersion"]:
            return _status(409, 'Operation cannot be fulfilled on nodes: the object has been modified; '
                                'please apply your changes to the latest version and try again')
        patched = merge(node, req.body, strategic=req.content_type == STRATEGIC)
        if status_only:  # the status subresource changes status only, like the real server
            patched = {**node, "status": patched["status"]}
        else:
            patched["status"] = node["status"]
        patched["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        node.clear()
        node.update(patched)
        return 200, copy.deepcopy(node)


def merge(target: Any, patch: Any, *, strategic: bool = False, key: str = "") -> Any:
    """RFC 7386 merge patch; with `strategic`, lists named in STRATEGIC_MERGE_KEYS merge by their key."""
    if strategic and key in STRATEGIC_MERGE_KEYS and isinstance(patch, list) and isinstance(target, list):
        merge_key = STRATEGIC_MERGE_KEYS[key]
        merged = {item[merge_key]: item for item in target}
        for item in patch:
            merged[item[merge_key]] = merge(merged.get(item[merge_key]), item, strategic=True)
        return list(merged.values())
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge(result.get(k), v, strategic=strategic, key=k)
    return result


def _status(code: int, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                  "message": message, "reason": REASONS.get(code, "Unknown"), "code": code}


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real server and httpx use

        def setup(self) -> None:
            super().setup()
            # headers and body go out in two writes; without this, Nagle plus delayed ACKs add 40 ms to each
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            self._handle()

        def do_PATCH(self) -> None:
            self._handle()

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `requests`
            pass

        def _handle(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            rule = server._take_rule(self.command, url.path)
            if rule is not None and rule.meanwhile is not None:
                with server._lock:
                    rule.meanwhile(server)
            elif rule is not None and rule.delay_s:
                server._closing.wait(rule.delay_s)
            elif rule is not None:
                server._record(Request(self.command, url.path, parse_qs(url.query), "", None))
                code, body = _status(rule.status, rule.message or f"injected {rule.status}")
                headers = {"Retry-After": rule.retry_after} if rule.retry_after else {}
                self._reply(code, body if rule.content_type else None, headers)
                return
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(*_status(400, "the body is not JSON"))
                return
            self._reply(*server._serve(Request(self.command, url.path, parse_qs(url.query),
                                               self.headers.get("Content-Type", ""), body)))

        def _reply(self, code: int, body: dict[str, Any] | None, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            try:
                self.send_response(code)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (a timeout test): nothing to tell it
                self.close_connection = True

    return Handler
