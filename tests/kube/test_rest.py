"""`Rest`'s watches: events split anywhere by the transport arrive whole, on `http.client` (the
usual path) and on httpx (where a proxy applies); a malformed line is one retryable error naming
the request. (Unary requests and the watch's failures: tests/kube/test_keepalive.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import httpx2
import pytest

from gpufleet.kube import config
from gpufleet.kube.errors import TemporaryError, api_errors
from gpufleet.kube.rest import Rest

from .conftest import write_kubeconfig
from .scripted_server import Script, Server, chunked

EVENTS = [{"type": "ADDED", "object": {"metadata": {"name": f"p-{i}", "labels": {"a": "é" * i}}}} for i in range(4)]
Answering = Callable[[list[bytes]], Rest]


@pytest.fixture(params=["http.client", "httpx"])
def answering(request: pytest.FixtureRequest, tmp_path: Path, serve: Callable[[Script], Server]) -> Answering:
    """A Rest whose watch body arrives in the given pieces: one HTTP chunk each from a local
    server (http.client), or one piece each from httpx's mock transport (the proxied path)."""
    def over_http_client(pieces: list[bytes]) -> Rest:
        server = serve(lambda r, n: chunked(pieces))
        return Rest(config.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", server.url)), timeout_s=5)

    def over_httpx(pieces: list[bytes]) -> Rest:
        rest = Rest(config.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")))

        def handler(request: httpx2.Request) -> httpx2.Response:
            def body() -> Iterator[bytes]:
                yield from pieces
            return httpx2.Response(200, content=body(), headers={"Content-Type": "application/json"})
        rest._http = httpx2.Client(transport=httpx2.MockTransport(handler), base_url="http://127.0.0.1:1")  # noqa: SLF001
        rest._unary = None  # noqa: SLF001 - as where a proxy applies
        return rest
    return over_http_client if request.param == "http.client" else over_httpx


@pytest.mark.parametrize("size", [1, 3, 7, 64, 10_000])
def test_watch_events_cut_anywhere_by_the_transport_arrive_whole(answering: Answering, size: int) -> None:
    """Pieces end mid-line and mid-character (the labels are multi-byte); the last line may lack its newline."""
    stream = b"\n".join(json.dumps(e, ensure_ascii=False).encode() for e in EVENTS) + b"\n\n"
    stream = stream[:-2]  # no newline after the last event
    pieces = [stream[i:i + size] for i in range(0, len(stream), size)]
    assert list(answering(pieces).watch("/api/v1/pods", {}, timeout_s=5)) == EVENTS


def test_a_watch_line_that_is_not_json_is_a_temporary_error_naming_the_request(answering: Answering) -> None:
    rest = answering([b'{"type": "ADDED", "object": {"metadata"\n'])
    with pytest.raises(TemporaryError) as caught:
        with api_errors("watch pods"):
            list(rest.watch("/api/v1/pods", {}, timeout_s=5))
    assert caught.value.kind == "malformed reply" and str(caught.value).startswith("watch pods: the reply is not")
