"""Replies no real API server gives on demand: none at all (nothing listens), and a bare error
from something in front of it (a load balancer's 502 without a Kubernetes Status or even a
Content-Type). Everything else about errors and retries is tested against the real control
plane, with FaultProxy for a server in trouble (tests/live/test_node_api_live.py).
"""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx2
import lightkube
import pytest

from gpufleet.kube import config
from gpufleet.kube.errors import TemporaryError
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.testing.clock import VirtualTime

from .conftest import write_kubeconfig

NODE = "n1"
TIMEOUT_S = 0.5


def make_api(client: lightkube.Client, vtime: VirtualTime) -> KubeNodeApi:
    retrier = Retrier(RetryPolicy(jitter=0.0), logging.getLogger("gpufleet.kube.node_api"), sleep=vtime.sleep,
                      clock=vtime.clock)
    return KubeNodeApi(client, NODE, retrier)


class _BareBadGateway(BaseHTTPRequestHandler):
    """Every request: 502 with no body and no Content-Type, as a load balancer answers when
    kube-apiserver behind it is down."""

    protocol_version = "HTTP/1.1"
    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def load_balancer(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server is the bare-502 stand-in."""
    _BareBadGateway.requests = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BareBadGateway)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_an_unreachable_server_is_a_temporary_error(tmp_path: Path) -> None:
    vtime = VirtualTime()
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with config.connect(config.from_kubeconfig(write_kubeconfig(tmp_path / "k", url)), TIMEOUT_S) as client:
        with pytest.raises(TemporaryError, match=f"^get node {NODE}: ConnectError") as caught:
            make_api(client, vtime).node_labels()
    assert isinstance(caught.value.__cause__, httpx2.ConnectError) and len(vtime.sleeps) == 3


def test_an_error_reply_without_a_content_type_is_still_translated(load_balancer: Path) -> None:
    vtime = VirtualTime()
    with config.connect(config.from_kubeconfig(load_balancer), TIMEOUT_S) as client:
        with pytest.raises(TemporaryError, match=f"^list pods on node {NODE}: 502 Bad Gateway$") as caught:
            make_api(client, vtime).pods_on_node()
    assert isinstance(caught.value.__cause__, httpx2.HTTPStatusError)
    assert _BareBadGateway.requests == 4 and vtime.sleeps == [0.25, 0.5, 1.0], "temporary: retried"
