"""The scheduler loop's rest between cycles: at most `share` of the time cycling, no rest after a quiet spell."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.kube.pacing import CyclePacer

from .test_heap import Clock


def cycle(pacer: CyclePacer, clock: Clock, busy_s: float) -> float:
    pacer.started()
    clock.now += busy_s
    return pacer.finished()


def test_a_cycle_after_a_quiet_spell_is_not_followed_by_a_rest_of_its_own_length() -> None:
    clock = Clock()
    pacer = CyclePacer(burst_s=0.1, min_rest_s=0.002, clock=clock)
    assert cycle(pacer, clock, 0.030) == 0.002
    clock.now += 5.0  # nothing changed for a while
    assert cycle(pacer, clock, 0.030) == 0.002


def test_back_to_back_cycles_rest_once_the_burst_is_spent() -> None:
    clock = Clock()
    pacer = CyclePacer(share=0.5, burst_s=0.1, min_rest_s=0.002, clock=clock)
    rests = []
    for _ in range(10):
        rest = cycle(pacer, clock, 0.040)
        rests.append(rest)
        clock.now += rest
    assert rests[:2] == [0.002, 0.002]  # 80 ms of the 100 ms burst, and the rests earn a little
    assert rests[-1] == pytest.approx(0.040)  # then as long as each cycle: half of the time


def test_without_a_burst_every_cycle_rests_its_own_length_scaled_by_the_share() -> None:
    clock = Clock()
    half = CyclePacer(share=0.5, burst_s=0.0, clock=clock)
    assert cycle(half, clock, 0.030) == pytest.approx(0.030)
    third = CyclePacer(share=0.25, burst_s=0.0, clock=clock)
    assert cycle(third, clock, 0.030) == pytest.approx(0.090)


@pytest.mark.parametrize("kwargs", [{"share": 0.0}, {"share": 1.0}, {"burst_s": -1.0}, {"min_rest_s": -0.1}])
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CyclePacer(**kwargs)


@settings(max_examples=300, deadline=None)
@given(share=st.floats(0.1, 0.9), burst_s=st.floats(0.0, 0.5),
       steps=st.lists(st.tuples(st.floats(0.0, 0.3), st.floats(0.0, 2.0), st.booleans()), min_size=1, max_size=40))
def test_cycles_never_take_more_than_their_share_beyond_the_burst(
        share: float, burst_s: float, steps: list[tuple[float, float, bool]]) -> None:
    """Whatever the cycles cost and however changes arrive, if the loop rests as told, then in
    every stretch of time from a cycle's start the cycles take at most the burst plus
    `share / (1 - share)` of the time not cycling (a long quiet spell buys no more than the burst)."""
    clock = Clock()
    pacer = CyclePacer(share=share, burst_s=burst_s, min_rest_s=0.0, clock=clock)
    done: list[tuple[float, float, float]] = []  # (quiet before, busy, rest after) of each cycle
    for busy_s, quiet_s, waited in steps:
        quiet = quiet_s if waited else 0.0  # waited for a change, or one came during the last rest
        clock.now += quiet
        rest = cycle(pacer, clock, busy_s)
        clock.now += rest
        done.append((quiet, busy_s, rest))
    for first in range(len(done)):
        busy = idle = 0.0
        for k, (quiet, busy_s, rest) in enumerate(done[first:]):
            idle += quiet if k else 0.0
            busy += busy_s
            idle += rest
            assert busy <= burst_s + idle * share / (1 - share) + 1e-9
