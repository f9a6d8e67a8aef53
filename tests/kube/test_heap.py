"""The scheduler process's full collections: frozen after the first lists, then on its own schedule."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, Iterator

import pytest

from gpufleet.kube.heap import NO_AUTOMATIC_FULL, HeapKeeper


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Node:
    """A weak-referenceable object, in a cycle or not."""

    def __init__(self) -> None:
        self.other: Any = None


@pytest.fixture(autouse=True)
def _restore_the_collector() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.enable()
    gc.unfreeze()
    gc.set_threshold(*saved)


def test_after_the_first_lists_everything_is_frozen_and_full_collections_are_ours() -> None:
    keeper = HeapKeeper(60.0, clock=Clock())
    listed = [{"metadata": {"name": f"p-{i}"}} for i in range(1000)]
    keeper.after_sync()
    assert gc.get_threshold()[2] == NO_AUTOMATIC_FULL and keeper.collections == 1
    assert gc.get_freeze_count() >= len(listed)


def test_a_cycle_made_after_the_freeze_is_collected_when_the_interval_is_up_and_not_before() -> None:
    clock = Clock()
    keeper = HeapKeeper(60.0, 60.0, clock=clock)
    keeper.after_sync()
    gc.disable()  # no young collection in between: only the keeper's can find the cycle
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    clock.now = 59.0
    keeper.tick()
    assert keeper.collections == 1 and gone() is not None
    clock.now = 60.0
    keeper.tick()
    assert keeper.collections == 2 and gone() is None


def test_the_periodic_collection_waits_for_a_quiet_moment_but_not_past_the_longest_wait() -> None:
    clock = Clock()
    keeper = HeapKeeper(5.0, 60.0, clock=clock)
    keeper.after_sync()
    clock.now = 4.0
    keeper.quiet()
    assert keeper.collections == 1  # not due yet
    clock.now = 59.0
    keeper.tick()
    assert keeper.collections == 1  # due since 5 s, but the loop does not stall the binds in flight
    keeper.quiet()
    assert keeper.collections == 2  # the binder sent its last bind
    clock.now = 63.0
    keeper.quiet()
    assert keeper.collections == 2
    clock.now = 119.0
    keeper.tick()
    assert keeper.collections == 3  # 60 s without a quiet moment: collected whatever waits


class HookedClock(Clock):
    """A clock that runs `hook` once, at its `at`-th reading, before answering (the time read first)."""

    def __init__(self) -> None:
        super().__init__()
        self.readings = 0
        self.at = -1
        self.hook: Any = None

    def __call__(self) -> float:
        now = self.now
        self.readings += 1
        if self.readings == self.at:
            self.hook()
        return now


def test_a_collection_found_due_while_another_runs_is_not_run_again() -> None:
    clock = HookedClock()
    keeper = HeapKeeper(5.0, 60.0, clock=clock)
    keeper.after_sync()
    clock.now = 10.0
    other = threading.Thread(target=keeper.quiet)  # another thread, while this one's collection runs
    clock.readings, clock.at, clock.hook = 0, 2, lambda: (other.start(), other.join(30))
    keeper.quiet()  # readings: due? (1); the collection's start (2)
    assert not other.is_alive() and keeper.collections == 2  # the other thread left it to the one running


def test_a_cycle_frozen_while_alive_is_collected_by_the_next_thorough_collection() -> None:
    clock = Clock()
    keeper = HeapKeeper(5.0, 60.0, thorough_s=600.0, clock=clock)
    keeper.after_sync()
    gc.disable()
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    clock.now = 5.0
    keeper.quiet()  # frozen while still referenced
    del a, b
    clock.now = 595.0
    keeper.quiet()
    assert keeper.collections == 3 and gone() is not None  # the frozen are not scanned
    clock.now = 600.0
    keeper.quiet()
    assert keeper.collections == 4 and gone() is None


@pytest.mark.parametrize("interval_s, longest_s", [(0.0, 60.0), (-1.0, 60.0), (61.0, 60.0)])
def test_nonsense_intervals_are_refused(interval_s: float, longest_s: float) -> None:
    with pytest.raises(ValueError):
        HeapKeeper(interval_s, longest_s)


def test_a_frozen_object_without_cycles_is_freed_when_its_last_reference_goes() -> None:
    """What the informers hold (decoded JSON) has no cycles: freezing it does not keep it alive."""
    keeper = HeapKeeper(60.0, clock=Clock())
    pod = Node()
    gone = weakref.ref(pod)
    keeper.after_sync()
    del pod
    assert gone() is None
