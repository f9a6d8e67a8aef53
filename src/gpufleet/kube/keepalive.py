"""`KeepAlive`: requests on one keep-alive HTTP/1.1 connection per thread, and watches on one
connection each: `http.client` connects, `kube/http1.py` writes the requests and reads the replies.

Why not httpx for these: the live scheduler sends hundreds of Binding POSTs a second from one
Python process, whose GIL the watch of every pod shares. Measured on the 2-core development
machine against kube-apiserver (16 threads, 3,000 binds each, docs/performance.md): httpx2 costs
0.64-0.68 ms of CPU per bind, httpx2 over a plain `http.client` transport 0.52 ms, `http.client`
alone 0.23-0.25 ms; with its replies read by httptools instead (kube/http1.py), less than half
of that (bench/client_cpu.py). A watch's body (`stream`) is read the same way: reading each
event through httpx's stream costs more than decoding it.

What is kept from the httpx client it stands beside:
- the TLS context lightkube built from the kubeconfig (CA, client certificate);
- the credentials: lightkube's httpx `Auth` is asked for its `Authorization` header, and asked
  again after a 401 (its answer to a 401: the token-file auth of in-cluster configs re-reads a
  rotated token);
- failures, raised as the httpx2 exceptions of the same meaning, so `errors.api_errors`
  classifies them unchanged. `ConnectError`/`ConnectTimeout` only when nothing was sent (the
  binder counts those as certainly not applied); a failure after the request went out is a
  `WriteError`, `ReadError`, `ReadTimeout` or `RemoteProtocolError` (maybe applied).

A connection the server closed while idle (readable before a request, since the server sends
nothing unasked on HTTP/1.1) is replaced before it is used, as httpcore does.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
from typing import Iterator

import httpx2

from gpufleet.kube.http1 import ProtocolError, Reply, ReplyReader, request_bytes

TIMEOUT_S = 10.0


class KeepAlive:
    def __init__(self, base_url: str, context: ssl.SSLContext | None, auth: httpx2.Auth | None, *,
                 timeout_s: float = TIMEOUT_S) -> None:
        url = httpx2.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"not an http(s) server URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._https = url.scheme == "https"
        self._host, self._port = url.host, url.port or (443 if self._https else 80)
        self._prefix = url.raw_path.decode("ascii").rstrip("/")
        host = f"[{url.host}]" if ":" in url.host else url.host
        self._host_header = host if url.port is None else f"{host}:{url.port}"
        self._context = context if self._https else None
        self._auth, self._timeout = auth, timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[http.client.HTTPConnection] = []
        self._streams: list[http.client.HTTPConnection] = []
        self._header: str | None = None
        self._header_known = False
        self._closed = False

    def request(self, method: str, target: str, body: bytes | None, content_type: str | None) -> Reply:
        """One request (`target`: path and query); a 401 asks the credentials again and tries once more."""
        reply = self._send(method, target, body, content_type)
        if reply.status == 401 and self._auth is not None:
            self._refresh_header()
            reply = self._send(method, target, body, content_type)
        return reply

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
            streams = list(self._streams)
        for c in connections:
            c.close()
        for c in streams:  # a blocked read ends at once (close alone would leave it waiting)
            if c.sock is not None:
                try:
                    c.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # -- credentials ------------------------------------------------------------------------
    def _authorization(self) -> str | None:
        if not self._header_known:
            with self._lock:
                if not self._header_known:
                    self._header = self._ask_auth(unauthorized=False)
                    self._header_known = True
        return self._header

    def _refresh_header(self) -> None:
        with self._lock:
            self._header = self._ask_auth(unauthorized=True)
            self._header_known = True

    def _ask_auth(self, *, unauthorized: bool) -> str | None:
        """The header lightkube's auth sets on a request (after a 401 too, when `unauthorized`)."""
        if self._auth is None:
            return None
        request = httpx2.Request("GET", self.base_url)
        flow = self._auth.sync_auth_flow(request)
        request = next(flow)
        if unauthorized:
            try:
                request = flow.send(httpx2.Response(401, request=request))
            except StopIteration:
                pass
        return request.headers.get("Authorization")

    # -- connections ------------------------------------------------------------------------
    def _connection(self, request: _LazyRequest) -> http.client.HTTPConnection:
        if self._closed:
            raise RuntimeError("the client has been closed")  # as httpx says it (EventRecorder expects it)
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None and _readable(conn.sock):
            conn.close()  # closed by the server while idle (or a stray byte): never reuse it
        if conn is None:
            conn = self._new_connection()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        if conn.sock is None:
            self._connect(conn, request)
        return conn

    def _new_connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _connect(self, conn: http.client.HTTPConnection, request: _LazyRequest) -> None:
        try:
            conn.connect()
        except (socket.timeout, TimeoutError) as exc:
            conn.close()
            raise httpx2.ConnectTimeout(f"connecting to {self._host}:{self._port}: {exc}",
                                        request=request.get()) from exc
        except OSError as exc:  # refused, unreachable, TLS handshake failures (ssl.SSLError is an OSError)
            conn.close()
            raise httpx2.ConnectError(f"connecting to {self._host}:{self._port}: {exc}",
                                      request=request.get()) from exc

    def _send(self, method: str, target: str, body: bytes | None, content_type: str | None) -> Reply:
        request = _LazyRequest(method, self, target)
        conn = self._connection(request)
        sent = [False]
        with _failures(conn, request, sent):
            sock = _socket(conn)
            sock.sendall(request_bytes(method, self._prefix + target, self._host_header,
                                       self._headers(content_type), body))
            sent[0] = True
            reader = ReplyReader(sock)
            headers = reader.head()
            reply = Reply(reader.status, headers, reader.rest())
            if not reader.keep_alive:
                conn.close()
        return reply

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "gpufleet"}
        if (authorization := self._authorization()) is not None:
            headers["Authorization"] = authorization
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    # -- streams ------------------------------------------------------------------------------
    def stream(self, target: str, read_timeout_s: float) -> Iterator[bytes | Reply]:
        """A GET whose body is read as it arrives (a watch), on a connection of its own.

        Yields the body's pieces as the server sends them; when the server answers 400 or more
        (after one retry of a 401 with the credentials asked again), yields only that `Reply`.
        `read_timeout_s` bounds each wait for more. The connection is closed when the iterator
        ends or is closed, and by `close()` (which ends a blocked read at once).
        """
        for attempt in (0, 1):
            request = _LazyRequest("GET", self, target)
            conn = self._new_connection()
            try:
                self._connect(conn, request)
                with self._lock:
                    if self._closed:
                        raise RuntimeError("the client has been closed")
                    self._streams.append(conn)
                sent = [False]
                with _failures(conn, request, sent):
                    sock = _socket(conn)
                    sock.sendall(request_bytes("GET", self._prefix + target, self._host_header,
                                               self._headers(None), None))
                    sent[0] = True
                    sock.settimeout(read_timeout_s)
                    reader = ReplyReader(sock)
                    headers = reader.head()
                    if reader.status >= 400:
                        reply = Reply(reader.status, headers, reader.rest())
                        if reader.status == 401 and self._auth is not None and attempt == 0:
                            self._refresh_header()
                            continue
                        yield reply
                        return
                    yield from reader.pieces()
                    return
            finally:
                with self._lock:
                    if conn in self._streams:
                        self._streams.remove(conn)
                conn.close()


class _LazyRequest:
    """The httpx2 request an exception carries, built only when one is raised."""

    def __init__(self, method: str, client: KeepAlive, target: str) -> None:
        self._args = (method, client.base_url + target)
        self._request: httpx2.Request | None = None

    def get(self) -> httpx2.Request:
        if self._request is None:
            self._request = httpx2.Request(*self._args)
        return self._request


@contextlib.contextmanager
def _failures(conn: http.client.HTTPConnection, request: _LazyRequest, sent: list[bool]) -> Iterator[None]:
    """The socket's and the reply's failures as the httpx2 exceptions of the same meaning
    (`sent[0]`: whether the request went out); the connection is closed after any of them."""
    try:
        yield
    except (socket.timeout, TimeoutError) as exc:
        conn.close()
        raise (httpx2.ReadTimeout if sent[0] else httpx2.WriteTimeout)(f"{exc or 'timed out'}",
                                                                       request=request.get()) from exc
    except ProtocolError as exc:  # the server closed, or answered what is not HTTP
        conn.close()
        raise httpx2.RemoteProtocolError(str(exc), request=request.get()) from exc
    except OSError as exc:  # resets, broken pipes
        conn.close()
        raise (httpx2.ReadError if sent[0] else httpx2.WriteError)(f"{type(exc).__name__}: {exc}",
                                                                   request=request.get()) from exc


def _socket(conn: http.client.HTTPConnection) -> socket.socket:
    """The connected socket `_connection` or `_connect` made."""
    if conn.sock is None:
        raise OSError("not connected")  # closed by `close()` meanwhile: as a reset would be
    sock: socket.socket = conn.sock
    return sock


def _readable(sock: socket.socket) -> bool:
    """poll, not select: select cannot take a descriptor numbered 1024 or more."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True  # closed underneath us: replace it
