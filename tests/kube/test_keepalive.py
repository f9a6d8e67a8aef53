"""The keep-alive client of requests and watches: credentials, connection reuse, and every failure
raised as the httpx2 error of the same meaning, so `api_errors` and the binder classify it.

A scripted HTTP/1.1 server on a local socket (scripted_server.py) stands in for replies and
failures the real kube-apiserver gives only under faults (tests/live/test_api_faults_live.py
has the real ones)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Callable

import httpx2
import pytest
from lightkube.config.client_adapter import BearerTokenFileAuth

from gpufleet.kube import config
from gpufleet.kube.binder import CLEAN_FAILURES
from gpufleet.kube.errors import PermanentError, TemporaryError, api_errors
from gpufleet.kube.keepalive import KeepAlive
from gpufleet.kube.rest import Rest

from .conftest import write_kubeconfig
from .scripted_server import Script, Server, chunked, reply


def rest_for(tmp_path: Path, url: str) -> Rest:
    return Rest(config.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", url)), timeout_s=2.0)


def kind_of(call: Callable[[], object]) -> str:
    with pytest.raises(TemporaryError) as caught:
        with api_errors("bind pod ns/p"):
            call()
    return caught.value.kind


def test_requests_carry_the_credentials_query_and_body_and_reuse_one_connection(tmp_path: Path,
                                                                                serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: reply(201, b'{"kind":"Status","status":"Success"}'))
    rest = rest_for(tmp_path, server.url)
    for i in range(3):
        assert rest.post(f"/api/v1/namespaces/ns/pods/p{i}/binding", {"target": {"name": "n1"}})["status"] == "Success"
    assert server.connections == 1
    method, target, headers, body = server.seen[0]
    assert (method, target) == ("POST", "/api/v1/namespaces/ns/pods/p0/binding?fieldManager=gpufleet-scheduler")
    assert headers["authorization"] == "Bearer secret" and headers["content-type"] == "application/json"
    assert body == b'{"target":{"name":"n1"}}'


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(tmp_path: Path,
                                                                          serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: reply(200, close=n == 0))  # the first reply ends its connection
    rest = rest_for(tmp_path, server.url)
    rest.get("/api/v1/pods/a")
    rest.get("/api/v1/pods/b")
    assert server.connections == 2 and len(server.seen) == 2  # nothing was sent into the closed one


def test_an_error_status_is_the_servers_status_with_its_retry_after(tmp_path: Path,
                                                                    serve: Callable[[Script], Server]) -> None:
    status = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}'
    server = serve(lambda r, n: reply(429, status, extra="Retry-After: 3\r\n") if n == 0 else
                   reply(409, b'{"kind":"Status","code":409,"reason":"Conflict","message":"already bound"}'))
    rest = rest_for(tmp_path, server.url)
    with pytest.raises(TemporaryError) as caught:
        with api_errors("bind pod ns/p"):
            rest.post("/api/v1/namespaces/ns/pods/p/binding", {})
    assert (caught.value.kind, caught.value.delay_s) == ("HTTP 429", 3.0)
    assert str(caught.value) == "bind pod ns/p: 429 TooManyRequests: slow down"
    assert kind_of(lambda: rest.post("/api/v1/namespaces/ns/pods/p/binding", {})) == "HTTP 409"


def test_a_refused_connection_is_a_clean_failure_and_a_hang_up_after_sending_is_not(
        tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    """The binder trusts `CLEAN_FAILURES` to mean the bind never reached the server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    refused = kind_of(lambda: rest_for(tmp_path, f"http://127.0.0.1:{port}").post("/x", {}))
    assert refused == "ConnectError" and refused in CLEAN_FAILURES
    server = serve(lambda r, n: None)
    hung_up = kind_of(lambda: rest_for(tmp_path, server.url).post("/x", {}))
    assert hung_up == "RemoteProtocolError" and hung_up not in CLEAN_FAILURES


def test_a_reply_that_never_comes_is_a_read_timeout(tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    gate = threading.Event()
    server = serve(lambda r, n: gate.wait(5) and None)
    rest = Rest(config.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", server.url)), timeout_s=0.3)
    try:
        assert kind_of(lambda: rest.post("/x", {})) == "ReadTimeout"
    finally:
        gate.set()


def test_what_is_not_http_is_a_protocol_error_and_what_is_not_json_a_malformed_reply(
        tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    assert kind_of(lambda: rest_for(tmp_path, serve(lambda r, n: b"SSH-2.0-OpenSSH\r\n\r\n").url).get("/x")) \
        == "RemoteProtocolError"
    assert kind_of(lambda: rest_for(tmp_path, serve(lambda r, n: reply(200, b"<html>")).url).get("/x")) \
        == "malformed reply"


def test_a_401_rereads_a_rotated_token_file_and_tries_once_more(tmp_path: Path,
                                                                serve: Callable[[Script], Server]) -> None:
    token = tmp_path / "token"
    token.write_text("old\n")
    server = serve(lambda r, n: reply(200) if r[2].get("authorization") == "Bearer new" else
                   reply(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}'))
    client = KeepAlive(server.url, None, BearerTokenFileAuth(str(token)))
    assert client.request("GET", "/x", None, None).status == 401  # re-read, still the old token: the 401 stands
    token.write_text("new\n")  # the kubelet rotates it
    assert client.request("GET", "/y", None, None).status == 200
    assert [h["authorization"] for _, _, h, _ in server.seen] == ["Bearer old"] * 3 + ["Bearer new"]


def test_a_401_that_stays_is_a_permanent_error(tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: reply(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}'))
    with pytest.raises(PermanentError, match="401 Unauthorized"):
        with api_errors("get pod ns/p"):
            rest_for(tmp_path, server.url).get("/api/v1/namespaces/ns/pods/p")


def test_a_proxy_from_the_environment_leaves_requests_to_httpx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: reply(200))
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "")
    proxied = rest_for(tmp_path, server.url)
    assert proxied._unary is None  # noqa: SLF001 - which path a request takes
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert rest_for(tmp_path, server.url)._unary is not None  # noqa: SLF001


def test_a_closed_client_sends_nothing_more(tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    """Like httpx's: a send that outlives `close()` fails (EventRecorder drops that event) instead of reconnecting."""
    server = serve(lambda r, n: reply(200))
    client = KeepAlive(server.url, None, None)
    assert client.request("GET", "/x", None, None).status == 200
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.request("GET", "/y", None, None)
    assert len(server.seen) == 1


WATCH = "/api/v1/pods"
EVENT = b'{"type":"ADDED","object":{"metadata":{"name":"p"}}}\n'


def test_a_watch_yields_each_event_as_it_arrives_on_a_connection_of_its_own(
        tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: chunked([EVENT], end=False) if "watch=true" in r[1] else reply(200))
    rest = rest_for(tmp_path, server.url)
    rest.get("/api/v1/nodes")
    events = rest.watch(WATCH, {"resourceVersion": "7"}, timeout_s=5)
    assert next(events)["object"]["metadata"]["name"] == "p"  # while the body goes on
    rest.get("/api/v1/nodes")  # the same thread: its keep-alive connection, not the watch's
    assert server.connections == 2 and len(rest._unary._streams) == 1  # type: ignore[union-attr]  # noqa: SLF001
    method, target, headers, _ = server.seen[1]
    assert (method, target) == ("GET", "/api/v1/pods?resourceVersion=7&watch=true&allowWatchBookmarks=true")
    assert headers["authorization"] == "Bearer secret"
    events.close()  # the informer stops
    assert rest._unary._streams == []  # type: ignore[union-attr]  # noqa: SLF001 - its connection closed


def test_a_watch_answered_with_an_error_status_raises_the_servers_status(
        tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    gone = b'{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 7"}'
    server = serve(lambda r, n: reply(410, gone))
    rest = rest_for(tmp_path, server.url)
    with pytest.raises(TemporaryError) as caught:
        with api_errors("watch pods"):
            list(rest.watch(WATCH, {"resourceVersion": "7"}, timeout_s=5))
    assert caught.value.kind == "HTTP 410" and "too old resource version" in str(caught.value)


def test_a_watch_cut_mid_body_is_a_protocol_error_and_one_that_ends_cleanly_just_ends(
        tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    cut_short = chunked([EVENT], end=False).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1) + b"2"
    cut = serve(lambda r, n: cut_short)  # the server hangs up after a piece of a chunk size
    assert kind_of(lambda: list(rest_for(tmp_path, cut.url).watch(WATCH, {}, timeout_s=5))) == "RemoteProtocolError"
    ended = serve(lambda r, n: chunked([EVENT, EVENT]))
    assert len(list(rest_for(tmp_path, ended.url).watch(WATCH, {}, timeout_s=5))) == 2


def test_a_silent_watch_ends_with_a_read_timeout(tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: chunked([], end=False))
    assert kind_of(lambda: list(rest_for(tmp_path, server.url).watch(WATCH, {}, timeout_s=0.3))) == "ReadTimeout"


def test_closing_the_client_ends_a_blocked_watch(tmp_path: Path, serve: Callable[[Script], Server]) -> None:
    server = serve(lambda r, n: chunked([EVENT], end=False))
    rest = rest_for(tmp_path, server.url)
    got: list[object] = []

    def watch() -> None:
        try:
            for event in rest.watch(WATCH, {}, timeout_s=60):
                got.append(event)
        except Exception as exc:  # noqa: BLE001 - what ended it
            got.append(exc)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    for _ in range(1000):
        if got:
            break
        thread.join(0.01)
    assert got, "the first event never arrived"
    rest.close()
    thread.join(10)  # far below the 60 s read timeout
    assert not thread.is_alive() and len(got) == 2
    assert isinstance(got[1], httpx2.RemoteProtocolError | httpx2.ReadError)


def test_a_watch_answered_401_asks_the_credentials_again_once(tmp_path: Path,
                                                             serve: Callable[[Script], Server]) -> None:
    token = tmp_path / "token"
    token.write_text("old\n")
    server = serve(lambda r, n: chunked([EVENT]) if r[2].get("authorization") == "Bearer new" else
                   reply(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}'))
    client = KeepAlive(server.url, None, BearerTokenFileAuth(str(token)))
    assert [p.status for p in client.stream(WATCH, 5) if isinstance(p, tuple)] == [401]  # asked again: still old
    token.write_text("new\n")
    assert b"".join(p for p in client.stream(WATCH, 5) if isinstance(p, bytes)) == EVENT
    assert [h["authorization"] for _, _, h, _ in server.seen] == ["Bearer old"] * 3 + ["Bearer new"]
