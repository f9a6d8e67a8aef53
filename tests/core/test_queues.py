"""Queues in the cycle: fair order, guarantees, limits, preemption, reclaim, gangs and starvation."""

from __future__ import annotations

import random
from typing import Sequence

import pytest

from gpufleet.core.cycle import plain_without_queues, schedule
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, NodeInfo, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

G = 1000  # one GPU in GPU-milli


def nodes(n: int, gpus: int = 8, model: str = "H100-80GB") -> list[NodeInfo]:
    return [make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(gpus, model=model).build() for i in range(n)]


def run(snap: ClusterSnapshot, pods: Sequence[PodSpec], cfg: QueueingConfig, queues: Sequence[Queue] = (),
        *, now: float = 1000.0, ctx: QueueContext | None = None) -> CycleResult:
    profile = build_profile(ProfileSettings(queueing=cfg))
    context = ctx or QueueContext(QueueTree.build(queues))
    return schedule(snap, pods, profile, now=now, rng=random.Random(0), queues=context)


def running(snap: ClusterSnapshot, pods: Sequence[PodSpec], *, at: float = 0.0) -> ClusterSnapshot:
    """`snap` with `pods` placed and started at `at` (all must fit)."""
    result = schedule(snap, pods, build_profile(ProfileSettings()), now=at, rng=random.Random(0))
    assert not result.unschedulable, result.unschedulable
    return snap.apply(result.binds)


def gpus_by_queue(snap: ClusterSnapshot, result: CycleResult) -> dict[str, int]:
    evicted = {e.pod for e in result.evictions}
    held: dict[str, int] = {}
    for p in [*snap.placements.values(), *result.binds, *result.nominated]:
        if p.pod not in evicted:
            held[p.queue] = held.get(p.queue, 0) + len(p.gpus) * p.milli // G
    return held


def one_gpu_pods(prefix: str, n: int, queue: str, *, priority: int = 0, created: float = 0.0) -> list[PodSpec]:
    return [make_pod(f"{prefix}{i}").gpus(1).queue(queue).priority(priority).created(created + i).build()
            for i in range(n)]


FAIR = QueueingConfig(order="fair")
RECLAIM = QueueingConfig(order="fair", reclaim=True)
PREEMPT = QueueingConfig(order="priority", preemption=True)


# -- order and shares -----------------------------------------------------------------------

def test_fair_order_interleaves_two_equal_queues_even_when_one_submitted_first() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    pods = one_gpu_pods("a", 8, "a") + one_gpu_pods("b", 8, "b", created=100)
    result = run(snap, pods, FAIR, [Queue("a"), Queue("b")])
    assert gpus_by_queue(snap, result) == {"a": 4, "b": 4}


def test_priority_order_gives_everything_to_the_older_pods() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    pods = one_gpu_pods("a", 8, "a") + one_gpu_pods("b", 8, "b", created=100)
    result = run(snap, pods, QueueingConfig(), [Queue("a"), Queue("b")])
    assert gpus_by_queue(snap, result) == {"a": 8}


def test_weights_split_the_cluster_in_proportion() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    pods = one_gpu_pods("a", 8, "a") + one_gpu_pods("b", 8, "b")
    result = run(snap, pods, FAIR, [Queue("a", weight=3), Queue("b", weight=1)])
    assert gpus_by_queue(snap, result) == {"a": 6, "b": 2}


def test_a_queue_below_its_guarantee_goes_first() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    pods = one_gpu_pods("b", 8, "b") + one_gpu_pods("a", 8, "a", created=100)
    result = run(snap, pods, FAIR, [Queue("a", guaranteed={"gpu": 6 * G}), Queue("b")])
    assert gpus_by_queue(snap, result) == {"a": 6, "b": 2}


def test_siblings_share_their_parents_part_of_the_cluster() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    queues = [Queue("research"), Queue("prod"), Queue("r1", parent="research"), Queue("r2", parent="research")]
    pods = one_gpu_pods("x", 8, "r1") + one_gpu_pods("y", 8, "r2") + one_gpu_pods("p", 8, "prod")
    result = run(snap, pods, FAIR, queues)
    assert gpus_by_queue(snap, result) == {"prod": 4, "r1": 2, "r2": 2}


def test_pods_naming_an_inner_queue_are_told_to_name_a_leaf() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    result = run(snap, one_gpu_pods("x", 1, "research"), FAIR, [Queue("research"), Queue("r1", parent="research")])
    assert "queue research has child queues" in result.unschedulable[PodUid("default/x0")].message


def test_least_attained_service_goes_first() -> None:
    snap = ClusterSnapshot.build(nodes(1, gpus=1))
    old, new = one_gpu_pods("old", 1, "a") + one_gpu_pods("new", 1, "a", created=50)
    ctx = QueueContext(attained_gpu_s={old.uid: 50_000.0})
    result = run(snap, [old, new], QueueingConfig(order="las"), ctx=ctx)
    assert [b.pod for b in result.binds] == [new.uid]


# -- limits ----------------------------------------------------------------------------------

def test_a_queue_limit_is_never_exceeded_and_the_message_names_it() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    result = run(snap, one_gpu_pods("a", 4, "a"), FAIR, [Queue("a", limit={"gpu": 2 * G})])
    assert gpus_by_queue(snap, result) == {"a": 2}
    assert result.unschedulable[PodUid("default/a2")].message == (
        "queue a: limit of 2 GPU reached (2 GPU in use, the pod asks 1 GPU)")


def test_a_parent_limit_binds_its_children_together() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    queues = [Queue("team", limit={"gpu": 3 * G}), Queue("t1", parent="team"), Queue("t2", parent="team")]
    result = run(snap, one_gpu_pods("a", 4, "t1") + one_gpu_pods("b", 4, "t2"), FAIR, queues)
    assert sum(gpus_by_queue(snap, result).values()) == 3


def test_a_per_model_limit_steers_pods_to_other_models() -> None:
    snap = ClusterSnapshot.build(nodes(1, gpus=2, model="T4") + [
        make_node("z").cpu(64_000).mem_gib(512).gpus(2, model="A100-80GB").build()])
    result = run(snap, one_gpu_pods("a", 4, "a"), FAIR, [Queue("a", limit={"gpu/T4": 1 * G})])
    on_t4 = [b for b in result.binds if b.node == "n0"]
    assert len(on_t4) == 1 and len(result.binds) == 3


ORDERS = [FAIR, QueueingConfig(order="priority")]


@pytest.mark.parametrize("cfg", ORDERS, ids=["fair", "priority"])
def test_an_elastic_gang_takes_extra_members_only_up_to_its_queue_limit(cfg: QueueingConfig) -> None:
    """Issue 25: minMember 2, four members of 2 GPUs, limit 4 GPUs: two members run, not four."""
    snap = ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 2)])
    gang = [make_pod(f"m{i}").gpus(2).queue("a").gang("g").build() for i in range(4)]
    result = run(snap, gang, cfg, [Queue("a", limit={"gpu": 4 * G})])
    assert gpus_by_queue(snap, result) == {"a": 4}
    assert sorted(b.pod for b in result.binds) == [gang[0].uid, gang[1].uid]
    assert result.unschedulable[gang[2].uid].message == (
        "queue a: limit of 4 GPU reached (4 GPU in use, the pod asks 2 GPU)")


@pytest.mark.parametrize("cfg", ORDERS, ids=["fair", "priority"])
def test_an_elastic_gang_counts_against_its_parent_queue_limit(cfg: QueueingConfig) -> None:
    snap = ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 1)])
    queues = [Queue("team", limit={"gpu": 3 * G}), Queue("a", parent="team")]
    gang = [make_pod(f"m{i}").gpus(1).queue("a").gang("g").build() for i in range(6)]
    result = run(snap, gang, cfg, queues)
    assert gpus_by_queue(snap, result) == {"a": 3}


@pytest.mark.parametrize("cfg", ORDERS, ids=["fair", "priority"])
def test_every_gang_member_counts_against_a_per_model_limit_as_it_is_placed(cfg: QueueingConfig) -> None:
    """Issue 25: limit 1 T4, a gang of four 1-GPU pods, one 4xT4 and one 3xA100 node: one on T4.
    (With a 4xA100 node the gang would go whole onto it: a gang that fits one node goes on one.)"""
    snap = ClusterSnapshot.build(nodes(1, gpus=4, model="T4") + [
        make_node("z").cpu(64_000).mem_gib(512).gpus(3, model="A100-80GB").build()], pod_groups=[PodGroup("g", 4)])
    gang = [make_pod(f"m{i}").gpus(1).queue("a").gang("g").build() for i in range(4)]
    result = run(snap, gang, cfg, [Queue("a", limit={"gpu/T4": 1 * G})])
    assert sorted(b.node for b in result.binds) == ["n0", "z", "z", "z"]


def test_a_member_the_per_model_limit_keeps_off_a_model_says_so() -> None:
    snap = ClusterSnapshot.build(nodes(1, gpus=4, model="T4") + [
        make_node("z").cpu(64_000).mem_gib(512).gpus(4, model="A100-80GB").build()], pod_groups=[PodGroup("g", 5)])
    gang = [make_pod(f"m{i}").gpus(1).queue("a").gang("g").build() for i in range(6)]
    result = run(snap, gang, FAIR, [Queue("a", limit={"gpu/T4": 1 * G})])
    assert sorted(b.node for b in result.binds) == ["n0", "z", "z", "z", "z"]
    assert result.unschedulable[gang[5].uid].reasons[-1] == (
        "queue a: limit of 1 T4 GPU reached (1 T4 GPU in use), its nodes left out")


def test_a_gang_the_per_model_limit_cannot_fit_elsewhere_waits_whole() -> None:
    snap = ClusterSnapshot.build(nodes(1, gpus=4, model="T4"), pod_groups=[PodGroup("g", 2)])
    gang = [make_pod(f"m{i}").gpus(1).queue("a").gang("g").build() for i in range(2)]
    result = run(snap, gang, FAIR, [Queue("a", limit={"gpu/T4": 1 * G})])
    assert not result.binds and set(result.unschedulable) == {g.uid for g in gang}


def test_a_gang_whose_minimum_exceeds_the_limit_waits_with_the_limit_named() -> None:
    snap = ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 3)])
    gang = [make_pod(f"m{i}").gpus(2).queue("a").gang("g").build() for i in range(4)]
    result = run(snap, gang, FAIR, [Queue("a", limit={"gpu": 4 * G})])
    assert not result.binds
    assert {s.plugin for s in result.unschedulable.values()} == {"QueueLimit"}
    assert result.unschedulable[gang[0].uid].message == (
        "queue a: limit of 4 GPU reached (0 GPU in use, the pod asks 6 GPU)")


def test_a_queue_that_may_not_borrow_stays_within_its_guarantee() -> None:
    snap = ClusterSnapshot.build(nodes(1))
    result = run(snap, one_gpu_pods("a", 8, "a"), FAIR, [Queue("a", guaranteed={"gpu": 3 * G}, borrow=False)])
    assert gpus_by_queue(snap, result) == {"a": 3}


# -- reclaim ---------------------------------------------------------------------------------

def test_a_queue_gets_its_guarantee_back_within_one_cycle_by_reclaim() -> None:
    queues = [Queue("a", guaranteed={"gpu": 6 * G}), Queue("b")]
    snap = running(ClusterSnapshot.build(nodes(1)), one_gpu_pods("b", 8, "b"))
    result = run(snap, one_gpu_pods("a", 6, "a", created=500), RECLAIM, queues)
    assert gpus_by_queue(snap, result) == {"a": 6, "b": 2}
    assert len(result.evictions) == 6 and not result.binds
    assert all("reclaimed by queue a" in e.reason for e in result.evictions)


def test_reclaim_stops_at_the_fair_share() -> None:
    snap = running(ClusterSnapshot.build(nodes(1)), one_gpu_pods("b", 8, "b"))
    result = run(snap, one_gpu_pods("a", 8, "a", created=500), RECLAIM, [Queue("a"), Queue("b")])
    assert gpus_by_queue(snap, result) == {"a": 4, "b": 4}


def test_without_reclaim_a_full_cluster_stays_with_its_first_queue() -> None:
    snap = running(ClusterSnapshot.build(nodes(1)), one_gpu_pods("b", 8, "b"))
    result = run(snap, one_gpu_pods("a", 8, "a", created=500), FAIR, [Queue("a"), Queue("b")])
    assert not result.evictions and gpus_by_queue(snap, result) == {"b": 8}


def test_the_reclaimed_queue_cannot_reclaim_back_in_the_next_cycle() -> None:
    queues = [Queue("a"), Queue("b")]
    snap = running(ClusterSnapshot.build(nodes(1)), one_gpu_pods("b", 8, "b"))
    first = run(snap, one_gpu_pods("a", 8, "a", created=500), RECLAIM, queues)
    evicted = {e.pod for e in first.evictions}
    after = snap.apply(first.nominated, releases=evicted)
    victims = [p for p in one_gpu_pods("b", 8, "b") if p.uid in evicted]
    second = run(after, victims, RECLAIM, queues, now=2000.0)
    assert not second.evictions


# -- priority preemption ------------------------------------------------------------------------

def test_a_higher_priority_pod_preempts_just_enough_of_the_lowest_priority_pods_of_its_queue() -> None:
    base = ClusterSnapshot.build(nodes(1))
    low = one_gpu_pods("low", 4, "a", priority=0)
    mid = one_gpu_pods("mid", 4, "a", priority=5)
    snap = running(base, low + mid, at=0.0)
    urgent = make_pod("urgent").gpus(2).queue("a").priority(10).created(900).build()
    result = run(snap, [urgent], PREEMPT, [Queue("a")])
    assert len(result.evictions) == 2 and {e.pod for e in result.evictions} <= {p.uid for p in low}
    assert [p.pod for p in result.nominated] == [urgent.uid]
    assert "priority 10 > 0" in result.evictions[0].reason


def test_priority_preemption_does_not_cross_queues() -> None:
    snap = running(ClusterSnapshot.build(nodes(1)), one_gpu_pods("b", 8, "b"))
    urgent = make_pod("urgent").gpus(1).queue("a").priority(10).build()
    result = run(snap, [urgent], PREEMPT, [Queue("a"), Queue("b")])
    assert not result.evictions and urgent.uid in result.unschedulable


@pytest.mark.parametrize(("case", "cfg", "ctx_evictions", "preemptible"), [
    ("pods younger than the minimum runtime are protected",
     QueueingConfig(preemption=True, min_runtime_seconds=2000), 0, True),
    ("pods preempted too often this hour are protected",
     QueueingConfig(preemption=True, max_preemptions_per_pod_per_hour=2), 2, True),
    ("non-preemptible pods are protected", PREEMPT, 0, False),
])
def test_protected_pods_are_never_victims(case: str, cfg: QueueingConfig, ctx_evictions: int,
                                          preemptible: bool) -> None:
    low = [make_pod(f"low{i}").gpus(1).preemptible(preemptible).build() for i in range(8)]
    snap = running(ClusterSnapshot.build(nodes(1)), low, at=0.0)
    ctx = QueueContext(evicted_at={p.uid: tuple(900.0 - i for i in range(ctx_evictions)) for p in low})
    urgent = make_pod("urgent").gpus(1).priority(10).build()
    result = run(snap, [urgent], cfg, ctx=ctx)
    assert not result.evictions


def test_evictions_older_than_an_hour_do_not_count_against_the_cap() -> None:
    low = one_gpu_pods("low", 8, "default")
    snap = running(ClusterSnapshot.build(nodes(1)), low)
    ctx = QueueContext(evicted_at={p.uid: (10.0, 20.0, 30.0) for p in low})
    urgent = make_pod("urgent").gpus(1).priority(10).build()
    result = run(snap, [urgent], PREEMPT, now=5000.0, ctx=ctx)
    assert len(result.evictions) == 1


# -- gangs -------------------------------------------------------------------------------------

def test_a_gang_victim_is_evicted_whole() -> None:
    gang = [make_pod(f"g{i}").gpus(8).gang("g").build() for i in range(2)]
    snap = running(ClusterSnapshot.build(nodes(2), pod_groups=[PodGroup("g", 2)]), gang)
    urgent = make_pod("urgent").gpus(8).priority(10).build()
    result = run(snap, [urgent], PREEMPT)
    assert sorted(e.pod for e in result.evictions) == [g.uid for g in gang]


def test_extra_members_of_an_elastic_gang_are_the_first_victims() -> None:
    gang = [make_pod(f"g{i}").gpus(4).gang("g").build() for i in range(3)]
    solo = make_pod("solo").gpus(4).build()
    snap = running(ClusterSnapshot.build(nodes(2), pod_groups=[PodGroup("g", 1)]), gang + [solo])
    urgent = make_pod("urgent").gpus(4).priority(10).build()
    result = run(snap, [urgent], PREEMPT)
    assert len(result.evictions) == 1 and result.evictions[0].pod in {g.uid for g in gang}


def test_a_gang_of_preemptors_is_placed_whole_or_evicts_nobody() -> None:
    low = [make_pod("low").gpus(8).build()]
    high = make_pod("keep").gpus(8).priority(50).build()
    snap = running(ClusterSnapshot.build(nodes(2), pod_groups=[PodGroup("g", 2)]), low + [high])
    gang = [make_pod(f"g{i}").gpus(8).gang("g").priority(10).build() for i in range(2)]
    result = run(snap, gang, PREEMPT)
    assert not result.evictions and not result.nominated
    assert all(g.uid in result.unschedulable for g in gang)


def test_a_gang_of_preemptors_that_fits_is_nominated_together() -> None:
    low = [make_pod(f"low{i}").gpus(8).build() for i in range(2)]
    snap = running(ClusterSnapshot.build(nodes(2), pod_groups=[PodGroup("g", 2)]), low)
    gang = [make_pod(f"g{i}").gpus(8).gang("g").priority(10).build() for i in range(2)]
    result = run(snap, gang, PREEMPT)
    assert len(result.evictions) == 2 and sorted(p.pod for p in result.nominated) == [g.uid for g in gang]
    assert {e.preemptor for e in result.evictions} == {gang[0].uid}



def test_an_elastic_gang_that_reclaims_stays_within_its_queue_limit() -> None:
    queues = [Queue("a", limit={"gpu": 4 * G}), Queue("b")]
    snap = running(ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 1)]),
                   [make_pod(f"b{i}").gpus(2).queue("b").build() for i in range(4)])
    gang = [make_pod(f"g{i}").gpus(2).queue("a").gang("g").created(500).build() for i in range(4)]
    result = run(snap, gang, RECLAIM, queues)
    assert gpus_by_queue(snap, result) == {"a": 4, "b": 4}
    assert sorted(p.pod for p in result.nominated) == [gang[0].uid, gang[1].uid]


def test_each_member_of_a_reclaiming_gang_stops_at_its_queues_fair_share() -> None:
    """a and b want 8 GPUs each of 8: a's fair share is 4, so two of its four extras reclaim."""
    snap = running(ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 1)]),
                   [make_pod(f"b{i}").gpus(2).queue("b").build() for i in range(4)])
    gang = [make_pod(f"g{i}").gpus(2).queue("a").gang("g").created(500).build() for i in range(4)]
    result = run(snap, gang, RECLAIM, [Queue("a"), Queue("b")])
    assert gpus_by_queue(snap, result) == {"a": 4, "b": 4}


def test_preemption_never_takes_a_gang_past_its_max_member() -> None:
    low = [make_pod(f"low{i}").gpus(2).build() for i in range(4)]
    snap = running(ClusterSnapshot.build(nodes(1), pod_groups=[PodGroup("g", 1, max_member=2)]), low)
    gang = [make_pod(f"g{i}").gpus(2).gang("g").priority(10).build() for i in range(4)]
    result = run(snap, gang, PREEMPT)
    assert len(result.nominated) == 2 and len(result.evictions) == 2

# -- starvation ----------------------------------------------------------------------------------

def _stream(bound: float, steps: int) -> float | None:
    """2 nodes x 8 GPUs, 1-GPU jobs of 3 steps arriving 6 per step (more than the cluster
    serves, so older small pods always wait), and one 8-GPU pod from step 5.
    Returns the step at which the big pod started, or None."""
    snap = ClusterSnapshot.build(nodes(2)).owned()
    cfg = QueueingConfig(starvation_bound_seconds=bound)
    profile = build_profile(ProfileSettings(queueing=cfg))
    big = make_pod("big").gpus(8).created(5.0).build()
    waiting: list[PodSpec] = []
    ends: dict[PodUid, int] = {}
    for t in range(steps):
        waiting += [make_pod(f"s{t}-{i}").gpus(1).created(float(t)).build() for i in range(6)]
        if t == 5:
            waiting.append(big)
        done = [uid for uid, end in ends.items() if end <= t]
        for uid in done:
            del ends[uid]
        snap = snap.advance(releases=done)
        result = schedule(snap, waiting, profile, now=float(t), rng=random.Random(0))
        snap = snap.advance(result.binds)
        started = {b.pod for b in result.binds}
        if big.uid in started:
            return float(t)
        for uid in started:
            ends[uid] = t + 3
        waiting = [p for p in waiting if p.uid not in started]
    return None


def test_without_a_bound_a_stream_of_small_jobs_starves_a_whole_node_pod() -> None:
    assert _stream(0.0, 60) is None


def test_with_a_bound_the_head_of_line_pod_waits_at_most_the_bound_plus_one_runtime() -> None:
    started = _stream(10.0, 60)
    assert started is not None and started - 5.0 <= 10.0 + 3 + 1


def test_among_equal_priorities_the_most_recently_started_pods_are_the_victims() -> None:
    old = one_gpu_pods("old", 4, "a")
    new = one_gpu_pods("new", 4, "a")
    snap = running(running(ClusterSnapshot.build(nodes(1)), old, at=0.0), new, at=500.0)
    urgent = make_pod("urgent").gpus(2).queue("a").priority(10).created(900).build()
    result = run(snap, [urgent], PREEMPT, [Queue("a")])
    assert len(result.evictions) == 2 and {e.pod for e in result.evictions} <= {p.uid for p in new}


def test_no_nodes_are_held_for_a_starving_pod_its_queue_limit_keeps_out() -> None:
    snap = ClusterSnapshot.build(nodes(2))
    old = make_pod("old").gpus(8).queue("a").created(0.0).build()
    others = one_gpu_pods("b", 4, "b", created=900.0)
    cfg = QueueingConfig(order="fair", starvation_bound_seconds=10.0)
    result = run(snap, [old, *others], cfg, [Queue("a", limit={"gpu": 4 * G}), Queue("b")])
    assert "limit" in result.unschedulable[old.uid].message
    assert "held" not in result.unschedulable[old.uid].message and len(result.binds) == 4


def test_without_queues_the_plain_loop_is_taken_only_where_it_binds_the_same() -> None:
    pods = [make_pod("a").created(0.0).build()]
    assert plain_without_queues(QueueingConfig(), pods, 10.0)
    assert plain_without_queues(QueueingConfig(order="fair", reclaim=True), pods, 10.0)
    assert plain_without_queues(QueueingConfig(order="priority", reclaim=True), pods, 10.0)
    assert not plain_without_queues(QueueingConfig(order="fair", preemption=True), pods, 10.0)
    assert not plain_without_queues(QueueingConfig(order="fifo"), pods, 10.0)
    assert not plain_without_queues(QueueingConfig(order="las"), pods, 10.0)
    bound = QueueingConfig(order="fair", starvation_bound_seconds=60.0)
    assert plain_without_queues(bound, pods, 59.0)
    assert not plain_without_queues(bound, pods, 60.0)  # nodes may be held for the starving pod
    assert not plain_without_queues(QueueingConfig(order="fair", starvation_bound_seconds=1.0), pods, 1.0)
    late = [make_pod("b").created(30.0).build()]
    assert plain_without_queues(bound, late, 60.0)  # waited 30 s of the 60
