"""TLS contexts shared between threads get their ALPN list once (kube/tls.py): httpcore's
`set_alpn_protocols` on every new connection must not free the list while another thread's
handshake copies it."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from gpufleet.kube import config, rest, tls

from .conftest import write_kubeconfig


def spied(context: ssl.SSLContext) -> list[bytes]:
    """The wire-format lists `context` hands to OpenSSL from now on (ssl.py's
    `set_alpn_protocols` calls the C `_set_alpn_protocols`, found on the instance first)."""
    calls: list[bytes] = []
    setter = context._set_alpn_protocols  # type: ignore[attr-defined]

    def spy(protos: bytes) -> None:
        calls.append(bytes(protos))
        setter(protos)
    context._set_alpn_protocols = spy  # type: ignore[attr-defined]
    return calls


def test_a_settled_context_hands_openssl_its_list_once() -> None:
    context = ssl.create_default_context()
    calls = spied(context)
    settled = tls.settle(context)
    assert settled is context and calls == [b"\x08http/1.1"]
    for _ in range(3):  # httpcore, on each new connection
        settled.set_alpn_protocols(["http/1.1"])
    assert calls == [b"\x08http/1.1"]
    settled.set_alpn_protocols(["h2", "http/1.1"])  # a different list is still set
    assert calls == [b"\x08http/1.1", b"\x02h2\x08http/1.1"]


def test_settling_keeps_the_contexts_verification() -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_OPTIONAL
    settled = tls.settle(context)
    assert (settled.check_hostname, settled.verify_mode) == (False, ssl.CERT_OPTIONAL)


def test_the_schedulers_and_the_agents_clients_settle_their_contexts(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settled: list[Any] = []

    def record(context: ssl.SSLContext) -> tls.SettledAlpn:
        settled.append(context)
        return tls.settle(context)
    monkeypatch.setattr(rest, "settle", record)
    monkeypatch.setattr(config, "settle", record)
    loaded = config.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1"))
    rest.Rest(loaded).close()
    assert len(settled) == 1
    with config.connect(loaded):
        assert len(settled) == 2
