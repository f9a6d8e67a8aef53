"""`Statement`, the core's one transactional type: place, evict, checkpoint, roll back."""

from __future__ import annotations

import random

import numpy as np

from gpufleet.core.statement import Statement
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.status import Status
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid
from gpufleet.testing import make_node, make_pod


def _statement(snap: ClusterSnapshot) -> Statement:
    return Statement(snap, build_profile(ProfileSettings(scores=(ScoreRef("MostAllocated"),))), 0.0, random.Random(0))


def test_rollback_undoes_places_and_evictions_since_the_mark_newest_first() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 1000, 0, (0,), 1000, 0)
    snap = ClusterSnapshot.build([make_node("n1").gpus(2).build(), make_node("n2").gpus(2).build()], [running])
    st = _statement(snap)
    first = st.place(make_pod("a").gpus(1).build())
    assert isinstance(first, Placement) and (first.node, first.gpus) == ("n1", (1,))
    before = st.view.usage.copy()
    epoch = st.epoch
    mark = st.checkpoint()
    second = st.place(make_pod("b").gpus(2).build())
    assert isinstance(second, Placement) and second.node == "n2"
    st.evict(running)
    assert st.epoch == epoch + 1
    third = st.place(make_pod("c").gpus(1).build())
    assert isinstance(third, Placement) and (third.node, third.gpus) == ("n1", (0,))
    undone = st.rollback(mark)
    assert [(c.placement.pod, c.is_eviction) for c in undone] == [
        ("default/c", False), ("default/old", True), ("default/b", False)]
    assert st.epoch == epoch + 2  # capacity was given back: failures seen before may not hold
    for name in ("gpu_used_milli", "free_cpu", "free_whole", "free_pods"):
        assert np.array_equal(getattr(st.view.usage, name), getattr(before, name)), name
    assert st.rollback(st.checkpoint()) == []


def test_rolling_back_only_an_eviction_takes_capacity_and_keeps_the_epoch() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 0, 0, (0,), 1000, 0)
    snap = ClusterSnapshot.build([make_node("n1").gpus(1).build()], [running])
    st = _statement(snap)
    mark = st.checkpoint()
    st.evict(running)
    epoch = st.epoch
    assert int(st.view.usage.free_whole[0]) == 1
    st.rollback(mark)
    assert (int(st.view.usage.free_whole[0]), st.epoch) == (0, epoch)


def test_a_pod_that_fits_nowhere_fails_again_only_until_capacity_comes_back() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 0, 0, (0,), 1000, 0)
    st = _statement(ClusterSnapshot.build([make_node("n1").gpus(1).build()], [running]))
    why = st.place(make_pod("a").gpus(1).build())
    assert isinstance(why, Status)
    assert st.place(make_pod("b").gpus(1).build()) is why  # the same constraints: the cached failure
    st.evict(running)
    assert isinstance(st.place(make_pod("c").gpus(1).build()), Placement)
