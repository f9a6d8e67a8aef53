"""The informer loop against a scripted API: list, watch from the version, bookmarks, 410, errors."""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterator, Mapping

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from gpufleet.kube.informer import Handler, Informer, Obj, Settings


def api_error(code: int) -> ApiError:
    req = httpx2.Request("GET", "http://x/api/v1/pods")
    return ApiError(request=req, response=httpx2.Response(code, json={"kind": "Status", "code": code,
                                                                      "reason": "Gone" if code == 410 else "Err",
                                                                      "message": "m"}, request=req))


class ScriptedRest:
    """Each list/watch call takes the next step of `script`: a list of items, events, or an error."""

    def __init__(self, script: list[Any], stop: threading.Event) -> None:
        self.script, self.stop = script, stop
        self.calls: list[tuple[str, str | None]] = []

    def _next(self) -> Any:
        if not self.script:
            self.stop.set()
            return []
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def list(self, url: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.calls.append(("list", None))
        version, items = self._next()
        return {"items": items, "metadata": {"resourceVersion": version}}

    def watch(self, url: str, params: Mapping[str, str], timeout_s: float) -> Iterator[dict[str, Any]]:
        self.calls.append(("watch", params.get("resourceVersion")))
        yield from self._next()


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def run(script: list[Any]) -> tuple[ScriptedRest, list[str]]:
    stop = threading.Event()
    rest = ScriptedRest(script, stop)
    seen: list[str] = []
    handler = Handler(lambda items: seen.append(f"replace {len(list(items))}"),
                      lambda o: seen.append(f"upsert {o['metadata']['name']}"),
                      lambda o: seen.append(f"delete {o['metadata']['name']}"))
    inf = Informer(rest, "pods", "/api/v1/pods", handler, stop,  # type: ignore[arg-type]
                   settings=Settings(first_backoff_s=0.001, max_backoff_s=0.002))
    inf.run()
    return rest, seen


def test_watch_resumes_from_the_last_version_and_bookmarks_advance_it() -> None:
    rest, seen = run([
        ("10", [pod("a", "9")]),
        [{"type": "ADDED", "object": pod("b", "11")}, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
        [{"type": "DELETED", "object": pod("a", "16")}],
    ])
    assert seen == ["replace 1", "upsert b", "delete a"]
    assert rest.calls[:3] == [("list", None), ("watch", "10"), ("watch", "15")]


def test_410_relists_at_once() -> None:
    rest, seen = run([
        ("10", []),
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}],
        ("20", [pod("a", "19")]),
        api_error(410),
        ("30", []),
    ])
    assert [c[0] for c in rest.calls] == ["list", "watch", "list", "watch", "list", "watch"]
    assert seen == ["replace 0", "replace 1", "replace 0"]


def test_errors_back_off_and_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "gpufleet.kube.informer")
    rest, seen = run([("10", []), api_error(500), api_error(500), [{"type": "ADDED", "object": pod("a", "11")}]])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "500" in warnings[0].getMessage()
    assert any("works again" in r.getMessage() for r in caplog.records)
    assert rest.calls[1:4] == [("watch", "10"), ("watch", "10"), ("watch", "10")]  # two failures: same version


def test_three_failures_in_a_row_relist() -> None:
    rest, _ = run([("10", []), api_error(503), api_error(503), api_error(503), ("12", []), []])
    assert [c[0] for c in rest.calls][:6] == ["list", "watch", "watch", "watch", "list", "watch"]


def test_objects_reach_the_handler_without_managed_fields() -> None:
    """As kube-scheduler's pod informer keeps them: everything but `metadata.managedFields`."""
    def managed(name: str, rv: str) -> dict[str, Any]:
        p = pod(name, rv)
        p["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
        p["metadata"]["labels"] = {"team": "a"}
        return p
    stop = threading.Event()
    rest = ScriptedRest([("10", [managed("a", "9")]),
                         [{"type": "ADDED", "object": managed("b", "11")},
                          {"type": "MODIFIED", "object": managed("a", "12")}]], stop)
    got: list[Obj] = []
    handler = Handler(lambda items: got.extend(items), got.append, got.append)
    Informer(rest, "pods", "/api/v1/pods", handler, stop).run()  # type: ignore[arg-type]
    assert [o["metadata"] for o in got] == [{"name": n, "namespace": "ns", "resourceVersion": rv, "labels": {"team": "a"}}
                                            for n, rv in (("a", "9"), ("b", "11"), ("a", "12"))]
