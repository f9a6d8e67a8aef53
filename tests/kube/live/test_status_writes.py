"""When the scheduler writes a pending pod's PodScheduled condition (`SchedulerService._report`):
once per change, again when the pod does not show it, and never trusting a cached status that
lags behind a write of its own; and a PodGroup or Queue status write that failed is asked again."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from gpufleet.framework.profiles import builtin
from gpufleet.kube.cache import Pending
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings, _forget_unless_written

from .test_binder import FakeRest, SlowStatusRest, api_error, binder_on
from .test_translate import pod

NOMINATED = "waiting for 1 preempted pod(s) to leave node n1"
UNSCHEDULABLE = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def showing(message: str | None, nominated: str | None = None) -> Pending:
    """A pending pod whose status (as cached) shows `message` (None: no condition yet)."""
    obj: dict[str, Any] = pod("a", limits={"nvidia.com/gpu": 8})
    if message is not None:
        obj["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": message}], "nominatedNodeName": nominated}
    return Pending("ns/a", obj, None)


@pytest.fixture
def writes(request: pytest.FixtureRequest) -> Iterator[tuple[SchedulerService, list[tuple[str, str | None]]]]:
    interval = getattr(request, "param", 10.0)
    service = SchedulerService(object(), builtin("default"), ServiceSettings(status_interval_s=interval))  # type: ignore[arg-type]
    asked: list[tuple[str, str | None]] = []

    def record(key: str, obj: Any, message: str, reason: str = "Unschedulable", nominated: str | None = None) -> None:
        asked.append((message, nominated))
    service.binder.mark_unschedulable = record  # type: ignore[method-assign,assignment]
    yield service, asked
    service.binder.close()
    service.events.close()


def test_a_nomination_cleared_before_its_echo_is_back_is_cleared_on_the_server_too(
        writes: tuple[SchedulerService, list[tuple[str, str | None]]]) -> None:
    """The cached pod still shows the status before the nomination: trusting it would skip the
    write that clears the nomination, and the nomination would land and stay."""
    service, asked = writes
    service._report(showing(UNSCHEDULABLE), NOMINATED, "Unschedulable", nominated="n1")
    service._report(showing(UNSCHEDULABLE), UNSCHEDULABLE, "Unschedulable")
    assert asked == [(NOMINATED, "n1"), (UNSCHEDULABLE, None)]


def test_a_status_the_pod_shows_already_is_not_written(
        writes: tuple[SchedulerService, list[tuple[str, str | None]]]) -> None:
    service, asked = writes
    for _ in range(3):
        service._report(showing(UNSCHEDULABLE), UNSCHEDULABLE, "Unschedulable")
    assert asked == []


def test_an_unchanged_status_is_written_once_while_its_echo_is_on_the_way(
        writes: tuple[SchedulerService, list[tuple[str, str | None]]]) -> None:
    service, asked = writes
    for _ in range(3):
        service._report(showing(None), UNSCHEDULABLE, "Unschedulable")
    assert asked == [(UNSCHEDULABLE, None)]


@pytest.mark.parametrize("writes", [0.0], indirect=True)
def test_a_status_overwritten_by_another_writer_is_written_again(
        writes: tuple[SchedulerService, list[tuple[str, str | None]]]) -> None:
    """A killed leader's nomination landing after its successor's write (status_interval_s 0:
    the successor's write is old by the next cycle)."""
    service, asked = writes
    service._report(showing(None), UNSCHEDULABLE, "Unschedulable")
    service._report(showing(UNSCHEDULABLE), UNSCHEDULABLE, "Unschedulable")  # the echo: nothing to do
    service._report(showing(NOMINATED, "n1"), UNSCHEDULABLE, "Unschedulable")  # the late write landed
    assert asked == [(UNSCHEDULABLE, None), (UNSCHEDULABLE, None)]


class FailingStatusRest(FakeRest):
    """Every status PATCH is refused with a 500."""

    def __init__(self) -> None:
        super().__init__(lambda: {})

    def patch(self, url: str, body: dict[str, Any], kind: Any = None) -> dict[str, Any]:
        raise api_error(500)


def test_a_failed_queue_status_write_is_forgotten_so_the_next_round_writes_it_again() -> None:
    outcomes = {}
    for name, rest in (("refused", FailingStatusRest()), ("written", SlowStatusRest())):
        if isinstance(rest, SlowStatusRest):
            rest.release.set()
        binder, events = binder_on(rest, workers=1)
        status = {"pending": 3}
        memory: dict[str, Any] = {"team-a": status}
        future = binder.queue_status("team-a", dict(status))
        future.add_done_callback(_forget_unless_written(memory, "team-a", status))
        outcomes[name] = (future.result(10), dict(memory))
        binder.close()
        events.close()
    assert outcomes == {"refused": (False, {}), "written": (True, {"team-a": {"pending": 3}})}
