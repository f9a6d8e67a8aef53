"""Reading replies with httptools (kube/http1.py) on one end of a socket pair: replies that arrive a
byte at a time, bodies of each framing, and the ends that are not replies. (Through a client and
a server: tests/kube/test_keepalive.py.)"""

from __future__ import annotations

import socket
import threading

import pytest

from gpufleet.kube.http1 import ProtocolError, Reply, ReplyReader, exchange, request_bytes


def served(raw: bytes, *, piece: int = 1, close: bool = True) -> socket.socket:
    """The client end of a socket pair whose other end sends `raw`, `piece` bytes at a time."""
    client, server = socket.socketpair()
    client.settimeout(5)

    def send() -> None:
        try:
            for i in range(0, len(raw), piece):
                server.sendall(raw[i:i + piece])
        except OSError:
            pass  # the reader gave up on a malformed reply and closed its end
        if close:
            server.close()
    threading.Thread(target=send, daemon=True).start()
    return client


def read(sock: socket.socket) -> tuple[Reply, bool]:
    reader = ReplyReader(sock)
    headers = reader.head()
    return Reply(reader.status, headers, reader.rest()), reader.keep_alive


def test_the_request_is_one_write_with_its_length() -> None:
    assert request_bytes("POST", "/api/v1/x?a=b", "h:6443", {"Authorization": "Bearer t"}, b"{}") == \
        b"POST /api/v1/x?a=b HTTP/1.1\r\nHost: h:6443\r\nAuthorization: Bearer t\r\nContent-Length: 2\r\n\r\n{}"
    assert request_bytes("GET", "/", "h", {}, None) == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
def test_a_reply_read_whatever_pieces_it_arrives_in(piece: int) -> None:
    raw = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\": 1}\n"
    reply, keep = read(served(raw, piece=piece, close=False))
    assert reply == Reply(201, [("Content-Type", "application/json"), ("Content-Length", "9")], b'{"a": 1}\n')
    assert keep


def test_chunked_bodies_are_joined_and_a_watch_gets_them_as_they_come() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    assert read(served(raw, piece=5))[0].content == b"abcde"
    reader = ReplyReader(served(raw))
    assert reader.head() == [("Transfer-Encoding", "chunked")]
    assert b"".join(reader.pieces()) == b"abcde"


def test_a_body_without_a_length_ends_with_the_connection_which_is_not_reused() -> None:
    reply, keep = read(served(b"HTTP/1.1 200 OK\r\n\r\nall of it", piece=4))
    assert (reply.content, keep) == (b"all of it", False)


def test_connection_close_is_honoured() -> None:
    _, keep = read(served(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", close=False))
    assert not keep


@pytest.mark.parametrize("raw, what", [
    (b"", "without replying"),
    (b"HTTP/1.1 200 OK\r\nContent-Len", "without replying"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "before its reply ended"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "before its reply ended"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.1 reply"),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "informational reply"),
])
def test_what_is_not_a_whole_reply_is_a_protocol_error(raw: bytes, what: str) -> None:
    with pytest.raises(ProtocolError, match=what):
        read(served(raw, piece=3))


def test_an_exchange_sends_the_request_then_reads_the_reply() -> None:
    client, server = socket.socketpair()
    client.settimeout(5)
    got: list[bytes] = []

    def serve() -> None:
        got.append(server.recv(1 << 16))
        server.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    reply, keep = exchange(client, request_bytes("DELETE", "/x", "h", {}, None))
    assert (reply.status, reply.content, keep) == (204, b"", True)
    assert got == [b"DELETE /x HTTP/1.1\r\nHost: h\r\n\r\n"]
