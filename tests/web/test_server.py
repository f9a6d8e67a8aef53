"""`web.server`: what the dashboard serves, its headers, its errors and its live stream."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Iterator

import pytest

from gpufleet.testing import make_node
from gpufleet.web.fleet import Fleet
from gpufleet.web.server import DashboardServer
from gpufleet.web.sources import StaticSource


class Changing:
    """A source whose one frame changes when told to (as the live scheduler's does)."""

    def __init__(self) -> None:
        self.n = 1
        self.lock = threading.Lock()

    def frames(self) -> int:
        return 1

    def times(self) -> list[float]:
        return [float(self.n)]

    def fleet(self, frame: int) -> Fleet:
        with self.lock:
            return Fleet(f"v{self.n}", float(self.n), tuple(make_node(f"n{i}").gpus(1).build() for i in range(self.n)), ())

    def version(self) -> int:
        return self.n


def fleets(n: int) -> list[Fleet]:
    return [Fleet("replay: t", 60.0 * i, (make_node("a").gpus(2).build(),), ()) for i in range(n)]


@pytest.fixture
def served() -> Iterator[DashboardServer]:
    server = DashboardServer(StaticSource(fleets(3)), port=0).start()
    yield server
    server.stop()


def get(server: DashboardServer, route: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{route}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_the_page_and_its_assets_come_from_the_package_with_a_strict_policy(served: DashboardServer) -> None:
    for route, kind in (("/", "text/html"), ("/app.js", "text/javascript"), ("/app.css", "text/css")):
        code, headers, body = get(served, route)
        assert code == 200 and headers["Content-Type"].startswith(kind) and body
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
    _, _, page = get(served, "/")
    assert b"http" not in page.replace(b'http-equiv', b'')  # nothing fetched from elsewhere
    _, _, script = get(served, "/app.js")
    assert b"innerHTML" not in script  # names from the cluster are written as text


def test_frames_and_the_fleet_document(served: DashboardServer) -> None:
    code, _, body = get(served, "/api/frames")
    assert code == 200 and json.loads(body) == {"count": 3, "times": [0.0, 60.0, 120.0]}
    doc = json.loads(get(served, "/api/fleet")[2])
    assert (doc["frame"], doc["frames"], doc["time"]) == (2, 3, 120.0) and doc["summary"]["gpus"] == 2
    assert json.loads(get(served, "/api/fleet?frame=1")[2])["time"] == 60.0


@pytest.mark.parametrize("query, message", [("frame=7", "frame 7 does not exist; frames are 0..2"),
                                            ("frame=x", "frame must be a whole number, got 'x'"),
                                            ("frame=-1", "frame -1 does not exist")])
def test_a_bad_frame_is_a_clear_400(served: DashboardServer, query: str, message: str) -> None:
    code, headers, body = get(served, f"/api/fleet?{query}")
    assert code == 400 and headers["Content-Type"] == "application/json"
    assert message in json.loads(body)["error"]


def test_it_only_reads(served: DashboardServer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        code, headers, _ = get(served, "/api/fleet", method)
        assert code == 405 and headers["Allow"] == "GET, HEAD"
    assert get(served, "/nope")[0] == 404
    assert get(served, "/healthz")[0] == 200


def test_it_listens_on_loopback_by_default() -> None:
    server = DashboardServer(StaticSource(fleets(1)))
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
    finally:
        server.httpd.server_close()


def test_the_stream_sends_the_document_and_again_when_it_changes() -> None:
    source = Changing()
    server = DashboardServer(source, port=0, poll_s=0.02).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/stream", timeout=5) as r:
            assert r.headers["Content-Type"] == "text/event-stream"

            def next_event() -> dict[str, object]:
                lines = []
                while (line := r.readline()) != b"\n":
                    lines.append(line)
                assert lines[0] == b"event: fleet\n"
                doc: dict[str, object] = json.loads(lines[1].removeprefix(b"data: "))
                return doc
            first = next_event()
            assert first["source"] == "v1" and first["version"] == 1
            with source.lock:
                source.n = 3
            second = next_event()
            assert second["source"] == "v3" and second["summary"]["nodes"] == 3  # type: ignore[index]
    finally:
        server.stop()
