"""EventRecorder shutdown: what is queued is sent or counted as dropped, and a send that
outlives `close()` and loses its client does not kill its thread with a traceback."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator

import pytest

from gpufleet.kube.events import EventRecorder
from gpufleet.kube.retry import Retrier, RetryPolicy

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
WAIT_S = 30.0
"""How long a test waits for the recorder's threads: generous, it only bounds a failing test."""


class ClosingRest:
    """A client whose `post` waits for `release` and fails like httpx once `closed` is set;
    `entered` counts the posts that started."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.closed = False
        self.posts = 0

    def post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self.entered.release()
        self.release.wait(WAIT_S)
        if self.closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        self.posts += 1
        return {}


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException]]:
    seen: list[BaseException] = []
    old = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)  # type: ignore[assignment,misc]
    try:
        yield seen
    finally:
        threading.excepthook = old


def recorder(rest: ClosingRest) -> EventRecorder:
    retrier = Retrier(RetryPolicy(attempts=1, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    return EventRecorder(rest, retrier, "me", workers=2)  # type: ignore[arg-type]


def test_close_drops_what_it_cannot_send_and_a_send_that_outlives_it_ends_quietly(
        thread_errors: list[BaseException]) -> None:
    rest = ClosingRest()
    events = recorder(rest)
    for i in range(20):
        assert events.record(POD, reason="Scheduled", note=f"n{i}")
    for _ in range(2):
        assert rest.entered.acquire(timeout=WAIT_S), "a worker never started sending"
    events.close(timeout_s=0.05)  # both workers are stuck in a send: 18 queued events are dropped
    assert events.dropped == 18
    rest.closed = True  # the caller closes its client, as the scheduler does right after
    rest.release.set()
    for t in events._threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    assert thread_errors == []
    assert (events.sent, events.dropped) == (0, 20)


def test_close_sends_what_is_queued_when_there_is_time() -> None:
    rest = ClosingRest()
    rest.release.set()
    events = recorder(rest)
    for i in range(20):
        events.record(POD, reason="Scheduled", note=f"n{i}")
    events.close(timeout_s=WAIT_S)  # returns as soon as the queue is empty
    assert (events.sent, events.dropped, rest.posts) == (20, 0, 20)
    assert not any(t.is_alive() for t in events._threads)


def test_a_closed_client_before_close_is_still_a_bug(thread_errors: list[BaseException]) -> None:
    rest = ClosingRest()
    rest.closed = True
    rest.release.set()
    events = recorder(rest)
    events.record(POD, reason="Scheduled", note="n")
    deadline = time.monotonic() + WAIT_S
    while not thread_errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [type(e) for e in thread_errors] == [RuntimeError]
    events.close(timeout_s=0.1)


def test_events_wait_while_binds_are_waiting_at_most_max_defer_s() -> None:
    """On a busy API server an event costs it as much as a bind: events go when no bind is waiting,
    or once they have waited `max_defer_s`."""
    rest = ClosingRest()
    rest.release.set()
    binding = threading.Event()
    binding.set()
    retrier = Retrier(RetryPolicy(attempts=1, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(rest, retrier, "me", workers=1, defer_to=binding.is_set,  # type: ignore[arg-type]
                           max_defer_s=WAIT_S)
    try:
        events.record(POD, reason="Scheduled", note="assigned")
        assert not rest.entered.acquire(timeout=0.3)  # held back while binds wait
        binding.clear()
        assert rest.entered.acquire(timeout=WAIT_S)
        events.max_defer_s = 0.2
        binding.set()
        events.record(POD, reason="Scheduled", note="assigned again")
        assert rest.entered.acquire(timeout=WAIT_S)  # binds still waiting, but it waited long enough
    finally:
        events.close(timeout_s=1.0)
