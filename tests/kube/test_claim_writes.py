"""The claim writes before a Binding, in order, and what is taken back when something fails."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import httpx2

from gpufleet.kube import translate
from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.claims import allocation_status, quantity
from gpufleet.model import NodeName, Placement, PodUid
from gpufleet.model.dra import DELETE_PROTECTION, AllocatedDevice, ClaimAllocation, Frozen, node_selector_for

from .claim_fakes import DRIVER, ClaimStore, api_error, binder_for, claim, claim_pod

Obj = dict[str, Any]


def allocation(key: str = "ns/c1", device: str = "gpu-0", node: str = "n1") -> ClaimAllocation:
    return ClaimAllocation(key, (AllocatedDevice("gpu", DRIVER, node, device),), node)


def placed(pod: str, *claims: ClaimAllocation, node: str = "n1") -> Placement:
    return Placement(PodUid(f"uid-{pod}"), NodeName(node), claims=claims)


def bind(store: ClaimStore, pod: Obj, p: Placement) -> tuple[bool, SchedulerCache]:
    cache = SchedulerCache()
    for c in store.claims.values():
        cache.upsert_claim(c)
    cache.upsert_pod(pod)
    binder, events = binder_for(store, cache)
    node = translate.node_info({"metadata": {"name": p.node}, "status": {"allocatable": {"cpu": "8"}}})
    ok = binder.bind(translate.key_of(pod), pod, p, node, 0.0).result(10)
    binder.close()
    events.close()
    return ok, cache


def status_of(store: ClaimStore, key: str = "ns/c1") -> Obj:
    result: Obj = store.claims[key].get("status") or {}
    return result


def finalizers(store: ClaimStore, key: str = "ns/c1") -> list[str]:
    return list(store.claims[key]["metadata"].get("finalizers") or [])


def test_a_new_allocation_is_finalizer_then_allocation_with_reservation_then_binding() -> None:
    store = ClaimStore(claim("c1"))
    ok, cache = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert ok
    assert store.calls == [("PUT", "claim ns/c1"), ("PUT", "status ns/c1"), ("POST", "binding ns/a")]
    assert finalizers(store) == [DELETE_PROTECTION]
    status = status_of(store)
    assert status["reservedFor"] == [{"resource": "pods", "name": "a", "uid": "uid-a"}]
    assert status["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
    assert status["allocation"]["nodeSelector"] == node_selector_for("n1")
    assert status["allocation"]["allocationTimestamp"].endswith("Z")
    assert "managedFields" not in store.bodies[0]["metadata"]
    # read your writes: the cache holds what the server returned, before any watch event
    assert cache.claim_object("ns/c1") == store.claims["ns/c1"]


def test_a_claim_already_allocated_gets_the_pod_appended_to_reserved_for_only() -> None:
    other = {"resource": "pods", "name": "b", "uid": "uid-b"}
    alloc = allocation_status(allocation(), 0.0)
    store = ClaimStore(claim("c1", allocation=alloc, reservedFor=[other]))
    ok, _ = bind(store, claim_pod("a", "c1"), placed("a"))
    assert ok and store.calls == [("PUT", "status ns/c1"), ("POST", "binding ns/a")]
    assert [r["uid"] for r in status_of(store)["reservedFor"]] == ["uid-b", "uid-a"]
    assert status_of(store)["allocation"] == alloc


def test_a_pod_already_reserved_writes_no_claim() -> None:
    me = {"resource": "pods", "name": "a", "uid": "uid-a"}
    store = ClaimStore(claim("c1", allocation=allocation_status(allocation(), 0.0), reservedFor=[me]))
    ok, _ = bind(store, claim_pod("a", "c1"), placed("a"))
    assert ok and store.calls == [("POST", "binding ns/a")]


def test_a_failed_status_write_takes_the_finalizer_back_and_queues_the_pod_again() -> None:
    store = ClaimStore(claim("c1"))
    store.fail[("PUT", "status ns/c1")] = [api_error(500), api_error(500)]  # both tries of the retrier
    ok, cache = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert not ok
    assert store.calls == [("PUT", "claim ns/c1"), ("PUT", "status ns/c1"), ("PUT", "status ns/c1"),
                           ("GET", "claim ns/c1"), ("PUT", "claim ns/c1")]
    assert finalizers(store) == [] and status_of(store) == {}, "something was left half-written"
    assert [p.key for p in cache.pending()] == ["ns/a"] and cache.assumed_count() == 0


def test_a_conflict_is_read_again_and_written_on_what_the_claim_is_now() -> None:
    store = ClaimStore(claim("c1"))

    def someone_labels_it() -> None:
        store.claims["ns/c1"]["metadata"]["labels"] = {"team": "x"}
        store.bump("ns/c1")
    store.after[("PUT", "claim ns/c1")] = someone_labels_it
    ok, _ = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert ok
    assert store.calls == [("PUT", "claim ns/c1"), ("PUT", "status ns/c1"), ("GET", "claim ns/c1"),
                           ("PUT", "status ns/c1"), ("POST", "binding ns/a")]
    assert status_of(store)["reservedFor"][0]["uid"] == "uid-a"


def test_a_claim_allocated_differently_meanwhile_is_not_overwritten() -> None:
    store = ClaimStore(claim("c1"))
    theirs = allocation_status(allocation(device="gpu-7"), 0.0)

    def another_scheduler_allocates() -> None:
        store.claims["ns/c1"]["status"] = {"allocation": theirs,
                                           "reservedFor": [{"resource": "pods", "name": "x", "uid": "uid-x"}]}
        store.bump("ns/c1")
    store.after[("PUT", "claim ns/c1")] = another_scheduler_allocates
    ok, cache = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert not ok
    assert status_of(store)["allocation"] == theirs and [r["uid"] for r in status_of(store)["reservedFor"]] == ["uid-x"]
    assert finalizers(store) == [DELETE_PROTECTION], "their allocation needs the finalizer: it stays"
    assert ("POST", "binding ns/a") not in store.calls
    assert [p.key for p in cache.pending()] == ["ns/a"]


def test_a_binding_that_certainly_failed_takes_allocation_reservation_and_finalizer_back() -> None:
    store = ClaimStore(claim("c1"))
    store.fail[("POST", "binding ns/a")] = [api_error(403)]
    ok, cache = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert not ok
    assert store.calls[-3:] == [("GET", "claim ns/c1"), ("PUT", "status ns/c1"), ("PUT", "claim ns/c1")]
    assert status_of(store) == {} and finalizers(store) == []
    assert [p.key for p in cache.pending()] == ["ns/a"]


def test_a_binding_whose_reply_was_lost_keeps_the_claims() -> None:
    store = ClaimStore(claim("c1"))
    store.fail[("POST", "binding ns/a")] = [httpx2.ReadTimeout("late"), httpx2.ReadTimeout("late")]
    ok, cache = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert not ok and cache.assumed_count() == 1, "the pod may be bound: it may run with its claims"
    assert status_of(store)["reservedFor"][0]["uid"] == "uid-a" and finalizers(store) == [DELETE_PROTECTION]


def test_undo_leaves_the_allocation_when_another_pod_reserved_the_claim_meanwhile() -> None:
    store = ClaimStore(claim("c1"))

    def a_sharer_joins() -> None:
        store.claims["ns/c1"]["status"]["reservedFor"].append({"resource": "pods", "name": "b", "uid": "uid-b"})
        store.bump("ns/c1")
    store.after[("PUT", "status ns/c1")] = a_sharer_joins
    store.fail[("POST", "binding ns/a")] = [api_error(403)]
    ok, _ = bind(store, claim_pod("a", "c1"), placed("a", allocation()))
    assert not ok
    assert [r["uid"] for r in status_of(store)["reservedFor"]] == ["uid-b"]
    assert status_of(store)["allocation"] and finalizers(store) == [DELETE_PROTECTION]


def test_the_second_claims_failure_takes_back_the_first_claims_writes_too() -> None:
    store = ClaimStore(claim("c1"), claim("c2"))
    store.claims["ns/c2"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    p = placed("a", allocation("ns/c1"), allocation("ns/c2", device="gpu-1"))
    ok, _ = bind(store, claim_pod("a", "c1", "c2"), p)
    assert not ok and ("POST", "binding ns/a") not in store.calls
    assert status_of(store) == {} and finalizers(store) == []
    assert status_of(store, "ns/c2") == {} and finalizers(store, "ns/c2") == []


def test_a_pod_sharing_a_claim_allocated_in_the_same_cycle_waits_for_that_allocation() -> None:
    store = ClaimStore(claim("c1"))
    release = threading.Event()
    store.after[("PUT", "claim ns/c1")] = lambda: release.wait(10) and None  # a's finalizer write is slow
    cache = SchedulerCache()
    cache.upsert_claim(store.claims["ns/c1"])
    a, b = claim_pod("a", "c1"), claim_pod("b", "c1")
    for pod in (a, b):
        cache.upsert_pod(pod)
    binder, events = binder_for(store, cache)
    node = translate.node_info({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}})
    first = binder.bind("ns/a", a, placed("a", allocation()), node, 0.0)
    second = binder.bind("ns/b", b, placed("b"), node, 0.0)  # follows a's allocation of the shared claim
    assert not second.done()
    release.set()
    assert first.result(10) and second.result(10)
    binder.close()
    events.close()
    assert [r["uid"] for r in status_of(store)["reservedFor"]] == ["uid-a", "uid-b"]
    assert store.calls.index(("POST", "binding ns/b")) > store.calls.index(("PUT", "status ns/c1"))


def test_consumed_capacity_is_written_in_the_drivers_names_as_quantities() -> None:
    device = AllocatedDevice("mem", DRIVER, "n1", "gpu-0", Frozen({f"{DRIVER}/memory": Decimal(42949672960)}),
                             share_id="s1")
    status = allocation_status(ClaimAllocation("ns/c", (device,), None), 0.0)
    assert status["devices"]["results"][0]["consumedCapacity"] == {"memory": "42949672960"}
    assert status["devices"]["results"][0]["shareID"] == "s1" and "nodeSelector" not in status
    assert quantity(Decimal("0.500")) == "0.5" and quantity(Decimal("4E+1")) == "40"
