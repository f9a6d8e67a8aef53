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


class GroupCounter:
    """Records the placed_in_group values it is shown; permits everything."""

    name = "GroupCounter"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def permit(self, state: CycleState, pod: PodSpec, placed_in_group: int, view: View) -> Status:
        self.seen.append(placed_in_group)
        return OK

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes):  # type: ignore[no-untyped-def]
        import numpy as np
        return np.zeros(len(nodes))


def test_permit_sees_how_many_members_of_the_gang_are_placed_including_tentative_ones() -> None:
    from gpufleet.model import PodGroup

    counter = GroupCounter()
    registry = dict(default_registry())
    registry["GroupCounter"] = Entry(lambda _args, _ctx: counter)
    profile = build_profile(ProfileSettings(scores=(ScoreRef("GroupCounter"),)), registry=registry)
    snap = ClusterSnapshot.build([make_node("n1").gpus(4).build()], pod_groups=[PodGroup("g", 3)])
    gang = [make_pod(f"m{i}").gpus(1).gang("g").build() for i in range(3)]
    result = schedule(snap, gang + [make_pod("solo").gpus(1).created(9.0).build()], profile,
                      now=0.0, rng=random.Random(0))
    assert len(result.binds) == 4
    assert counter.seen == [1, 2, 3, 0]


class GpuBudget:
    """Permits a pod only while the cluster's whole GPUs in use, this pod's included, stay within
    `gpus`, until time `lifted_s`; reads the cycle's clock and the tentative usage."""

    name = "GpuBudget"

    def __init__(self, gpus: int, lifted_s: float) -> None:
        self.gpus, self.lifted_s = gpus, lifted_s

    def permit(self, state: CycleState, pod: PodSpec, placed_in_group: int, view: View) -> Status:
        if state.now >= self.lifted_s:
            return OK
        in_use = int(view.cluster.gpu_count.sum() - view.usage.free_whole.sum())
        return unschedulable(self.name, f"{in_use} GPUs over budget") if in_use > self.gpus else OK

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes):  # type: ignore[no-untyped-def]
        import numpy as np
        return np.zeros(len(nodes))


def test_permit_reads_the_cycles_clock_and_the_usage_with_the_pod_tentatively_placed() -> None:
    budget = GpuBudget(gpus=2, lifted_s=100.0)
    registry = dict(default_registry())
    registry["GpuBudget"] = Entry(lambda _args, _ctx: budget)
    profile = build_profile(ProfileSettings(scores=(ScoreRef("GpuBudget"),)), registry=registry)
    snap = ClusterSnapshot.build([make_node("n1").gpus(4).build()])
    pods = [make_pod(f"p{i}").gpus(1).created(float(i)).build() for i in range(3)]
    early = schedule(snap, pods, profile, now=0.0, rng=random.Random(0))
    assert [b.pod for b in early.binds] == [pods[0].uid, pods[1].uid]
    assert early.unschedulable[pods[2].uid].reasons == ("3 GPUs over budget",)
    late = schedule(snap, pods, profile, now=100.0, rng=random.Random(0))
    assert len(late.binds) == 3 and not late.unschedulable


class GangRecorder:
    """Permits everything; records what permit, reserve and unreserve are shown."""

    name = "GangRecorder"

    def __init__(self) -> None:
        self.permits: list[tuple[str, int]] = []
        self.reserved: list[tuple[str, int]] = []
        self.unreserved: list[tuple[str, int]] = []
        self.views: set[int] = set()

    def permit(self, state: CycleState, pod: PodSpec, placed_in_group: int, view: View) -> Status:
        self.permits.append((pod.name, placed_in_group))
        return OK

    def reserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        self.reserved.append((pod.name, node))
        self.views.add(id(view))

    def unreserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        self.unreserved.append((pod.name, node))
        self.views.add(id(view))

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes):  # type: ignore[no-untyped-def]
        import numpy as np
        return np.zeros(len(nodes))


def test_a_rolled_back_gang_is_unreserved_on_its_nodes_and_counted_from_zero_when_tried_again() -> None:
    """The gang does not fit beside the low pods (2 of 3 placed, rolled back), then fits with them
    evicted: unreserve undoes each tentative member on its node, with the cycle's view, and the
    members counted for permit start from zero again."""
    from gpufleet.core.context import QueueContext
    from gpufleet.framework.queueing import QueueingConfig
    from gpufleet.model import PodGroup, QueueTree

    recorder = GangRecorder()
    registry = dict(default_registry())
    registry["GangRecorder"] = Entry(lambda _args, _ctx: recorder)
    plain = build_profile(ProfileSettings())
    snap = ClusterSnapshot.build([make_node(n).gpus(2).label("host", n).build() for n in ("n0", "n1")],
                                 pod_groups=[PodGroup("g", 3)])
    low = [make_pod(f"low{i}").gpus(1).priority(0).selector("host", "n1").build() for i in range(2)]
    started = schedule(snap, low, plain, now=0.0, rng=random.Random(0))
    assert len(started.binds) == 2
    snap = snap.apply(started.binds)
    profile = build_profile(ProfileSettings(scores=(ScoreRef("GangRecorder"),),
                                            queueing=QueueingConfig(order="priority", preemption=True)),
                            registry=registry)
    gang = [make_pod(f"m{i}").gpus(1).priority(10).gang("g").build() for i in range(3)]
    result = schedule(snap, gang, profile, now=1000.0, rng=random.Random(0), queues=QueueContext(QueueTree.build(())))
    assert result.evictions and len(result.nominated) == 3
    first = recorder.reserved[:2]
    assert recorder.unreserved[:2] == list(reversed(first))  # rolled back last placed first, on its node
    # m0 and m1 placed, m2 does not fit: rolled back; then tried with victims, counting from 1 again
    # (m2 is nominated behind the evictions; it goes through permit when it binds, in a later cycle)
    assert recorder.permits == [("m0", 1), ("m1", 2), ("m0", 1), ("m1", 2)]
    assert len(recorder.views) == 1


def test_rolling_back_a_denied_pod_leaves_the_pods_placed_before_it() -> None:
    registry = dict(default_registry())
    registry["QueueGate"] = Entry(lambda _args, _ctx: QueueGate())
    profile = build_profile(ProfileSettings(scores=(ScoreRef("QueueGate"),)), registry=registry)
    snap = ClusterSnapshot.build([make_node("n1").gpus(2).build()])
    first = make_pod("a").gpus(1).created(0.0).build()
    frozen = make_pod("b").gpus(1).queue("frozen").created(1.0).build()
    last = make_pod("c").gpus(1).created(2.0).build()
    result = schedule(snap, [first, frozen, last], profile, now=0.0, rng=random.Random(0))
    assert {b.pod: b.gpus for b in result.binds} == {first.uid: (0,), last.uid: (1,)}
