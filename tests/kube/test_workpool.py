"""`WorkPool`: urgent work first, the rest never starved, each kind in the order asked."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError
from typing import Callable

import pytest

from gpufleet.kube.workpool import WorkPool


def held(pool: WorkPool, workers: int) -> tuple[threading.Event, list[str]]:
    """Occupy every thread of `pool` until the returned event is set; `order` records what runs after."""
    gate, started = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        started.release()
        gate.wait(30)

    for _ in range(workers):
        pool.submit(hold)
    for _ in range(workers):
        assert started.acquire(timeout=10)
    return gate, []


def record(order: list[str], name: str) -> Callable[[], str]:
    def run() -> str:
        order.append(name)
        return name
    return run


def test_urgent_work_queued_after_other_work_runs_first() -> None:
    pool = WorkPool(1, share=8)
    gate, order = held(pool, 1)
    for i in range(3):
        pool.submit(record(order, f"status {i}"))
    for i in range(3):
        pool.submit(record(order, f"bind {i}"), urgent=True)
    gate.set()
    pool.shutdown(wait=True)
    assert order == ["bind 0", "bind 1", "bind 2", "status 0", "status 1", "status 2"]


def test_other_work_gets_one_start_in_share_while_urgent_work_waits() -> None:
    pool = WorkPool(1, share=4)
    gate, order = held(pool, 1)
    for i in range(3):
        pool.submit(record(order, f"s{i}"))
    for i in range(9):
        pool.submit(record(order, f"b{i}"), urgent=True)
    gate.set()
    pool.shutdown(wait=True)
    assert order == ["b0", "b1", "b2", "s0", "b3", "b4", "b5", "s1", "b6", "b7", "b8", "s2"]


@pytest.mark.parametrize("urgent", [False, True])
def test_one_kind_alone_runs_in_the_order_submitted(urgent: bool) -> None:
    pool = WorkPool(1)
    gate, order = held(pool, 1)
    for i in range(20):
        pool.submit(record(order, str(i)), urgent=urgent)
    gate.set()
    pool.shutdown(wait=True)
    assert order == [str(i) for i in range(20)]


def test_a_result_and_an_exception_reach_the_future() -> None:
    pool = WorkPool(2)

    def fail() -> None:
        raise KeyError("boom")

    assert pool.submit(lambda: 41 + 1).result(10) == 42
    with pytest.raises(KeyError, match="boom"):
        pool.submit(fail, urgent=True).result(10)
    assert pool.submit(lambda: "still working").result(10) == "still working"  # the thread survived
    pool.shutdown()


def test_threads_start_as_work_arrives_and_never_exceed_workers() -> None:
    pool = WorkPool(3, name="t")
    assert not [t for t in threading.enumerate() if t.name.startswith("t_")]
    pool.submit(lambda: None).result(10)
    gate, _ = held(pool, 3)  # three at once: needs all three threads
    running = [t for t in threading.enumerate() if t.name.startswith("t_")]
    futures = [pool.submit(lambda: None) for _ in range(10)]
    assert len([t for t in threading.enumerate() if t.name.startswith("t_")]) == len(running) == 3
    gate.set()
    for f in futures:
        f.result(10)
    pool.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("t_")]


def test_shutdown_cancelling_drops_the_work_not_started_and_refuses_more() -> None:
    pool = WorkPool(1)
    gate, order = held(pool, 1)
    queued = [pool.submit(record(order, "late")), pool.submit(record(order, "late"), urgent=True)]
    gate.set()
    pool.shutdown(wait=True, cancel_futures=True)
    for f in queued:
        with pytest.raises(CancelledError):
            f.result(0)
    assert order == []
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)


def test_shutdown_without_cancelling_runs_the_work_queued() -> None:
    pool = WorkPool(1)
    gate, order = held(pool, 1)
    pool.submit(record(order, "status"))
    pool.submit(record(order, "bind"), urgent=True)
    gate.set()
    pool.shutdown(wait=True)
    assert order == ["bind", "status"]


@pytest.mark.parametrize("workers, share", [(0, 8), (1, 1)])
def test_bad_sizes_are_refused(workers: int, share: int) -> None:
    with pytest.raises(ValueError, match="at least"):
        WorkPool(workers, share=share)
