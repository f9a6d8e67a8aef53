"""One HTTP/1.1 exchange on a connected socket: the request written in one send, the reply read
with httptools (llhttp, the C parser of Node.js, which uvicorn uses too).

Why not `http.client` for this: it parses each reply's headers with the `email` package, in
Python. Measured on the 2-core development machine against kube-apiserver (`bench/client_cpu.py`:
GETs of a small object, one thread, 3 x 3,000 requests): 0.18-0.33 ms of CPU per request with
`http.client`, 0.08-0.12 ms with this. The live scheduler sends one request per bind and reads a watch event
per bind, in the process whose GIL its binder threads share (docs/performance.md).

`KeepAlive` (kube/keepalive.py) owns the connections, credentials and the translation of
failures; this module only writes and reads. Its failures: `OSError` from the socket
(timeouts included), and `ProtocolError` for what is not a well-formed HTTP/1.1 reply or a
reply cut short.
"""

from __future__ import annotations

import socket
from typing import Iterator, NamedTuple

import httptools

PIECE = 1 << 16
"""Bytes asked of the socket at a time."""


class Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    content: bytes


class ProtocolError(Exception):
    """The server answered what is not HTTP/1.1, or closed the connection before its reply ended."""


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request as sent: request line, `Host`, `headers`, `Content-Length` when there is a body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class _Parsed:
    """httptools' callbacks for one reply: its headers, body pieces, and whether it ended."""

    __slots__ = ("headers", "pieces", "head_done", "done", "keep_alive", "status", "parser")

    def __init__(self) -> None:
        self.headers: list[tuple[str, str]] = []
        self.pieces: list[bytes] = []
        self.head_done = False
        self.done = False
        self.keep_alive = False
        self.status = 0
        self.parser = httptools.HttpResponseParser(self)  # a cycle, freed by the young collections

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if not self.head_done:  # the first reply's (what follows an informational one is refused)
            self.status = self.parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the reply is over
        self.done = True

    def take(self) -> list[bytes]:
        pieces, self.pieces = self.pieces, []
        return pieces

    def until_close(self) -> bool:
        """A body without a length or chunks: it ends when the server closes the connection."""
        names = {name.lower() for name, _ in self.headers}
        return "content-length" not in names and "transfer-encoding" not in names


class ReplyReader:
    """Reads one reply from `sock`: `head()` until the status and headers are in, then either
    `rest()` (the whole body) or `pieces()` (the body as it arrives: a watch)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._parsed = _Parsed()
        self._eof = False
        self.status = 0

    @property
    def keep_alive(self) -> bool:
        """Whether the connection can carry the next request: the reply ended with the connection
        open, and the server did not ask to close it."""
        return self._parsed.done and not self._eof and self._parsed.keep_alive

    def head(self) -> list[tuple[str, str]]:
        while not self._parsed.head_done:
            self._feed()
        self.status = self._parsed.status
        if self.status < 200:  # only sent to a request that asked with `Expect`, which none does
            raise ProtocolError(f"an informational reply ({self.status}) that no request asks for")
        return self._parsed.headers

    def rest(self) -> bytes:
        while not self._parsed.done:
            self._feed()
        return b"".join(self._parsed.take())

    def pieces(self) -> Iterator[bytes]:
        while True:
            for piece in self._parsed.take():
                yield piece
            if self._parsed.done:
                return
            self._feed()

    def _feed(self) -> None:
        data = self._sock.recv(PIECE)
        if not data:
            self._eof = True
            if self._parsed.head_done and self._parsed.until_close():
                self._parsed.done = True
                return
            raise ProtocolError("the server closed the connection before its reply ended" if self._parsed.head_done
                                else "the server closed the connection without replying")
        try:
            self._parsed.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise ProtocolError(f"not an HTTP/1.1 reply: {exc}") from exc


def exchange(sock: socket.socket, data: bytes) -> tuple[Reply, bool]:
    """Send one request (`request_bytes`) and read its whole reply; also whether the connection can
    be used again."""
    sock.sendall(data)
    reader = ReplyReader(sock)
    headers = reader.head()
    content = reader.rest()
    return Reply(reader.status, headers, content), reader.keep_alive
