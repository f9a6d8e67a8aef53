"""The HTTP/1.1 front: `ThreadingHTTPServer`, keep-alive, chunked watch streams.

One thread per connection (clients keep connections alive, so a scheduler's binds reuse
one socket). Each answer goes out in a single write with TCP_NODELAY, so small replies are
not held back by Nagle's algorithm. Failure-injection rules are consulted before routing;
every request is logged with its final status.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpufleet.testing.apiserver.errors import ApiError, status_body
from gpufleet.testing.apiserver.injection import Rules
from gpufleet.testing.apiserver.routes import Context, Request, Response, dispatch


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], ctx: Context, rules: Rules, stopping: threading.Event) -> None:
        super().__init__(address, Handler)
        self.ctx = ctx
        self.rules = rules
        self.stopping = stopping
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-request is normal in tests (timeouts, closed watches)."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def track(self, sock: socket.socket, open_: bool) -> None:
        with self._open_lock:
            if open_:
                self._open.add(sock)
            else:
                self._open.discard(sock)

    def drop_connections(self) -> None:
        """Close every client connection, as a dying API server would (keep-alive ones included)."""
        with self._open_lock:
            socks = list(self._open)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpServer

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.request, True)

    def finish(self) -> None:
        self.server.track(self.request, False)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr noise
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        url = urlsplit(self.path)
        req = Request(self.command, url.path, dict(parse_qsl(url.query, keep_blank_values=True)),
                      {k.lower(): v for k, v in self.headers.items()}, self._body())
        srv = self.server
        rule = srv.rules.take(req.method, req.path, req.watch)
        if rule is not None:
            if rule.delay_s:
                srv.stopping.wait(rule.delay_s)
            if rule.status is not None:
                headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
                body = status_body(rule.status, rule.message or f"injected failure ({rule.status})")
                self._send(Response(rule.status, body, headers=headers), req)
                return
        try:
            response = dispatch(srv.ctx, req)
        except ApiError as exc:
            response = Response(exc.code, exc.status())
        except Exception as exc:  # a bug in the server: answer 500 rather than hang the client
            response = Response(500, status_body(500, f"internal error in the test API server: {exc!r}"))
        self._send(response, req)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, r: Response, req: Request) -> None:
        self.server.rules.record(req.method, req.path, r.code)
        try:
            if r.chunks is not None:
                self._stream(r)
                return
            if r.text is not None:
                data, ctype = r.text.encode(), "text/plain; charset=utf-8"
            else:
                data, ctype = json.dumps(r.body, separators=(",", ":")).encode(), "application/json"
            head = [f"HTTP/1.1 {r.code} {self.responses.get(r.code, ('',))[0]}", f"Content-Type: {ctype}",
                    f"Content-Length: {len(data)}", "Cache-Control: no-cache, private"]
            head += [f"{k}: {v}" for k, v in r.headers.items()]
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        except OSError:  # the client went away (a timeout test)
            self.close_connection = True

    def _stream(self, r: Response) -> None:
        assert r.chunks is not None
        head = [f"HTTP/1.1 {r.code} OK", "Content-Type: application/json", "Transfer-Encoding: chunked",
                "Cache-Control: no-cache, private"]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            for data in r.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        finally:
            close = getattr(r.chunks, "close", None)
            if close is not None:
                close()
