"""`Rest`'s watches (on httpx): events split across chunks arrive whole, a malformed line is one
retryable error naming the request. (Unary requests: tests/kube/test_keepalive.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import httpx2
import pytest

from gpufleet.kube import config
from gpufleet.kube.errors import TemporaryError, api_errors
from gpufleet.kube.rest import Rest

from .test_config import VALID

EVENTS = [{"type": "ADDED", "object": {"metadata": {"name": f"p-{i}", "labels": {"a": "é" * i}}}} for i in range(4)]


def rest_answering(tmp_path: Path, chunks: list[bytes]) -> Rest:
    path = tmp_path / "kubeconfig"
    path.write_text(VALID)
    rest = Rest(config.from_kubeconfig(path))

    def handler(request: httpx2.Request) -> httpx2.Response:
        def body() -> Iterator[bytes]:
            yield from chunks
        return httpx2.Response(200, content=body(), headers={"Content-Type": "application/json"})
    rest._http = httpx2.Client(transport=httpx2.MockTransport(handler), base_url="http://127.0.0.1:1")  # noqa: SLF001
    return rest


@pytest.mark.parametrize("size", [1, 3, 7, 64, 10_000])
def test_watch_events_cut_anywhere_by_the_transport_arrive_whole(tmp_path: Path, size: int) -> None:
    """Chunks end mid-line and mid-character (the labels are multi-byte); the last line may lack its newline."""
    stream = b"\n".join(json.dumps(e, ensure_ascii=False).encode() for e in EVENTS) + b"\n\n"
    stream = stream[:-2]  # no newline after the last event
    chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
    assert list(rest_answering(tmp_path, chunks).watch("/api/v1/pods", {}, timeout_s=5)) == EVENTS


def test_a_watch_line_that_is_not_json_is_a_temporary_error_naming_the_request(tmp_path: Path) -> None:
    rest = rest_answering(tmp_path, [b'{"type": "ADDED", "object": {"metadata"\n'])
    with pytest.raises(TemporaryError) as caught:
        with api_errors("watch pods"):
            list(rest.watch("/api/v1/pods", {}, timeout_s=5))
    assert caught.value.kind == "malformed reply" and str(caught.value).startswith("watch pods: the reply is not")
