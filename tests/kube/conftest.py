"""Shared pieces of the kube tests: the fake API server, kubeconfigs for it, and virtual time."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import lightkube
import pytest

from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier, RetryPolicy

from .apiserver import FakeApiServer

NODE = "n1"
POLICY = RetryPolicy(jitter=0.0)
"""The default policy without jitter, so tests can assert the exact backoff."""
TIMEOUT_S = 0.5
"""Client request timeout in tests: short, so a delayed reply is a timeout quickly."""


class VirtualTime:
    """A clock that `sleep` advances: the backoff runs without waiting, and is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables; the fake server must be reached directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    s.add_node(NODE)
    s.start()
    yield s
    s.stop()


def write_kubeconfig(path: Path, server_url: str, *, context: str = "test", user: bool = True) -> Path:
    users = "users:\n- name: tester\n  user: {token: secret}\n" if user else "users: []\n"
    path.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n"
                    f"clusters:\n- name: fake\n  cluster: {{server: '{server_url}'}}\n"
                    f"contexts:\n- name: test\n  context: {{cluster: fake{', user: tester' if user else ''}}}\n"
                    + users)
    return path


@pytest.fixture
def kubeconfig(server: FakeApiServer, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", server.url)


@pytest.fixture
def vtime() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = config.connect(config.from_kubeconfig(kubeconfig), timeout_s=TIMEOUT_S)
    yield c
    c.close()


def make_api(client: lightkube.Client, vtime: VirtualTime, policy: RetryPolicy = POLICY) -> KubeNodeApi:
    retrier = Retrier(policy, logging.getLogger("gpufleet.kube.node_api"), sleep=vtime.sleep, clock=vtime.clock)
    return KubeNodeApi(client, NODE, retrier)


@pytest.fixture
def api(client: lightkube.Client, vtime: VirtualTime) -> KubeNodeApi:
    return make_api(client, vtime)
