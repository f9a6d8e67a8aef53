"""A scripted HTTP/1.1 server on a local socket, for replies and failures the real kube-apiserver
gives only under faults (tests/live/test_api_faults_live.py has the real ones). The `serve`
fixture (conftest.py) starts them and stops them after the test."""

from __future__ import annotations

import socketserver
import threading
from typing import Callable

Seen = tuple[str, str, dict[str, str], bytes]
"""(method, target, headers, body) of one request the server read."""
Script = Callable[[Seen, int], bytes | None]
"""The raw reply to a request (and the number of requests before it on any connection); None: hang up."""


def reply(status: int, body: bytes = b"{}", *, close: bool = False, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


def chunked(pieces: list[bytes], *, end: bool = True) -> bytes:
    """A 200 whose body is sent in chunked encoding, one chunk per piece; without `end` the body
    never ends (a watch that stays open)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p)
    return head + body + (b"0\r\n\r\n" if end else b"")


class Server:
    def __init__(self, script: Script) -> None:
        self.seen: list[Seen] = []
        self.connections = 0
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    method, target, _ = line.decode().split(" ", 2)
                    headers: dict[str, str] = {}
                    while (h := self.rfile.readline()) not in (b"\r\n", b""):
                        k, v = h.decode().split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                    body = self.rfile.read(int(headers.get("content-length", "0")))
                    request = (method, target, headers, body)
                    answer = script(request, len(outer.seen))
                    outer.seen.append(request)
                    if answer is None:
                        return  # hang up without a reply
                    self.wfile.write(answer)
                    self.wfile.flush()
                    if b"Connection: close" in answer:
                        return

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
