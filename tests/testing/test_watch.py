"""List and watch: resourceVersions, bookmarks, 410 Expired, selector transitions."""

from __future__ import annotations

import threading
import time

from gpufleet.testing.apiserver import ApiServer

from .conftest import Client, pod

PODS = "/api/v1/namespaces/default/pods"


def _later(delay_s: float, action: object) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        action()  # type: ignore[operator]
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_watch_from_a_list_resource_version_sees_exactly_the_later_changes(client: Client) -> None:
    client.ok("POST", PODS, pod("before"))
    rv = client.ok("GET", PODS)["metadata"]["resourceVersion"]
    client.ok("POST", PODS, pod("after"))
    client.ok("DELETE", f"{PODS}/before")
    client.ok("POST", PODS, pod("end"))
    events = client.watch_until(f"{PODS}?watch=true&resourceVersion={rv}", "end")
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen == [("ADDED", "after"), ("DELETED", "before")]


def test_a_watch_without_resource_version_starts_with_the_current_objects(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    stream = client.watch(f"{PODS}?watch=true")
    first = next(stream)
    _later(0.1, lambda: client.ok("POST", PODS, pod("b")))
    second = next(stream)
    assert [(first["type"], first["object"]["metadata"]["name"]),
            (second["type"], second["object"]["metadata"]["name"])] == [("ADDED", "a"), ("ADDED", "b")]


def test_resource_versions_come_from_one_counter_across_resources(client: Client) -> None:
    a = int(client.ok("POST", PODS, pod("a"))["metadata"]["resourceVersion"])
    ns = client.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "x"}})
    b = int(client.ok("POST", PODS, pod("b"))["metadata"]["resourceVersion"])
    assert a < int(ns["metadata"]["resourceVersion"]) < b


def test_a_watch_from_a_resource_version_older_than_the_history_gets_410_expired() -> None:
    with ApiServer(kubelet=False, history=3) as srv:
        client = Client(srv.url)
        rv = client.ok("GET", PODS)["metadata"]["resourceVersion"]
        for name in "abcd":
            client.ok("POST", PODS, pod(name))
        events = list(client.watch(f"{PODS}?watch=true&resourceVersion={rv}"))
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert (status["code"], status["reason"]) == (410, "Expired")
        assert "too old resource version" in status["message"]
        relist = client.ok("GET", PODS)  # what an informer does next
        assert len(relist["items"]) == 4


def test_bookmarks_carry_the_current_resource_version_when_idle(client: Client) -> None:
    rv = client.ok("GET", PODS)["metadata"]["resourceVersion"]
    client.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "elsewhere"}})  # moves the counter
    stream = client.watch(f"{PODS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}")
    bookmark = next(stream)  # nothing happens to pods, so the first event is a bookmark
    assert (bookmark["type"], bookmark["object"]["kind"]) == ("BOOKMARK", "Pod")
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) > int(rv)


def test_send_initial_events_ends_with_an_annotated_bookmark(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    stream = client.watch(f"{PODS}?watch=true&allowWatchBookmarks=true&sendInitialEvents=true"
                          "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    first, second = next(stream), next(stream)
    assert first["type"] == "ADDED"
    assert second["type"] == "BOOKMARK"
    assert second["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_selector_watch_sees_an_object_leave_as_deleted_and_enter_as_added(client: Client) -> None:
    client.ok("POST", PODS, pod("a", labels={"team": "x"}))
    rv = client.ok("GET", PODS)["metadata"]["resourceVersion"]
    merge = "application/merge-patch+json"
    client.ok("PATCH", f"{PODS}/a", {"metadata": {"labels": {"team": "y"}}}, merge)
    client.ok("PATCH", f"{PODS}/a", {"metadata": {"labels": {"team": "x"}}}, merge)
    client.ok("POST", PODS, pod("end", labels={"team": "x"}))
    events = client.watch_until(f"{PODS}?watch=true&labelSelector=team%3Dx&resourceVersion={rv}", "end")
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


def test_a_field_selector_watch_follows_only_unbound_pods_of_one_scheduler(server: ApiServer, client: Client) -> None:
    rv = client.ok("GET", PODS)["metadata"]["resourceVersion"]
    client.ok("POST", PODS, pod("mine"))
    client.ok("POST", PODS, pod("theirs", scheduler="default-scheduler"))
    client.ok("POST", f"{PODS}/mine/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "mine"},
                                              "target": {"kind": "Node", "name": "n1"}})
    client.ok("POST", PODS, pod("end"))
    query = "fieldSelector=spec.schedulerName%3Dgpufleet%2Cspec.nodeName%3D"
    events = client.watch_until(f"/api/v1/pods?watch=true&{query}&resourceVersion={rv}", "end")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "mine"), ("DELETED", "mine")]


def test_timeout_seconds_ends_the_stream(client: Client) -> None:
    started = time.monotonic()
    assert list(client.watch(f"{PODS}?watch=true&timeoutSeconds=1")) == []
    assert 0.9 < time.monotonic() - started < 3


def test_stopping_the_server_ends_open_watches() -> None:
    srv = ApiServer(kubelet=False).start()
    stream = Client(srv.url).watch(f"{PODS}?watch=true", timeout_s=5)
    ended = threading.Event()

    def drain() -> None:
        for _ in stream:
            pass
        ended.set()
    threading.Thread(target=drain, daemon=True).start()
    time.sleep(0.2)
    srv.stop()
    assert ended.wait(3)
