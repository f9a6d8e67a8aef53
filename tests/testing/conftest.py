"""Shared pieces of the API test server's tests: a running server and a tiny HTTP client."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest

from gpufleet.testing.apiserver import ApiServer


@dataclass
class Client:
    """Plain HTTP to the server: keeps the tests honest about the wire format."""

    url: str

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, Any]:
        conn = self._conn()
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": content_type, **(headers or {})})
        resp = conn.getresponse()
        raw = resp.read()
        conn.close()
        return resp.status, json.loads(raw) if raw and raw[:1] in b"{[" else raw.decode()

    def ok(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        status, out = self.call(method, path, body, content_type)
        assert status < 300, (status, out)
        return out

    def watch(self, path: str, timeout_s: float = 5.0) -> Iterator[dict[str, Any]]:
        """Events of a watch stream, one per line; stops at the end of the stream."""
        conn = self._conn(timeout_s)
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                yield json.loads(line)
        finally:
            conn.close()

    def watch_until(self, path: str, marker: str) -> list[dict[str, Any]]:
        """Events of a watch up to the one about the object named `marker` (excluded).

        Tests write the marker object last, so the events before it are exactly those of
        the writes under test, without waiting for a timeout.
        """
        out = []
        for event in self.watch(path):
            if event["object"].get("metadata", {}).get("name") == marker:
                return out
            out.append(event)
        raise AssertionError(f"the stream ended before {marker!r} arrived: {out}")

    def _conn(self, timeout_s: float = 10.0) -> http.client.HTTPConnection:
        parts = urlsplit(self.url)
        return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)


def pod(name: str, *, namespace: str = "default", labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, node: str | None = None,
        scheduler: str = "gpufleet") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": spec}


def binding(name: str, node: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **meta},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(kubelet=False, bookmark_interval_s=0.3) as srv:
        yield srv


@pytest.fixture
def client(server: ApiServer) -> Client:
    return Client(server.url)
