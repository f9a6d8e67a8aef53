"""Leader election on a Lease, against an in-memory lease store and a fake clock."""

from __future__ import annotations

import copy
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError

from gpufleet.kube.leader import LeaderElector, LeaseSettings, micro_time, parse_time
from gpufleet.kube.rest import Rest

SETTINGS = LeaseSettings("sys", "sched", 15, 10, 2)


def _error(code: int, url: str) -> ApiError:
    reason = {404: "NotFound", 409: "Conflict", 500: "InternalError"}[code]
    return ApiError(request=httpx2.Request("GET", "http://x" + url),
                    response=httpx2.Response(code, json={"kind": "Status", "code": code, "reason": reason,
                                                         "message": reason}, request=httpx2.Request("GET", "http://x")))


class LeaseStore:
    """get/post/put of one Lease with resourceVersion checks, as the API server does."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.fail_next = 0
        self.writes: list[dict[str, Any]] = []

    def _check(self, url: str) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise _error(500, url)

    def get(self, url: str) -> dict[str, Any]:
        self._check(url)
        if self.lease is None:
            raise _error(404, url)
        return copy.deepcopy(self.lease)

    def post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check(url)
        if self.lease is not None:
            raise _error(409, url)
        return self._store(body)

    def put(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check(url)
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise _error(409, url)
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        self.writes.append(copy.deepcopy(self.lease))
        return copy.deepcopy(self.lease)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def elector(store: LeaseStore, clock: Clock, name: str) -> LeaderElector:
    rest: Rest = store  # type: ignore[assignment]  # duck-typed: get/post/put
    return LeaderElector(rest, name, SETTINGS, clock=clock)


def test_micro_time_always_has_six_fractional_digits() -> None:
    assert micro_time(1_700_000_000.0) == "2023-11-14T22:13:20.000000Z"
    assert parse_time(micro_time(1_700_000_000.25)) == 1_700_000_000.25


def test_first_candidate_creates_the_lease_the_second_waits() -> None:
    store, clock = LeaseStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    spec = store.lease["spec"] if store.lease else {}
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith(".000000Z")


def test_renewal_keeps_the_acquire_time_and_transitions() -> None:
    store, clock = LeaseStore(), Clock()
    a = elector(store, clock, "a")
    a.try_acquire_or_renew()
    clock.now += 2
    assert a.try_acquire_or_renew()
    first, second = store.writes
    assert second["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    assert second["spec"]["renewTime"] != first["spec"]["renewTime"] and second["spec"]["leaseTransitions"] == 0


def test_takeover_only_after_the_lease_expired() -> None:
    store, clock = LeaseStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.try_acquire_or_renew()
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    clock.now += 0.2  # renewTime + 15 s is now in the past
    assert b.try_acquire_or_renew()
    spec = store.lease["spec"] if store.lease else {}
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_a_stale_read_loses_the_race() -> None:
    store, clock = LeaseStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.try_acquire_or_renew()
    clock.now += 20
    stale = store.get("")
    assert b.try_acquire_or_renew()
    body = a._body(stale, clock.now, 1, clock.now)  # a writes with the version it read before b's write
    with pytest.raises(ApiError):
        store.put("", body)


def test_release_lets_a_standby_take_over_at_once() -> None:
    store, clock = LeaseStore(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a.try_acquire_or_renew()
    a.leading.set()
    a.release()
    spec = store.lease["spec"] if store.lease else {}
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()


def test_the_leader_steps_down_when_renewals_fail_past_the_deadline() -> None:
    store, clock = LeaseStore(), Clock()
    events: list[str] = []
    waits = iter(range(100))

    def wait(seconds: float) -> bool:
        clock.now += seconds
        i = next(waits)
        if i == 1:
            store.fail_next = 100  # the API server goes away after the first renewal
        return "lost" in events

    a = LeaderElector(store, "a", SETTINGS, clock=clock, wait=wait)  # type: ignore[arg-type]
    a.run(lambda: events.append("lead"), lambda: events.append("lost"))
    assert events == ["lead", "lost"]
    assert clock.now - 1_700_000_000.0 <= SETTINGS.renew_deadline_s + 2 * SETTINGS.retry_period_s + 2


def test_settings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseSettings(lease_duration_s=5, renew_deadline_s=10)


def test_a_standby_tries_again_right_when_the_lease_runs_out() -> None:
    store, clock = LeaseStore(), Clock()
    a = elector(store, clock, "a")
    a.try_acquire_or_renew()
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        clock.now += seconds
        return store.lease is not None and store.lease["spec"]["holderIdentity"] == "b"

    clock.now += 14.0  # a renewed 14 s ago and then died
    b = LeaderElector(store, "b", SETTINGS, clock=clock, wait=wait)  # type: ignore[arg-type]
    took_over: list[float] = []
    b.run(lambda: took_over.append(clock.now), lambda: None)
    assert waits[0] == pytest.approx(1.005)  # not the 2 s retry period
    assert took_over[0] - 1_700_000_000.0 <= 15.01  # within the lease duration of a's last renewal
