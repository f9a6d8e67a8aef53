"""core.preemption: who may be a victim, which node's victims are taken, what the evictions say.

Each test pins one rule of docs/queues.md ("Preemption and reclaim") through what `schedule`
returns: the evictions (pod, reason, preemptor), the nominated placements, and what stays
unschedulable.
"""

from __future__ import annotations

import random
from typing import Sequence

import pytest

from gpufleet.core.cycle import schedule
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, NodeInfo, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

NOW = 1000.0
PREEMPT = QueueingConfig(order="priority", preemption=True)
RECLAIM = QueueingConfig(order="fair", reclaim=True)
LAS = QueueingConfig(order="las", preemption=True)


def gpu_nodes(n: int, gpus: int = 8) -> list[NodeInfo]:
    return [make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(gpus).label("host", f"n{i}").build() for i in range(n)]


def start(snap: ClusterSnapshot, pods: Sequence[PodSpec], *, at: float = 0.0) -> ClusterSnapshot:
    """`snap` with `pods` running since `at` (all must fit)."""
    result = schedule(snap, pods, build_profile(ProfileSettings()), now=at, rng=random.Random(0))
    assert not result.unschedulable, result.unschedulable
    return snap.apply(result.binds)


def run(snap: ClusterSnapshot, pods: Sequence[PodSpec], cfg: QueueingConfig, queues: Sequence[Queue] = (),
        *, now: float = NOW, ctx: QueueContext | None = None) -> CycleResult:
    profile = build_profile(ProfileSettings(queueing=cfg))
    context = ctx or QueueContext(QueueTree.build(queues))
    return schedule(snap, pods, profile, now=now, rng=random.Random(0), queues=context)


def evicted(result: CycleResult) -> list[str]:
    return sorted(e.pod.split("/")[1] for e in result.evictions)


def pod(name: str, gpus: int = 1, *, priority: int = 0, queue: str = "default", created: float = 0.0,
        node: str | None = None, gang: str | None = None, preemptible: bool = True) -> PodSpec:
    b = make_pod(name).gpus(gpus).priority(priority).queue(queue).created(created).preemptible(preemptible)
    if node is not None:
        b = b.selector("host", node)
    if gang is not None:
        b = b.gang(gang)
    return b.build()


# -- who may be a victim -------------------------------------------------------------------------

def test_pods_of_equal_priority_are_never_victims() -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"p{i}", priority=5) for i in range(8)])
    same = run(snap, [pod("same", priority=5, created=900)], PREEMPT)
    assert not same.evictions and PodUid("default/same") in same.unschedulable
    above = run(snap, [pod("above", priority=6, created=900)], PREEMPT)
    assert len(above.evictions) == 1


def test_a_lower_priority_pod_behind_an_equal_one_is_still_a_victim() -> None:
    """Victims are every lower-priority pod of the queue, whatever runs beside them."""
    snap = start(ClusterSnapshot.build(gpu_nodes(1)),
                 [pod(f"eq{i}", priority=5) for i in range(7)] + [pod("low", priority=1)])
    result = run(snap, [pod("urgent", priority=5, created=900)], PREEMPT)
    assert evicted(result) == ["low"]


@pytest.mark.parametrize(("min_runtime", "victims"), [(500.0, 1), (501.0, 0)])
def test_the_minimum_runtime_protects_pods_younger_than_it_and_no_longer(min_runtime: float, victims: int) -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"p{i}") for i in range(8)], at=500.0)
    cfg = QueueingConfig(preemption=True, min_runtime_seconds=min_runtime)
    result = run(snap, [pod("urgent", priority=10, created=900)], cfg, now=1000.0)
    assert len(result.evictions) == victims


@pytest.mark.parametrize(("evictions_at", "victims"), [
    ((6400.0, 9000.0), 1),   # one of them exactly an hour ago: it no longer counts
    ((9000.0, 9500.0), 0),   # two in the last hour: the cap of 2 is reached
    ((9500.0,), 1),
])
def test_the_hourly_cap_counts_evictions_of_the_last_hour(evictions_at: tuple[float, ...], victims: int) -> None:
    low = [pod(f"p{i}") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), low)
    ctx = QueueContext(evicted_at={p.uid: evictions_at for p in low})
    cfg = QueueingConfig(preemption=True, max_preemptions_per_pod_per_hour=2)
    result = run(snap, [pod("urgent", priority=10, created=9900)], cfg, now=10_000.0, ctx=ctx)
    assert len(result.evictions) == victims


def test_a_protected_member_protects_its_whole_gang_but_not_the_pods_beside_it() -> None:
    gang = [pod("g0", 4, gang="g", node="n0", preemptible=False), pod("g1", 4, gang="g", node="n1")]
    solo = pod("solo", 4, node="n1")
    snap = start(ClusterSnapshot.build(gpu_nodes(2), pod_groups=[PodGroup("g", 2)]), gang + [solo])
    result = run(snap, [pod("urgent", 8, priority=10, created=900)], PREEMPT)
    assert not result.evictions
    result = run(snap, [pod("urgent", 4, priority=10, created=900)], PREEMPT)
    assert evicted(result) == [], "n0 and n1 each have 4 GPUs free: nothing to evict"


def test_an_elastic_gang_gives_only_its_extras_and_then_goes_whole() -> None:
    """minMember 2 of 3 running: one extra goes alone; asking for more takes the rest of the gang."""
    gang = [pod(f"g{i}", 2, gang="g", node="n0") for i in range(3)]
    keep = pod("keep", 2, priority=50, node="n0")
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 2)]), gang + [keep])
    one = run(snap, [pod("urgent", 2, priority=10, created=900)], PREEMPT)
    assert len(one.evictions) == 1 and one.evictions[0].pod.split("/")[1].startswith("g")
    two = run(snap, [pod("urgent", 4, priority=10, created=900)], PREEMPT)
    assert evicted(two) == ["g0", "g1", "g2"], "two of three would leave the gang below minMember"
    assert [p.pod for p in two.nominated] == [PodUid("default/urgent")]


def test_the_extra_member_of_an_elastic_gang_given_up_is_its_most_recently_started() -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 2)]),
                 [pod("keep", 2, priority=50), pod("g0", 2, gang="g"), pod("g1", 2, gang="g")], at=0.0)
    snap = start(snap, [pod("g2", 2, gang="g")], at=200.0)
    result = run(snap, [pod("urgent", 2, priority=10, created=900)], PREEMPT)
    assert evicted(result) == ["g2"]


# -- reclaim ------------------------------------------------------------------------------------

def test_reclaim_takes_only_from_queues_above_their_fair_share() -> None:
    """Three queues of 4 GPUs' share each: b holds exactly its share and keeps it, though its pods
    started last (the least work to throw away); c holds 8 and gives a its 4."""
    snap = start(ClusterSnapshot.build(gpu_nodes(3, gpus=4)),
                 [pod(f"c{i}", queue="c", node=f"n{i // 4}") for i in range(8)], at=0.0)
    snap = start(snap, [pod(f"b{i}", queue="b", node="n2") for i in range(4)], at=900.0)
    queues = [Queue("a"), Queue("b"), Queue("c")]
    result = run(snap, [pod(f"a{i}", queue="a", created=950.0 + i) for i in range(4)], RECLAIM, queues)
    assert evicted(result) == ["c0", "c1", "c2", "c3"] or {e[0] for e in evicted(result)} == {"c"}
    assert len(result.evictions) == 4 and len(result.nominated) == 4
    assert result.evictions[0].reason == ("reclaimed by queue a for pod default/a0: "
                                          "queue c holds more than its fair share")
    assert all(e.preemptor is not None and e.preemptor.startswith("default/a") for e in result.evictions)


def test_a_queue_already_above_its_fair_share_does_not_reclaim() -> None:
    """12 GPUs; c wants 1, so a and b share 11: 5.5 each. b holds 6 (above), a holds 5 and asks
    one more, which would take it to 6, above its own share: no reclaim."""
    snap = start(ClusterSnapshot.build(gpu_nodes(3, gpus=4)),
                 [pod(f"a{i}", queue="a") for i in range(5)] + [pod(f"b{i}", queue="b") for i in range(6)]
                 + [pod("c0", queue="c")])
    queues = [Queue("a"), Queue("b"), Queue("c")]
    result = run(snap, [pod("more", queue="a", created=950.0)], RECLAIM, queues)
    assert not result.evictions and PodUid("default/more") in result.unschedulable


def test_a_pod_naming_an_inner_queue_reclaims_nothing() -> None:
    queues = [Queue("research"), Queue("r1", parent="research"), Queue("b")]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"b{i}", queue="b") for i in range(8)])
    result = run(snap, [pod("x", queue="research", created=950.0)], RECLAIM, queues)
    assert not result.evictions
    assert "queue research has child queues" in result.unschedulable[PodUid("default/x")].message


def test_a_cpu_only_pod_reclaims_cpu_from_the_queue_above_its_cpu_share() -> None:
    node = make_node("n0").cpu(64_000).mem_gib(512).build()
    hog = [make_pod(f"b{i}").cpu(32_000).mem_mib(1024).queue("b").build() for i in range(2)]
    snap = start(ClusterSnapshot.build([node]), hog)
    ask = make_pod("a0").cpu(32_000).mem_mib(1024).queue("a").created(950.0).build()
    result = run(snap, [ask], RECLAIM, [Queue("a"), Queue("b")])
    assert len(result.evictions) == 1 and [p.pod for p in result.nominated] == [ask.uid]


def test_a_cpu_only_pod_reclaims_memory_from_the_queue_above_its_memory_share() -> None:
    node = make_node("n0").cpu(64_000).mem_gib(512).build()
    hog = [make_pod(f"b{i}").cpu(1000).mem_mib(256 * 1024).queue("b").build() for i in range(2)]
    snap = start(ClusterSnapshot.build([node]), hog)
    ask = make_pod("a0").cpu(1000).mem_mib(256 * 1024).queue("a").created(950.0).build()
    result = run(snap, [ask], RECLAIM, [Queue("a"), Queue("b")])
    assert len(result.evictions) == 1 and [p.pod for p in result.nominated] == [ask.uid]


def test_a_pod_asking_a_sliver_of_a_gpu_reclaims_in_gpus() -> None:
    node = make_node("n0").cpu(64_000).mem_gib(512).gpus(1).build()
    snap = start(ClusterSnapshot.build([node]), [pod("b0", queue="b")])
    ask = make_pod("a0").fraction(1).queue("a").created(950.0).build()
    result = run(snap, [ask], RECLAIM, [Queue("a"), Queue("b")])
    assert evicted(result) == ["b0"]


def test_a_gang_that_reclaimed_takes_no_more_than_its_share_of_the_room_a_victim_gang_left() -> None:
    """b's gang of two 4-GPU pods goes whole; a (share 4 of 8) takes two 2-GPU members, not four."""
    groups = [PodGroup("bg", 2), PodGroup("ag", 1)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=groups),
                 [pod(f"b{i}", 4, queue="b", gang="bg") for i in range(2)])
    gang = [pod(f"g{i}", 2, queue="a", gang="ag", created=950.0) for i in range(4)]
    result = run(snap, gang, RECLAIM, [Queue("a"), Queue("b")])
    assert evicted(result) == ["b0", "b1"] and len(result.nominated) == 2


# -- gangs of preemptors -------------------------------------------------------------------------

def test_a_gang_member_that_fits_without_victims_is_placed_without_evicting() -> None:
    low = [pod(f"low{i}", node="n0") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(2), pod_groups=[PodGroup("g", 2)]), low)
    gang = [pod(f"g{i}", 8, gang="g", priority=10, created=900.0) for i in range(2)]
    result = run(snap, gang, PREEMPT)
    assert evicted(result) == [f"low{i}" for i in range(8)]
    assert sorted(p.pod for p in result.nominated) == [g.uid for g in gang]
    assert not any(g.uid in result.unschedulable for g in gang), "nominated pods are not unschedulable"


def test_a_gang_that_preempted_in_its_own_queue_places_its_other_members_in_free_room() -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(2), pod_groups=[PodGroup("g", 2)]),
                 [pod("low", 8, queue="a", node="n0"), pod("keep", 6, queue="a", priority=50, node="n1")])
    gang = [pod("g0", 8, queue="a", gang="g", priority=10, created=900.0),
            pod("g1", 2, queue="a", gang="g", priority=10, created=900.0)]
    result = run(snap, gang, PREEMPT, [Queue("a")])
    assert evicted(result) == ["low"] and sorted(p.pod for p in result.nominated) == [g.uid for g in gang]


def test_a_gang_that_cannot_reach_its_minimum_is_undone_and_leaves_the_room_to_others() -> None:
    """Three members must run together; the second finds no victims, so the first's evictions are
    undone and a later pod takes the low pod's place instead."""
    snap = start(ClusterSnapshot.build(gpu_nodes(3), pod_groups=[PodGroup("g", 3)]),
                 [pod("low", 8, node="n0"), pod("keep1", 8, priority=50, node="n1"),
                  pod("keep2", 8, priority=50, node="n2")])
    gang = [pod(f"g{i}", 8, gang="g", priority=10, created=900.0) for i in range(3)]
    other = pod("other", 8, priority=5, created=950.0)
    result = run(snap, [*gang, other], PREEMPT)
    assert evicted(result) == ["low"] and [e.preemptor for e in result.evictions] == [other.uid]
    assert [p.pod for p in result.nominated] == [other.uid]


def test_an_elastic_gang_tries_each_member_even_after_one_finds_no_room() -> None:
    """minMember 1: the 8-GPU member finds no victims, the 2-GPU member after it does."""
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 1)]),
                 [pod("keep", 6, priority=50), pod("low", 2)])
    gang = [pod("g0", 8, gang="g", priority=10, created=900.0), pod("g1", 2, gang="g", priority=10, created=900.0)]
    result = run(snap, gang, PREEMPT)
    assert evicted(result) == ["low"] and [p.pod for p in result.nominated] == [gang[1].uid]


def test_an_elastic_gang_skips_a_member_over_its_queue_limit_and_places_the_next() -> None:
    queues = [Queue("a", limit={"gpu": 6000}), Queue("b")]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 1)]),
                 [pod("low0", 2, queue="a"), pod("low1", 2, queue="a"), pod("keep", 4, queue="b", preemptible=False)])
    gang = [pod("g0", 2, queue="a", gang="g", priority=10, created=900.0),
            pod("g1", 4, queue="a", gang="g", priority=10, created=900.0),
            pod("g2", 2, queue="a", gang="g", priority=10, created=900.0)]
    result = run(snap, gang, PREEMPT, queues)
    assert evicted(result) == ["low0", "low1"]
    assert sorted(p.pod for p in result.nominated) == [gang[0].uid, gang[2].uid]


def test_an_elastic_gang_needing_one_member_is_checked_against_its_limit_for_one() -> None:
    queues = [Queue("a", limit={"gpu": 4000}), Queue("b")]
    snap = start(ClusterSnapshot.build(gpu_nodes(1, gpus=4), pod_groups=[PodGroup("g", 1)]),
                 [pod("low0", queue="a"), pod("low1", queue="a"), pod("keep", 2, queue="b", preemptible=False)])
    gang = [pod(f"g{i}", 2, queue="a", gang="g", priority=10, created=900.0) for i in range(2)]
    result = run(snap, gang, PREEMPT, queues)
    assert evicted(result) == ["low0", "low1"] and [p.pod for p in result.nominated] == [gang[0].uid]


@pytest.mark.parametrize(("running_members", "pending", "nominated"), [(1, 3, 2), (1, 1, 1), (3, 1, 0)])
def test_preemption_stops_a_gang_at_max_member_counting_members_already_running(
        running_members: int, pending: int, nominated: int) -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 1, max_member=3)]),
                 [pod(f"r{i}", gang="g", priority=10) for i in range(running_members)]
                 + [pod(f"low{i}") for i in range(8 - running_members)])
    gang = [pod(f"g{i}", gang="g", priority=10, created=900.0) for i in range(pending)]
    result = run(snap, gang, PREEMPT)
    assert len(result.nominated) == nominated and len(result.evictions) == nominated


def test_preemption_within_a_queue_with_a_per_model_limit() -> None:
    queues = [Queue("a", limit={"gpu/H100-80GB": 9000})]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"low{i}", queue="a") for i in range(8)])
    result = run(snap, [pod("urgent", queue="a", priority=10, created=900.0)], PREEMPT, queues)
    assert len(result.evictions) == 1 and [p.pod for p in result.nominated] == [PodUid("default/urgent")]


# -- which node's victims --------------------------------------------------------------------------

def _two_nodes(n0: Sequence[tuple[str, int, int, float]], n1: Sequence[tuple[str, int, int, float]]) -> ClusterSnapshot:
    """Two 8-GPU nodes; each entry is (name, gpus, priority, started); the rest is kept busy at priority 50."""
    snap = ClusterSnapshot.build(gpu_nodes(2))
    for node, pods in (("n0", n0), ("n1", n1)):
        for name, gpus, priority, at in pods:
            snap = start(snap, [pod(name, gpus, priority=priority, node=node)], at=at)
        rest = 8 - sum(p[1] for p in pods)
        snap = start(snap, [pod(f"keep-{node}", rest, priority=50, node=node)])
    return snap


def test_the_lowest_priority_decides_before_the_work_thrown_away() -> None:
    snap = _two_nodes([("young", 2, 1, 900.0)], [("old", 2, 0, 0.0)])
    result = run(snap, [pod("urgent", 2, priority=10, created=950.0)], PREEMPT)
    assert evicted(result) == ["old"]


def test_the_work_thrown_away_decides_before_the_number_of_pods() -> None:
    snap = _two_nodes([("big", 2, 0, 0.0)], [("s0", 1, 0, 800.0), ("s1", 1, 0, 800.0)])
    result = run(snap, [pod("urgent", 2, priority=10, created=950.0)], PREEMPT)
    assert evicted(result) == ["s0", "s1"]


def test_with_equal_work_the_fewest_pods_and_then_the_most_recently_started_go() -> None:
    fewer = _two_nodes([("s0", 1, 0, 500.0), ("s1", 1, 0, 500.0)], [("big", 2, 0, 500.0)])
    assert evicted(run(fewer, [pod("urgent", 2, priority=10, created=950.0)], PREEMPT)) == ["big"]
    recent = _two_nodes([("b0", 1, 0, 200.0), ("b1", 1, 0, 200.0)], [("a0", 1, 0, 100.0), ("a1", 1, 0, 300.0)])
    assert evicted(run(recent, [pod("urgent", 2, priority=10, created=950.0)], PREEMPT)) == ["a0", "a1"]


def test_at_most_eight_nodes_fewest_candidates_first_are_examined() -> None:
    """n0's four priority-0 pods would be the cheaper victims, but eight nodes with two candidates
    each come first."""
    snap = ClusterSnapshot.build(gpu_nodes(9, gpus=4))
    snap = start(snap, [pod(f"cheap{i}", priority=0, node="n0") for i in range(4)])
    snap = start(snap, [pod(f"p{n}-{i}", 2, priority=1, node=f"n{n}") for n in range(1, 9) for i in range(2)])
    result = run(snap, [pod("urgent", 4, priority=10, created=950.0)], PREEMPT)
    assert evicted(result) == ["p1-0", "p1-1"]


# -- least attained service ------------------------------------------------------------------------

def test_las_victims_are_jobs_on_a_higher_attained_service_level_in_any_queue() -> None:
    low = [pod(f"p{i}", queue="b") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), low)
    cfg = QueueingConfig(order="las", preemption=True, las_thresholds_gpu_seconds=(1.0, 100.0))
    fresh = pod("fresh", queue="a", created=950.0)
    # every running job has attained 1 GPU-second: level 1; the fresh one has nothing: level 0
    ctx = QueueContext(QueueTree.build([Queue("a"), Queue("b")]), attained_gpu_s={p.uid: 1.0 for p in low})
    result = run(snap, [fresh], cfg, ctx=ctx)
    assert [e.reason for e in result.evictions] == [
        "preempted by pod default/fresh, whose job has received less GPU time"]  # not 'reclaimed': reclaim is off
    same = QueueContext(QueueTree.build([Queue("a"), Queue("b")]),
                        attained_gpu_s={**{p.uid: 1.0 for p in low}, fresh.uid: 50.0})
    assert not run(snap, [fresh], cfg, ctx=same).evictions, "a job on the same level is no victim"


def test_a_priority_eviction_names_the_preemptor_the_priorities_and_the_queue() -> None:
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"p{i}", queue="a", priority=3) for i in range(8)])
    result = run(snap, [pod("urgent", queue="a", priority=10, created=950.0)], PREEMPT, [Queue("a")])
    assert [(e.reason, e.preemptor) for e in result.evictions] == [
        ("preempted by pod default/urgent (priority 10 > 3) in queue a", PodUid("default/urgent"))]


def test_a_las_eviction_says_the_preemptor_has_received_less_gpu_time() -> None:
    low = [pod(f"p{i}") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), low)
    ctx = QueueContext(attained_gpu_s={p.uid: 5000.0 for p in low})
    result = run(snap, [pod("fresh", created=950.0)], LAS, ctx=ctx)
    assert [e.reason for e in result.evictions] == [
        "preempted by pod default/fresh, whose job has received less GPU time"]


def test_a_gang_that_preempts_by_las_across_queues_is_not_held_to_reclaims_fair_share() -> None:
    """Reclaim is off: evicting queue b's long-running jobs for queue a's new gang is LAS
    preemption, so the gang's second member may take room too (it is not reclaim, which would
    stop at a's fair share)."""
    low = [pod(f"p{i}", queue="b") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("g", 2)]), low)
    gang = [make_pod(f"g{i}").gpus(1).queue("a").gang("g").created(950.0).build() for i in range(2)]
    ctx = QueueContext(QueueTree.build([Queue("a"), Queue("b")]), attained_gpu_s={p.uid: 5000.0 for p in low})
    result = run(snap, gang, LAS, ctx=ctx)
    assert sorted(p.pod for p in result.nominated) == [g.uid for g in gang]
    assert len(result.evictions) == 2
    assert all(e.reason.endswith("whose job has received less GPU time") for e in result.evictions)


# -- undoing, giving back, and ranking across queues ------------------------------------------------

@pytest.mark.parametrize(("gpus", "nominated"), [(4, True), (5, False)])
def test_an_undone_gang_gives_its_queue_back_exactly_what_it_held(gpus: int, nominated: bool) -> None:
    """Queue a (limit 8 GPUs) runs 4. Its gang's first member evicts a low pod on n0, the second
    finds no room on n1 (queue b's), so the gang is undone: a holds 4 again, and the next pod of a
    may take up to 4 more GPUs by preemption, not 5."""
    queues = [Queue("a", limit={"gpu": 8000}), Queue("b")]
    snap = start(ClusterSnapshot.build(gpu_nodes(2), pod_groups=[PodGroup("g", 2)]),
                 [pod("low0", 2, queue="a", node="n0"), pod("low1", 2, queue="a", node="n0"),
                  pod("keep0", 3, queue="b", node="n0"), pod("keep1", 8, queue="b", node="n1")])
    gang = [pod("g0", 2, queue="a", gang="g", priority=20, created=900.0, node="n0"),
            pod("g1", 2, queue="a", gang="g", priority=20, created=900.0, node="n1")]
    nxt = pod("next", gpus, queue="a", priority=10, created=950.0)
    result = run(snap, [*gang, nxt], PREEMPT, queues)
    if nominated:
        assert evicted(result) == ["low0", "low1"] and [p.pod for p in result.nominated] == [nxt.uid]
        assert all(e.preemptor == nxt.uid for e in result.evictions)
    else:
        assert not result.evictions and not result.nominated
    assert {g.uid for g in gang} <= set(result.unschedulable)


def test_a_victim_that_cannot_be_given_back_leaves_room_for_a_smaller_one_that_can() -> None:
    """The 6-GPU pod needs 6 of the node's 8: `big` (most important) cannot be given back, `mid`
    can, and then `small` cannot: the victims are big and small."""
    snap = start(ClusterSnapshot.build(gpu_nodes(1)),
                 [pod("big", 4, priority=3), pod("mid", 2, priority=2), pod("small", 2, priority=1)])
    result = run(snap, [pod("urgent", 6, priority=10, created=950.0)], PREEMPT)
    assert evicted(result) == ["big", "small"]
    assert [p.pod for p in result.nominated] == [PodUid("default/urgent")]


def test_reclaim_takes_the_least_work_whatever_the_victims_priorities_in_their_own_queue() -> None:
    """b holds all 8 GPUs. On n0 its most recently started pod has b's highest priority; every
    other pod of b started at 0. Reclaim evicts the recent one (least work thrown away): b's
    priorities mean nothing to queue a."""
    snap = start(ClusterSnapshot.build(gpu_nodes(2, gpus=4)),
                 [pod(f"old{i}", queue="b", node="n0") for i in range(3)]
                 + [pod(f"mid{i}", queue="b", priority=10, node="n1") for i in range(4)], at=0.0)
    snap = start(snap, [pod("young", queue="b", priority=50, node="n0")], at=900.0)
    result = run(snap, [pod("a0", queue="a", created=950.0)], RECLAIM, [Queue("a"), Queue("b")])
    assert evicted(result) == ["young"]


# -- las beside reclaim, elastic extras, the hopeless cache (mutation testing) ----------------------

LAS_RECLAIM = QueueingConfig(order="las", preemption=True, reclaim=True, las_thresholds_gpu_seconds=(1.0,))


@pytest.mark.parametrize(("cfg", "victims_s", "mine_s"), [
    (LAS_RECLAIM, None, None),    # no record on either side: both on level 0 (a record of 1.0 would be level 1)
    (LAS_RECLAIM, 5.0, 5.0),      # both on level 1
    (QueueingConfig(order="las", reclaim=True), 5000.0, None),  # las order without preemption takes nobody by LAS
])
def test_a_victim_las_could_not_take_is_reclaimed_and_says_so(
        cfg: QueueingConfig, victims_s: float | None, mine_s: float | None) -> None:
    low = [pod(f"b{i}", queue="b") for i in range(8)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), low)
    fresh = pod("fresh", queue="a", created=950.0)
    attained = {p.uid: victims_s for p in low if victims_s is not None}
    if mine_s is not None:
        attained[fresh.uid] = mine_s
    ctx = QueueContext(QueueTree.build([Queue("a"), Queue("b")]), attained_gpu_s=attained)
    result = run(snap, [fresh], cfg, ctx=ctx)
    assert [e.reason for e in result.evictions] == [
        "reclaimed by queue a for pod default/fresh: queue b holds more than its fair share"]
    assert [p.pod for p in result.nominated] == [fresh.uid]


def test_las_takes_no_job_without_a_record_for_a_job_without_one() -> None:
    """Without a record a job has attained nothing: level 0, even where the first threshold is 1 GPU-second."""
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"p{i}") for i in range(8)])
    cfg = QueueingConfig(order="las", preemption=True, las_thresholds_gpu_seconds=(1.0,))
    result = run(snap, [pod("fresh", created=950.0)], cfg)
    assert not result.evictions and PodUid("default/fresh") in result.unschedulable


def test_a_victim_both_las_and_reclaim_would_take_is_evicted_once() -> None:
    """Queue b is above its share and its jobs are on a higher level: each is found twice, goes once."""
    snap = ClusterSnapshot.build(gpu_nodes(1))
    low = [pod(f"b{i}", queue="b") for i in range(8)]
    for i, p in enumerate(low):
        snap = start(snap, [p], at=10.0 * i)
    ctx = QueueContext(QueueTree.build([Queue("a"), Queue("b")]), attained_gpu_s={p.uid: 5.0 for p in low})
    result = run(snap, [pod("fresh", 2, queue="a", created=950.0)], LAS_RECLAIM, ctx=ctx)
    assert evicted(result) == ["b6", "b7"], "the two most recently started"
    assert len(result.nominated) == 1


@pytest.mark.parametrize(("min_member", "victims"), [
    (2, []),             # one extra gives one GPU, and h1 would leave h below minMember with h2 kept
    (1, ["h0", "h1"]),   # two extras: both go alone, h2 keeps the gang at its minimum
])
def test_an_elastic_gang_gives_as_many_members_alone_as_it_runs_beyond_its_minimum(
        min_member: int, victims: list[str]) -> None:
    """h2 outranks the preemptor, so the rest of the gang is never a victim: only extras can go."""
    gang = [pod("h0", gang="h", priority=1), pod("h1", gang="h", priority=1), pod("h2", gang="h", priority=20)]
    others = [pod(f"f{i}", priority=20) for i in range(5)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("h", min_member)]), gang + others)
    result = run(snap, [pod("urgent", 2, priority=10, created=900)], PREEMPT)
    assert evicted(result) == victims
    assert (PodUid("default/urgent") in result.unschedulable) == (not victims)


def test_each_elastic_gang_counts_its_own_extras() -> None:
    """g (exactly at minMember) goes whole or not at all; h's two extras are the first victims."""
    g = [pod(f"g{i}", gang="g", priority=1) for i in range(2)]
    h = [pod(f"h{i}", gang="h", priority=2) for i in range(3)]
    others = [pod(f"f{i}", priority=20) for i in range(3)]
    groups = [PodGroup("g", 2), PodGroup("h", 1)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=groups), g + h + others)
    result = run(snap, [pod("urgent", priority=10, created=900)], PREEMPT)
    assert evicted(result) == ["h2"]


@pytest.mark.parametrize("known", [True, False], ids=["podgroup", "no-podgroup"])
def test_a_gang_with_a_member_that_may_not_go_is_no_victim(known: bool) -> None:
    """g1 outranks the preemptor; with or without its PodGroup in the snapshot, g0 cannot go alone."""
    gang = [pod("g0", gang="g", priority=1), pod("g1", gang="g", priority=20)]
    others = [pod(f"f{i}", priority=20) for i in range(6)]
    nodes = gpu_nodes(1)
    running = start(ClusterSnapshot.build(nodes, pod_groups=[PodGroup("g", 2)]), gang + others)
    snap = running if known else ClusterSnapshot.build(nodes, running.placements.values())
    result = run(snap, [pod("urgent", priority=10, created=900)], PREEMPT)
    assert not result.evictions and PodUid("default/urgent") in result.unschedulable


def test_a_unit_that_found_no_room_does_not_stop_one_with_less_attained_service() -> None:
    """`old` (over the starvation bound, so first) is on level 1 like every running job and takes
    nobody; `fresh`, the same shape without a record, is on level 0 and preempts."""
    low = [pod(f"p{i}") for i in range(16)]
    snap = start(ClusterSnapshot.build(gpu_nodes(2)), low)
    old, fresh = pod("old", created=0.0), pod("fresh", created=950.0)
    cfg = QueueingConfig(order="las", preemption=True, las_thresholds_gpu_seconds=(1.0,),
                         starvation_bound_seconds=100.0)
    ctx = QueueContext(attained_gpu_s={**{p.uid: 1.0 for p in low}, old.uid: 1.0})
    result = run(snap, [old, fresh], cfg, ctx=ctx)
    assert len(result.evictions) == 1 and [p.pod for p in result.nominated] == [fresh.uid]
    assert old.uid in result.unschedulable


def test_a_gang_that_reclaimed_skips_a_member_over_its_share_and_places_a_smaller_one_after_it() -> None:
    """a's share is 4 of 8: after g0 (2 GPUs) reclaims, g1 (4) would exceed it, g2 (2) does not."""
    groups = [PodGroup("bg", 2), PodGroup("ag", 1)]
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=groups),
                 [pod(f"b{i}", 4, queue="b", gang="bg") for i in range(2)])
    gang = [pod("g0", 2, queue="a", gang="ag", created=950.0), pod("g1", 4, queue="a", gang="ag", created=951.0),
            pod("g2", 2, queue="a", gang="ag", created=952.0)]
    result = run(snap, gang, RECLAIM, [Queue("a"), Queue("b")])
    assert evicted(result) == ["b0", "b1"]
    assert sorted(p.pod for p in result.nominated) == [PodUid("default/g0"), PodUid("default/g2")]


def test_a_gang_that_found_no_room_does_not_stop_one_that_differs_after_its_first_member() -> None:
    """x and y start with the same 2-GPU member; x's second asks 16 GPUs and can never fit, y's
    asks 2: x finding no room must not make y look hopeless."""
    snap = start(ClusterSnapshot.build(gpu_nodes(1), pod_groups=[PodGroup("x", 2), PodGroup("y", 2)]),
                 [pod(f"p{i}") for i in range(8)])
    x = [pod("x0", 2, gang="x", priority=10, created=900), pod("x1", 16, gang="x", priority=10, created=900)]
    y = [pod("y0", 2, gang="y", priority=10, created=901), pod("y1", 2, gang="y", priority=10, created=901)]
    result = run(snap, [*x, *y], PREEMPT)
    assert sorted(p.pod for p in result.nominated) == [y[0].uid, y[1].uid]
    assert len(result.evictions) == 4


def test_a_pod_naming_an_inner_queue_never_preempts_or_reclaims() -> None:
    """team is an inner queue: its own pod is told to name a leaf, and only t1's pods reclaim
    from b (team's fair share comes from t1's demand), the team pod is never nominated."""
    queues = [Queue("team"), Queue("t1", parent="team"), Queue("b")]
    snap = start(ClusterSnapshot.build(gpu_nodes(1)), [pod(f"b{i}", queue="b") for i in range(8)])
    inner = pod("inner", queue="team", created=900.0)
    leaf = [pod(f"t{i}", queue="t1", created=901.0 + i) for i in range(4)]
    result = run(snap, [inner, *leaf], QueueingConfig(order="fair", reclaim=True), queues)
    assert sorted(p.pod for p in result.nominated) == sorted(p.uid for p in leaf)
    assert result.unschedulable[inner.uid].reasons == ("queue team has child queues: pods must name a leaf queue",)
