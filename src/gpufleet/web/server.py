"""`DashboardServer`: the dashboard page, its assets and its JSON over HTTP (standard library only).

    GET /                 the page (static/index.html); /app.js and /app.css beside it
    GET /api/fleet        the latest frame as `view.document` JSON; ?frame=N for a replay's frame N
    GET /api/frames       {"count": N, "times": [...]} (one frame unless replaying)
    GET /api/stream       server-sent events: `fleet` with the document each time the source changes
    GET /healthz          ok

Everything is served from the package (no CDN, nothing fetched from elsewhere), with a
Content-Security-Policy that lets the page load only its own script, style and data. The page
writes every name it shows as text, never as HTML: pod, queue and label values come from
tenants. The server only reads; it binds to 127.0.0.1 unless told otherwise, since what it
shows (every namespace's pods) is for the cluster's operators (`kubectl port-forward`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpufleet.web.sources import Source
from gpufleet.web.view import document

log = logging.getLogger(__name__)
ASSETS = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/app.css": ("app.css", "text/css; charset=utf-8")}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@lru_cache(maxsize=None)
def asset(name: str) -> bytes:
    return (resources.files("gpufleet.web") / "static" / name).read_bytes()


class DashboardServer:
    def __init__(self, source: Source, address: str = "127.0.0.1", port: int = 0, *, poll_s: float = 0.5,
                 keepalive_s: float = 15.0) -> None:
        self.source = source
        self.poll_s, self.keepalive_s = poll_s, keepalive_s
        self._stop = threading.Event()
        self._docs: dict[tuple[int, int], bytes] = {}
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((address, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="dashboard", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.httpd.server_address[0])
        return f"http://{'localhost' if host in ('0.0.0.0', '127.0.0.1', '') else host}:{self.port}/"

    def start(self) -> DashboardServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def frame_json(self, frame: int | None) -> tuple[int, bytes]:
        """(version, document) of a frame; the latest by default. Built once per version."""
        last = self.source.frames() - 1
        i = last if frame is None else frame
        if not 0 <= i <= last:
            raise IndexError(f"frame {i} does not exist; frames are 0..{last}")
        version = self.source.version() if i == last else 0
        key = (i, version)
        with self._lock:
            body = self._docs.get(key)
            if body is None:
                doc: dict[str, Any] = document(self.source.fleet(i))
                doc["frame"], doc["frames"], doc["version"] = i, last + 1, version
                body = json.dumps(doc, separators=(",", ":")).encode()
                if i == last:  # keep replay frames, and only the newest live one
                    self._docs = {k: v for k, v in self._docs.items() if k[0] != last}
                self._docs[key] = body
        return version, body

    def stream(self, write: Any) -> None:
        """Server-sent events until the client goes or the server stops: the latest document now
        and whenever the source's version changes; a comment every `keepalive_s` otherwise."""
        sent = -1
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            version, body = self.frame_json(None)
            if version != sent:
                write(b"event: fleet\ndata: " + body + b"\n\n")
                sent, quiet_since = version, time.monotonic()
            elif time.monotonic() - quiet_since >= self.keepalive_s:
                write(b": keepalive\n\n")
                quiet_since = time.monotonic()
            self._stop.wait(self.poll_s)


def _handler(server: DashboardServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                url = urlsplit(self.path)
            except ValueError:  # `//[x`: an unclosed IPv6 host (found by fuzzing; a traceback before)
                return self._reply(400, b"bad request path\n")
            if url.path in ASSETS:
                name, kind = ASSETS[url.path]
                return self._reply(200, asset(name), kind)
            if url.path == "/favicon.ico":
                return self._reply(204, b"")
            if url.path == "/healthz":
                return self._reply(200, b"ok\n")
            if url.path == "/api/frames":
                body = json.dumps({"count": server.source.frames(), "times": server.source.times()}).encode()
                return self._reply(200, body, "application/json")
            if url.path == "/api/fleet":
                frame = parse_qs(url.query).get("frame", [None])[0]
                try:
                    _, body = server.frame_json(None if frame is None else int(frame))
                except (ValueError, IndexError) as exc:
                    text = str(exc) if isinstance(exc, IndexError) else f"frame must be a whole number, got {frame!r}"
                    return self._reply(400, json.dumps({"error": text}).encode(), "application/json")
                return self._reply(200, body, "application/json")
            if url.path == "/api/stream":
                return self._stream()
            self._reply(404, b"not found\n")

        def do_POST(self) -> None:  # noqa: N802
            self._reply(405, b"the dashboard only reads\n", extra={"Allow": "GET, HEAD"})

        do_PUT = do_DELETE = do_PATCH = do_POST  # noqa: N815

        def _stream(self) -> None:
            self.send_response(200)
            for k, v in {**SECURITY_HEADERS, "Content-Type": "text/event-stream", "Cache-Control": "no-store",
                         "Connection": "close"}.items():
                self.send_header(k, v)
            self.end_headers()
            self.close_connection = True

            def write(data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
            try:
                server.stream(write)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the page went away

        def _reply(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8",
                   extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for k, v in {**SECURITY_HEADERS, "Content-Type": kind, "Content-Length": str(len(body)),
                         "Cache-Control": "no-store", **(extra or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802
            self.do_GET()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (inherited name)
            log.debug("dashboard: " + format, *args)

    return Handler
