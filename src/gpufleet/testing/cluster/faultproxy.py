"""`FaultProxy`: an HTTPS proxy between one client (the scheduler) and kube-apiserver that
injects faults at run time, for tests of how the client copes with a misbehaving API.

    with FaultProxy.for_cluster(cluster, tmp_path / "proxy") as proxy:
        proxy.kubeconfig(tmp_path / "kubeconfig", token)      # the client talks to the proxy
        proxy.inject(Rule("POST", r"/binding$", Reply(500), times=40))
        proxy.inject(Rule("GET", r"^/api/v1/pods$", Reply(410), watch=True))
        proxy.cut_watches()
        assert proxy.injected_count(Reply(500)) == 40

Design decisions:

- **The real server decides everything else.** The proxy terminates TLS with a certificate
  for 127.0.0.1 signed by the cluster's CA and forwards each request over TLS (verifying that
  CA) with the client's headers unchanged, Authorization included: the client keeps its own
  identity and kube-apiserver's RBAC and audit log apply as without the proxy.
- **Nothing is buffered that kube-apiserver streams.** A chunked reply (every watch) is
  re-chunked as its chunks arrive, so a watch event reaches the client when the server sends it.
- **One upstream connection per client connection**, HTTP/1.1 keep-alive on both sides, one
  thread each (the standard library's `ThreadingHTTPServer`): a few dozen connections at most.
- **Faults are rules** matched in the order given by method, a regular expression searched in
  the path (query left out) and, optionally, whether the request is a watch (`watch=true`);
  each applies `times` times. Error replies carry a Kubernetes `Status` as kube-apiserver
  writes one; 410 for a watch is what kube-apiserver sends for an expired resourceVersion:
  200 and one ERROR event holding the Status (apiserver's cacher, `newErrWatcher`).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from gpufleet.testing.cluster.pki import issue_serving_cert

if TYPE_CHECKING:
    from gpufleet.testing.cluster.cluster import Cluster

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "host", "content-length"})
REASONS = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 410: "Expired", 429: "TooManyRequests",
           500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
"""metav1.StatusReason of each code, as kube-apiserver names them."""
UPSTREAM_TIMEOUT_S = 600.0
"""Longer than any watch's timeoutSeconds: a watch ends when the server ends it."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer `code` with a Kubernetes Status instead of forwarding (the server never sees it)."""

    code: int
    retry_after_s: int | None = None
    """Sent as the Retry-After header and the Status's details.retryAfterSeconds."""


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the request `seconds`, then forward it: a client with a shorter timeout gives up,
    and the server still receives and applies the request, late."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reset:
    """Reset the client's connection (TCP RST): before forwarding (the server never sees the
    request), or after the server answered (it applied the request; the reply is lost)."""

    after_forward: bool = False


Fault = Reply | Delay | Reset


@dataclass(slots=True)
class Rule:
    method: str
    path: str
    """A regular expression searched in the request's path (without the query)."""
    fault: Fault
    times: int = 1
    """How many matching requests get the fault; the rule is spent after that."""
    watch: bool | None = None
    """True: watches only; False: everything but watches; None: both."""

    def matches(self, method: str, path: str, watch: bool) -> bool:
        return (self.times > 0 and method == self.method and (self.watch is None or self.watch == watch)
                and re.search(self.path, path) is not None)


@dataclass(frozen=True, slots=True)
class Injected:
    """One fault the proxy injected."""

    method: str
    path: str
    watch: bool
    fault: Fault
    at: float
    """time.monotonic() when it was injected."""


class FaultProxy:
    def __init__(self, upstream: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        target = urlsplit(upstream)
        self.upstream_host, self.upstream_port = target.hostname or "127.0.0.1", target.port or 443
        self.ca_file = ca_file
        self.upstream_tls = ssl.create_default_context(cafile=str(ca_file))
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(str(cert_file), str(key_file))
        self.tls.set_alpn_protocols(["http/1.1"])
        self._rules: list[Rule] = []
        self._injected: list[Injected] = []
        self._watches: set[_Handler] = set()
        self._lock = threading.Lock()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)

    @classmethod
    def for_cluster(cls, cluster: Cluster, directory: Path) -> FaultProxy:
        """A proxy in front of `cluster`'s kube-apiserver, its certificate issued by the cluster's CA."""
        assert cluster.pki is not None, "the cluster is not started"
        cert, key = issue_serving_cert(cluster.pki, directory, "faultproxy")
        return cls(cluster.url, cluster.ca_file, cert, key)

    # --- lifecycle and access

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.cut_watches()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path, token: str, *, user: str = "client", namespace: str = "default") -> Path:
        """A kubeconfig that reaches kube-apiserver through this proxy with `token`."""
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "faultproxy",
            "clusters": [{"name": "faultproxy", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "faultproxy", "context": {"cluster": "faultproxy", "user": user,
                                                            "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1))
        path.chmod(0o600)
        return path

    # --- faults

    def inject(self, *rules: Rule) -> None:
        """Add rules after those already there (the first matching rule with uses left applies)."""
        with self._lock:
            self._rules.extend(rules)

    def pending(self) -> int:
        """Fault uses not yet spent, over all rules."""
        with self._lock:
            return sum(r.times for r in self._rules)

    def cut_watches(self) -> int:
        """End every open watch now, as a dropped connection does (those still waiting for
        kube-apiserver's reply headers too); how many were open."""
        with self._lock:
            watches = list(self._watches)
        for handler in watches:
            handler.cut()
        return len(watches)

    @property
    def injected(self) -> list[Injected]:
        with self._lock:
            return list(self._injected)

    def injected_count(self, fault: Fault, method: str | None = None) -> int:
        return sum(1 for i in self.injected if i.fault == fault and (method is None or i.method == method))

    def _take(self, method: str, path: str, watch: bool) -> Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path, watch):
                    rule.times -= 1
                    self._injected.append(Injected(method, path, watch, rule.fault, time.monotonic()))
                    return rule.fault
        return None

    def _watching(self, handler: _Handler, on: bool) -> None:
        with self._lock:
            (self._watches.add if on else self._watches.discard)(handler)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that left (timed out, was reset) is routine
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    _upstream: http.client.HTTPSConnection | None = None

    # The TLS handshake happens here, on the connection's own thread, not in the accept loop.
    def setup(self) -> None:
        self.request = self.server.proxy.tls.wrap_socket(self.request, server_side=True)
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        self._close_upstream()
        self.request.close()

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the proxy's record of faults is `FaultProxy.injected`

    def do_GET(self) -> None:
        self._proxy()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def cut(self) -> None:
        for sock in (self.request, self._upstream.sock if self._upstream else None):
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _proxy(self) -> None:
        url = urlsplit(self.path)
        watch = parse_qs(url.query).get("watch", [""])[0] in ("true", "1")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fault = self.server.proxy._take(self.command, url.path, watch)
        if isinstance(fault, Reply):
            self._reply(fault, watch, parse_qs(url.query).get("resourceVersion", ["0"])[0])
            return
        if isinstance(fault, Reset) and not fault.after_forward:
            self._reset()
            return
        if isinstance(fault, Delay):
            time.sleep(fault.seconds)
        # A watch is open from the moment it is sent upstream: its reply headers come only once
        # kube-apiserver's handlers have run (authentication, authorization, the watch's setup),
        # which on a busy machine takes a while, and a cut must reach it meanwhile.
        if watch:
            self.server.proxy._watching(self, True)
        try:
            self._forward_and_relay(body, fault)
        finally:
            if watch:
                self.server.proxy._watching(self, False)

    def _forward_and_relay(self, body: bytes, fault: Fault | None) -> None:
        try:
            response = self._forward(body)
        except (OSError, http.client.HTTPException):
            self._reset()  # the server is gone: the client sees its connection dropped
            return
        if isinstance(fault, Reset):
            response.read()
            self._reset()
            return
        self._relay(response)

    def _forward(self, body: bytes) -> http.client.HTTPResponse:
        """Send the request upstream, on this connection's upstream connection; a kept-alive
        connection the server closed meanwhile is replaced once."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        for attempt in (1, 2):
            reused = self._upstream is not None
            if self._upstream is None:
                p = self.server.proxy
                self._upstream = http.client.HTTPSConnection(p.upstream_host, p.upstream_port,
                                                             timeout=UPSTREAM_TIMEOUT_S, context=p.upstream_tls)
            try:
                self._upstream.request(self.command, self.path, body=body if body else None, headers=headers)
                return self._upstream.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest):
                self._close_upstream()
                if not reused or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        for k, v in response.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        if response.getheader("Content-Length") is not None or response.status in (204, 304):
            data = response.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while chunk := response.read1(65536):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException, ValueError):
            # cut, or the server went away: end the client's stream mid-chunk, as a dropped
            # connection does (no terminating chunk), and drop this upstream connection
            self.close_connection = True
            self._close_upstream()

    def _reply(self, fault: Reply, watch: bool, version: str) -> None:
        reason = REASONS.get(fault.code, "InternalError")
        message = (f"too old resource version: {version} (injected by faultproxy)" if fault.code == 410
                   else f"{reason}: injected by faultproxy")
        status: dict[str, object] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": message, "reason": reason, "code": fault.code}
        if fault.retry_after_s is not None:
            status["details"] = {"retryAfterSeconds": fault.retry_after_s}
        if watch and fault.code == 410:  # kube-apiserver: 200, then one ERROR event, then the end
            self._send(200, json.dumps({"type": "ERROR", "object": status}).encode() + b"\n", fault.retry_after_s)
        else:
            self._send(fault.code, json.dumps(status).encode(), fault.retry_after_s)

    def _send(self, code: int, data: bytes, retry_after_s: int | None) -> None:
        self.send_response_only(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after_s is not None:
            self.send_header("Retry-After", str(retry_after_s))
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        """Close with SO_LINGER 0, so the client gets a TCP RST rather than an orderly close."""
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self._close_upstream()

    def _close_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None
