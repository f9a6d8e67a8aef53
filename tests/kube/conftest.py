"""Shared pieces of the kube tests: direct (proxy-free) connections and kubeconfigs for local stand-ins.

Behaviour against an API server is tested on the real control plane (tests/live); what is
left here needs no server, or a stand-in for replies a real server does not give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from .scripted_server import Script, Server


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables; local servers must be reached directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def write_kubeconfig(path: Path, server_url: str, *, context: str = "test", user: bool = True) -> Path:
    users = "users:\n- name: tester\n  user: {token: secret}\n" if user else "users: []\n"
    path.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n"
                    f"clusters:\n- name: fake\n  cluster: {{server: '{server_url}'}}\n"
                    f"contexts:\n- name: test\n  context: {{cluster: fake{', user: tester' if user else ''}}}\n"
                    + users)
    return path


@pytest.fixture
def serve() -> Iterator[Callable[[Script], Server]]:
    """Starts scripted servers (scripted_server.py); all stop after the test."""
    servers: list[Server] = []

    def start(script: Script) -> Server:
        servers.append(Server(script))
        return servers[-1]
    yield start
    for s in servers:
        s.close()
