"""The binder's outcomes: what the cache believes after each kind of reply to a Binding."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Any, Callable

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from gpufleet.kube.binder import Binder
from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.ratelimit import TokenBucket
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.kube import translate
from gpufleet.model import NodeName, Placement, PodUid
from gpufleet.model import annotations as ann
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION, KeyDir, load_keyring, verify

from .test_cache import gpu_node
from .test_translate import pod


def api_error(code: int) -> ApiError:
    req = httpx2.Request("POST", "http://x/binding")
    return ApiError(request=req, response=httpx2.Response(code, json={"kind": "Status", "code": code, "message": "m"},
                                                          request=req))


class FakeRest:
    def __init__(self, binding: Callable[[], Any], bound_on_read: bool = False) -> None:
        self.binding, self.bound_on_read = binding, bound_on_read
        self.posts: list[tuple[str, dict[str, Any]]] = []

    def post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((url, body))
        if url.endswith("/binding"):
            result: dict[str, Any] = self.binding()
            return result
        return {}

    def get(self, url: str) -> dict[str, Any]:
        return {"spec": {"nodeName": "n1" if self.bound_on_read else None}}


def run(rest: FakeRest, keys: KeyDir | None = None) -> tuple[SchedulerCache, bool]:
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    p = pod("a", limits={"nvidia.com/gpu": 1})
    cache.upsert_pod(p)
    retrier = Retrier(RetryPolicy(attempts=2, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(rest, retrier, "me")  # type: ignore[arg-type]
    binder = Binder(rest, cache, TokenBucket(0, 1), retrier, events, Metrics(), keys=keys)  # type: ignore[arg-type]
    placement = Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920)
    ok = binder.bind("ns/a", p, placement, translate.node_info(gpu_node()), 0.0).result()
    binder.close()
    events.close()
    return cache, ok


def test_a_bind_is_one_binding_carrying_the_assignment() -> None:
    rest = FakeRest(lambda: {})
    cache, ok = run(rest)
    binding = next(b for u, b in rest.posts if u.endswith("/binding"))
    assert ok and binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert binding["metadata"]["uid"] == "uid-a"
    a = ann.decode_assignment(binding["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION])
    assert a.node == "n1" and a.gpus == ("GPU-b",) and a.milli == 1000
    assert cache.assumed_count() == 1 and cache.pending() == []  # until the watch echo


def test_with_keys_the_binding_carries_a_signature_for_this_pod_node_and_assignment(tmp_path: Path) -> None:
    (tmp_path / "k1").write_bytes(b"s" * 32)
    rest = FakeRest(lambda: {})
    _, ok = run(rest, KeyDir(tmp_path))
    annotations = next(b for u, b in rest.posts if u.endswith("/binding"))["metadata"]["annotations"]
    ring = load_keyring(tmp_path)
    text = annotations[ann.ASSIGNMENT_ANNOTATION]
    assert ok and annotations[SIGNATURE_ANNOTATION].startswith("v1:k1:")
    assert verify(ring, annotations[SIGNATURE_ANNOTATION], "uid-a", "ns/a", "n1", text) is None
    assert verify(ring, annotations[SIGNATURE_ANNOTATION], "uid-b", "ns/a", "n1", text) == "mismatch"
    unsigned = FakeRest(lambda: {})
    run(unsigned)
    assert SIGNATURE_ANNOTATION not in next(b for u, b in unsigned.posts if u.endswith("/binding"))["metadata"]["annotations"]


@pytest.mark.parametrize(("failure", "bound_on_read", "assumed"), [
    (lambda: api_error(409), False, True),
    (lambda: httpx2.ReadTimeout("late"), False, True),
    (lambda: api_error(500), True, True),
    (lambda: api_error(500), False, False),
    (lambda: api_error(403), False, False),
    (lambda: httpx2.ConnectError("refused"), False, False),
], ids=["409 already bound: wait for the watch", "a timeout: the write may land, keep the devices",
        "a 500 but the pod reads back bound: keep", "a 500 and the pod reads back unbound: queue again",
        "403: queue again", "connection refused: the request never left, queue again"])
def test_failed_binds(failure: Callable[[], Exception], bound_on_read: bool, assumed: bool) -> None:
    def fail() -> Any:
        raise failure()
    cache, ok = run(FakeRest(fail, bound_on_read))
    assert not ok
    assert cache.assumed_count() == (1 if assumed else 0)
    assert [p.key for p in cache.pending()] == ([] if assumed else ["ns/a"])


class SlowStatusRest(FakeRest):
    """Holds the first status PATCH until `release` is set; records every status body in order."""

    def __init__(self) -> None:
        super().__init__(lambda: {})
        self.release = threading.Event()
        self.started = threading.Event()
        self.statuses: list[tuple[str, dict[str, Any]]] = []

    def patch(self, url: str, body: dict[str, Any], kind: Any = None) -> dict[str, Any]:
        if not self.started.is_set():
            self.started.set()
            self.release.wait(10)
        self.statuses.append((url, body["status"]))
        return {}


def binder_on(rest: FakeRest, workers: int) -> tuple[Binder, EventRecorder]:
    retrier = Retrier(RetryPolicy(attempts=1, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(rest, retrier, "me")  # type: ignore[arg-type]
    return Binder(rest, SchedulerCache(), TokenBucket(0, 1), retrier, events, Metrics(),  # type: ignore[arg-type]
                  workers=workers), events


def test_a_pods_status_writes_land_in_the_order_asked_even_when_the_first_is_slow() -> None:
    rest = SlowStatusRest()
    binder, events = binder_on(rest, workers=2)
    p = pod("a", limits={"nvidia.com/gpu": 8})
    old = binder.mark_unschedulable("ns/a", p, "waiting for 1 preempted pod(s) to leave node n1", nominated="n1")
    assert rest.started.wait(10)
    new = binder.mark_unschedulable("ns/a", p, "0/1 nodes are available: 1 Insufficient GPU.")
    rest.release.set()
    assert old.result(10) and new.result(10)
    binder.close()
    events.close()
    assert [s["nominatedNodeName"] for _, s in rest.statuses] == ["n1", None]  # the newer write lands last


def test_a_status_write_overtaken_in_the_queue_by_a_newer_one_is_dropped() -> None:
    rest = SlowStatusRest()
    binder, events = binder_on(rest, workers=1)
    other = binder.mark_unschedulable("ns/b", pod("b", limits={"nvidia.com/gpu": 1}), "busy")  # holds the worker
    assert rest.started.wait(10)
    p = pod("a", limits={"nvidia.com/gpu": 8})
    first = binder.mark_unschedulable("ns/a", p, "waiting for 1 preempted pod(s) to leave node n1", nominated="n1")
    second = binder.mark_unschedulable("ns/a", p, "0/1 nodes are available: 1 Insufficient GPU.")
    rest.release.set()
    assert other.result(10) and not first.result(10) and second.result(10)
    binder.close()
    events.close()
    assert [(u.split("/")[-2], s["nominatedNodeName"]) for u, s in rest.statuses] == [("b", None), ("a", None)]


def test_a_queues_status_writes_land_in_the_order_asked_even_when_the_first_is_slow() -> None:
    rest = SlowStatusRest()
    binder, events = binder_on(rest, workers=2)
    old = binder.queue_status("team-a", {"pending": 3})
    assert rest.started.wait(10)
    new = binder.queue_status("team-a", {"pending": 0})
    rest.release.set()
    assert old.result(10) and new.result(10)
    binder.close()
    events.close()
    assert [s for _, s in rest.statuses] == [{"pending": 3}, {"pending": 0}]



def test_the_binder_is_busy_from_a_bind_until_its_request_returned_or_failed() -> None:
    gate = threading.Event()
    rest = FakeRest(lambda: gate.wait(30) and {})
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    retrier = Retrier(RetryPolicy(attempts=1, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(rest, retrier, "me")  # type: ignore[arg-type]
    binder = Binder(rest, cache, TokenBucket(0, 1), retrier, events, Metrics())  # type: ignore[arg-type]
    assert not binder.busy()
    future = binder.bind("ns/a", pod("a", limits={"nvidia.com/gpu": 1}),
                         Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920),
                         translate.node_info(gpu_node()), 0.0)
    assert binder.busy()
    gate.set()
    assert future.result(30) and not binder.busy()
    binder.close()
    events.close()


def test_the_binder_says_when_its_last_bind_in_flight_has_answered() -> None:
    gates = [threading.Event() for _ in range(2)]
    answered = iter(gates)
    rest = FakeRest(lambda: next(answered).wait(30) and {})
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    retrier = Retrier(RetryPolicy(attempts=1, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(rest, retrier, "me")  # type: ignore[arg-type]
    idle = threading.Event()
    binder = Binder(rest, cache, TokenBucket(0, 1), retrier, events, Metrics(), workers=2,  # type: ignore[arg-type]
                    on_idle=idle.set)
    futures = []
    for i in range(2):
        p = pod(f"p{i}", limits={"nvidia.com/gpu": 1})
        cache.upsert_pod(p)
        futures.append(binder.bind(f"ns/p{i}", p, Placement(PodUid(f"uid-p{i}"), NodeName("n1"), 0, 0, (i,), 1000,
                                                            81920), translate.node_info(gpu_node()), 0.0))
    gates[0].set()  # whichever asked first
    done, _ = wait(futures, timeout=30, return_when=FIRST_COMPLETED)
    assert len(done) == 1 and not idle.wait(0.2)  # the other is still in flight
    gates[1].set()
    assert all(f.result(30) for f in futures) and idle.wait(30)
    binder.close()
    events.close()


def bind_a(binder: Binder) -> Any:
    return binder.bind("ns/a", pod("a", limits={"nvidia.com/gpu": 1}),
                       Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920),
                       translate.node_info(gpu_node()), 0.0)


class OrderedRest(SlowStatusRest):
    """SlowStatusRest that also records, in one list, the order of status PATCHes and Bindings."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def patch(self, url: str, body: dict[str, Any], kind: Any = None) -> dict[str, Any]:
        result = super().patch(url, body, kind)
        self.order.append(f"status {url.split('/')[-2]}")
        return result

    def post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        if url.endswith("/binding"):
            self.order.append(f"bind {url.split('/')[-2]}")
        return super().post(url, body)


def test_a_bind_waits_for_the_pods_status_write_in_flight() -> None:
    """A PodScheduled=False (here with a nomination) landing after the bind would sit on a bound
    pod; kube-apiserver refuses the nomination with 422."""
    rest = OrderedRest()
    binder, events = binder_on(rest, workers=2)
    binder._cache.upsert_node(gpu_node())
    binder._cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    status = binder.mark_unschedulable("ns/a", pod("a"), "waiting for 1 preempted pod(s) to leave node n1",
                                       nominated="n1")
    assert rest.started.wait(10)
    bound = bind_a(binder)
    time.sleep(0.3)  # a free worker: a bind not held back would be posted by now
    rest.release.set()
    assert status.result(10) and bound.result(10)
    binder.close()
    events.close()
    assert rest.order == ["status a", "bind a"]


def test_a_status_write_queued_before_the_pods_bind_is_dropped() -> None:
    rest = OrderedRest()
    binder, events = binder_on(rest, workers=1)
    binder._cache.upsert_node(gpu_node())
    binder._cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    other = binder.mark_unschedulable("ns/b", pod("b", limits={"nvidia.com/gpu": 1}), "busy")  # holds the worker
    assert rest.started.wait(10)
    status = binder.mark_unschedulable("ns/a", pod("a"), "0/1 nodes are available: 1 Insufficient GPU.")
    bound = bind_a(binder)
    rest.release.set()
    assert other.result(10) and not status.result(10) and bound.result(10)
    binder.close()
    events.close()
    assert rest.order == ["status b", "bind a"]
