"""`FaultProxy` in front of a stand-in for kube-apiserver that holds a watch's reply headers
back, as a busy kube-apiserver does until its handlers (authentication, authorization, the
watch's setup) have run: the window in which a cut must still reach the watch. Everything else
about the proxy is exercised against the real control plane (tests/live/test_api_faults_live.py)."""

from __future__ import annotations

import http.client
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.testing.cluster.faultproxy import FaultProxy
from gpufleet.testing.cluster.pki import issue_serving_cert, make_pki


class _SlowWatch(BaseHTTPRequestHandler):
    """Every request is a watch whose headers come only once `release` is set."""

    protocol_version = "HTTP/1.1"
    received = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:
        type(self).received.set()
        type(self).release.wait(30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the proxy cut its upstream connection: writing the late headers fails, as it should


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[FaultProxy, ssl.SSLContext]]:
    pki = make_pki(tmp_path / "pki")
    _SlowWatch.received, _SlowWatch.release = threading.Event(), threading.Event()
    upstream = _Upstream(("127.0.0.1", 0), _SlowWatch)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    upstream.socket = tls.wrap_socket(upstream.socket, server_side=True)
    thread = threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    cert, key = issue_serving_cert(pki, tmp_path / "proxy", "faultproxy")
    try:
        with FaultProxy(f"https://127.0.0.1:{upstream.server_address[1]}", pki.ca_cert, cert, key) as p:
            yield p, ssl.create_default_context(cafile=str(pki.ca_cert))
    finally:
        _SlowWatch.release.set()
        upstream.shutdown()
        upstream.server_close()
        thread.join(5)


def test_a_watch_waiting_for_its_reply_headers_is_cut_too(proxy: tuple[FaultProxy, ssl.SSLContext]) -> None:
    p, client_tls = proxy
    outcome: list[object] = []

    def watch() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", int(p.url.rsplit(":", 1)[1]), timeout=20, context=client_tls)
        try:
            conn.request("GET", "/api/v1/pods?watch=true&resourceVersion=7")
            outcome.append(conn.getresponse().status)
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)
        finally:
            conn.close()

    client = threading.Thread(target=watch, daemon=True)
    client.start()
    assert _SlowWatch.received.wait(10), "the watch never reached the upstream server"
    assert p.cut_watches() == 1
    client.join(10)  # the upstream server still holds the headers back: only the cut ends the wait
    assert not client.is_alive(), "the cut did not reach a watch still waiting for its headers"
    assert len(outcome) == 1 and isinstance(outcome[0], (OSError, http.client.HTTPException)), outcome
