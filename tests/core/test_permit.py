"""The permit extension point: a plugin may veto a tentative placement, which is rolled back."""

from __future__ import annotations

import random

from gpufleet.core.cycle import schedule
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import View
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.registry import Entry, default_registry
from gpufleet.framework.status import OK, Status, unschedulable
from gpufleet.model import ClusterSnapshot, PodSpec
from gpufleet.testing import make_node, make_pod


class QueueGate:
    """Out-of-tree plugin: pods of queue "frozen" are not permitted; it also scores nothing."""

    name = "QueueGate"

    def permit(self, state: CycleState, pod: PodSpec, placed_in_group: int, view: View) -> Status:
        return unschedulable(self.name, "queue frozen is paused") if pod.queue == "frozen" else OK

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes):  # type: ignore[no-untyped-def]
        import numpy as np
        return np.zeros(len(nodes))


def test_a_denied_pod_is_rolled_back_and_the_capacity_goes_to_the_next_pod() -> None:
    registry = dict(default_registry())
    registry["QueueGate"] = Entry(lambda _args, _ctx: QueueGate())
    profile = build_profile(ProfileSettings(scores=(ScoreRef("QueueGate"),)), registry=registry)
    snap = ClusterSnapshot.build([make_node("n1").gpus(1).build()])
    frozen = make_pod("a").gpus(1).queue("frozen").created(0.0).build()
    normal = make_pod("b").gpus(1).created(1.0).build()
    result = schedule(snap, [frozen, normal], profile, now=0.0, rng=random.Random(0))
    assert [b.pod for b in result.binds] == [normal.uid]
    assert result.unschedulable[frozen.uid].reasons == ("queue frozen is paused",)
    assert result.unschedulable[frozen.uid].plugin == "QueueGate"
