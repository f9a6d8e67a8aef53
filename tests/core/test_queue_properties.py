"""Hypothesis properties of the queue-aware cycle (issue 4's must-show invariants)."""

from __future__ import annotations

import random
from typing import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.cycle import schedule
from gpufleet.core.fairshare import fair_shares
from gpufleet.core.context import QueueContext
from gpufleet.core.queued import add_demand
from gpufleet.core.quota import GPU_DIM, QueueBook, placement_gpu_milli
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import Cluster, ClusterSnapshot, Placement, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

from queue_scenarios import NOW, Scenario, admitted, scenarios
from queue_scenarios import cycle as scenario_cycle

G = 1000
QUEUES = ("a", "b", "c")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cluster(n: int) -> ClusterSnapshot:
    return ClusterSnapshot.build([make_node(f"n{i}").cpu(32_000).mem_gib(256).gpus(4).build() for i in range(n)],
                                 pod_groups=[PodGroup(f"g{i}", 2) for i in range(20)])


@st.composite
def pods(draw: st.DrawFn, prefix: str, created: float, gangs: bool = True) -> list[PodSpec]:
    out: list[PodSpec] = []
    for i in range(draw(st.integers(0, 14))):
        queue = draw(st.sampled_from(QUEUES))
        prio = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["gpu", "gpu", "frac", "cpu"] + (["gang"] if gangs else [])))
        b = make_pod(f"{prefix}{i}").queue(queue).priority(prio).created(created + i).cpu(1000)
        if kind == "gang":
            g = f"g{i}-{prefix}"
            for m in range(2):
                out.append(make_pod(f"{prefix}{i}m{m}").queue(queue).priority(prio).created(created + i)
                           .gpus(2).gang(g).build())
            continue
        if kind == "gpu":
            b = b.gpus(draw(st.sampled_from([1, 1, 2, 4])))
        elif kind == "frac":
            b = b.fraction(draw(st.sampled_from([250, 500])))
        out.append(b.build())
    return out


def start(snap: ClusterSnapshot, todo: Sequence[PodSpec]) -> ClusterSnapshot:
    """Run what fits with plain kube-style scheduling, started at t=0."""
    groups = {p.pod_group for p in todo if p.pod_group}
    snap = snap.with_pod_groups(PodGroup(g.split("/", 1)[1], 2) for g in groups if g)
    result = schedule(snap, todo, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
    return snap.apply(result.binds)


def cycle(snap: ClusterSnapshot, todo: Sequence[PodSpec], cfg: QueueingConfig, queues: Sequence[Queue],
          ctx: QueueContext | None = None) -> CycleResult:
    groups = {p.pod_group for p in todo if p.pod_group}
    snap = snap.with_pod_groups(PodGroup(g.split("/", 1)[1], 2) for g in groups if g)
    context = ctx or QueueContext(QueueTree.build(queues))
    return schedule(snap, todo, build_profile(ProfileSettings(queueing=cfg)), now=1000.0,
                    rng=random.Random(0), queues=context)


def after(snap: ClusterSnapshot, result: CycleResult) -> list[Placement]:
    gone = {e.pod for e in result.evictions}
    return [p for p in [*snap.placements.values(), *result.binds, *result.nominated] if p.pod not in gone]


CONFIGS = st.sampled_from([QueueingConfig(order="fair"), QueueingConfig(order="fair", reclaim=True),
                           QueueingConfig(order="fair", reclaim=True, preemption=True),
                           QueueingConfig(order="priority", preemption=True), QueueingConfig(order="las")])


@FAST
@given(st.integers(1, 4), pods("r", 0.0), pods("p", 100.0), CONFIGS, st.lists(st.integers(0, 8), min_size=3, max_size=3))
def test_queue_limits_are_never_exceeded(n: int, first: list[PodSpec], later: list[PodSpec], cfg: QueueingConfig,
                                         limits: list[int]) -> None:
    queues = [Queue(q, limit={"gpu": lim * G}) for q, lim in zip(QUEUES, limits)]
    # what already runs was admitted under the same limits
    snap = cluster(n)
    admitted = cycle(snap, first, QueueingConfig(order="fair"), queues)
    snap = snap.apply(admitted.binds)
    result = cycle(snap, later, cfg, queues)
    held = {q: 0 for q in QUEUES}
    for p in after(snap, result):
        held[p.queue] += placement_gpu_milli(p, snap.cluster)
    for q, lim in zip(QUEUES, limits):
        assert held[q] <= lim * G, (q, held, limits)


@FAST
@given(st.integers(1, 4), pods("r", 0.0), pods("p", 100.0), CONFIGS)
def test_no_gang_is_ever_partially_running(n: int, first: list[PodSpec], later: list[PodSpec],
                                           cfg: QueueingConfig) -> None:
    snap = start(cluster(n), first)
    result = cycle(snap, later, cfg, [Queue(q) for q in QUEUES])
    members: dict[str, int] = {}
    for p in after(snap, result):
        if p.pod_group is not None:
            members[p.pod_group] = members.get(p.pod_group, 0) + 1
    assert all(count >= 2 for count in members.values()), members


@FAST
@given(st.integers(1, 4), pods("r", 0.0, gangs=False), pods("p", 100.0, gangs=False))
def test_with_preemption_no_pod_waits_while_a_lower_priority_pod_of_its_queue_holds_what_it_needs(
        n: int, first: list[PodSpec], later: list[PodSpec]) -> None:
    """Checked once the cycles settle: capacity an eviction frees is used from the next cycle on."""
    cfg = QueueingConfig(order="priority", preemption=True, preemption_attempts_per_cycle=100)
    snap = start(cluster(n), first)
    waiting = list(later)
    for _ in range(3):
        result = cycle(snap, waiting, cfg, [Queue(q) for q in QUEUES])
        snap = snap.apply([*result.binds, *result.nominated], releases=[e.pod for e in result.evictions])
        placed = {p.pod for p in [*result.binds, *result.nominated]}
        waiting = [p for p in waiting if p.uid not in placed]
    plain = build_profile(ProfileSettings())
    for pod in waiting:
        for node in range(snap.cluster.n_nodes):
            trial = snap.usage.copy()
            for p in snap.placements.values():
                if snap.cluster.index[p.node] == node and p.queue == pod.queue and p.priority < pod.priority:
                    trial.place(p, node, sign=-1)
            probe = schedule(ClusterSnapshot(snap.cluster, trial, {}, {}), [pod], plain, now=0.0,
                             rng=random.Random(0))
            assert not probe.binds or probe.binds[0].node != snap.cluster.names[node], (pod.uid, node)


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3))
def test_a_queue_gets_its_guarantee_back_within_one_cycle(n: int, guarantee_per_node: int, extra: int) -> None:
    snap = cluster(n)
    others = [make_pod(f"b{i}").gpus(1).queue("b").build() for i in range(4 * n)]
    snap = start(snap, others)
    guarantee = min(guarantee_per_node * n, 4 * n)
    ask = [make_pod(f"a{i}").gpus(1).queue("a").created(500 + i).build() for i in range(guarantee + extra)]
    queues = [Queue("a", guaranteed={"gpu": guarantee * G}), Queue("b")]
    result = cycle(snap, ask, QueueingConfig(order="fair", reclaim=True), queues)
    got = sum(1 for p in after(snap, result) if p.queue == "a")
    assert got >= guarantee


@FAST
@given(st.integers(1, 3), st.lists(st.integers(0, 4), min_size=12, max_size=12), st.integers(1, 3))
def test_no_pod_is_preempted_more_often_per_hour_than_the_cap(n: int, history: list[int], cap: int) -> None:
    low = [make_pod(f"low{i}").gpus(1).build() for i in range(4 * n)]
    snap = start(cluster(n), low)
    evicted_at = {p.uid: tuple(1000.0 - 60.0 * k for k in range(history[i % 12])) for i, p in enumerate(low)}
    urgent = [make_pod(f"u{i}").gpus(1).priority(10).build() for i in range(4 * n)]
    cfg = QueueingConfig(preemption=True, max_preemptions_per_pod_per_hour=cap)
    result = cycle(snap, urgent, cfg, [], QueueContext(evicted_at=evicted_at))
    for e in result.evictions:
        assert len(evicted_at[PodUid(e.pod)]) + 1 <= cap


# -- the hard cases: nested trees, per-model limits, elastic gangs (issue 25) ----------------

ALL_CONFIGS = st.sampled_from([
    QueueingConfig(order="fair"), QueueingConfig(order="priority"), QueueingConfig(order="las"),
    QueueingConfig(order="fair", reclaim=True), QueueingConfig(order="fair", reclaim=True, preemption=True),
    QueueingConfig(order="priority", preemption=True), QueueingConfig(order="priority", reclaim=True, preemption=True)])
WIDE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def held_by_queue(tree: QueueTree, cluster: Cluster, placements: Sequence[Placement]) -> dict[str, dict[str, int]]:
    """GPU-milli per queue (counting its subtree) and dimension: `gpu` and `gpu/<model>`."""
    held: dict[str, dict[str, int]] = {q: {} for q in tree.queues}
    for p in placements:
        milli = placement_gpu_milli(p, cluster)
        model = cluster.models[int(cluster.model_id[cluster.index[p.node]])]
        for q in tree.path(tree.leaf_of(p.queue)):
            for dim in ("gpu", f"gpu/{model}"):
                held[q][dim] = held[q].get(dim, 0) + milli
    return held


@WIDE
@given(scenarios(), ALL_CONFIGS)
def test_no_queue_or_ancestor_ever_holds_more_than_its_limit_per_resource_and_gpu_model(
        s: Scenario, cfg: QueueingConfig) -> None:
    snap = admitted(s)
    tree = s.tree
    result = scenario_cycle(snap, s.later, cfg, tree)
    held = held_by_queue(tree, snap.cluster, after(snap, result))
    for name, queue in tree.queues.items():
        for dim, limit in queue.limit.items():
            assert held[name].get(dim, 0) <= limit, (name, dim, held[name], limit)


@WIDE
@given(scenarios(), ALL_CONFIGS)
def test_every_gang_runs_between_min_member_and_max_member(s: Scenario, cfg: QueueingConfig) -> None:
    snap = admitted(s)
    result = scenario_cycle(snap, s.later, cfg, s.tree)
    members: dict[str, int] = {}
    for p in after(snap, result):
        if p.pod_group is not None:
            members[p.pod_group] = members.get(p.pod_group, 0) + 1
    for g in s.groups:
        count = members.get(f"{g.namespace}/{g.name}", 0)
        assert count == 0 or count >= g.min_member, (g, count)
        assert g.max_member is None or count <= g.max_member, (g, count)


@WIDE
@given(scenarios(), ALL_CONFIGS)
def test_every_pending_pod_is_bound_nominated_or_told_why_exactly_once(s: Scenario, cfg: QueueingConfig) -> None:
    snap = admitted(s)
    result = scenario_cycle(snap, s.later, cfg, s.tree)
    outcomes = [b.pod for b in result.binds] + [n.pod for n in result.nominated] + list(result.unschedulable)
    assert sorted(outcomes) == sorted(p.uid for p in s.later)


@WIDE
@given(scenarios(), ALL_CONFIGS)
def test_a_priority_victim_is_of_its_preemptors_queue_with_strictly_lower_priority_and_others_are_reclaimed(
        s: Scenario, cfg: QueueingConfig) -> None:
    snap = admitted(s)
    tree = s.tree
    result = scenario_cycle(snap, s.later, cfg, tree)
    pending = {p.uid: p for p in s.later}
    for e in result.evictions:
        victim = snap.placements[e.pod]
        assert e.preemptor is not None
        preemptor = pending[e.preemptor]
        if tree.leaf_of(victim.queue) == tree.leaf_of(preemptor.queue):
            assert cfg.preemption and victim.priority < preemptor.priority, (e, victim.priority, preemptor.priority)
        else:
            assert cfg.reclaim, e


@WIDE
@given(scenarios(), st.sampled_from([QueueingConfig(order="fair", reclaim=True),
                                     QueueingConfig(order="fair", reclaim=True, preemption=True)]))
def test_a_reclaiming_queue_never_ends_above_its_fair_share(s: Scenario, cfg: QueueingConfig) -> None:
    snap = admitted(s)
    tree = s.tree
    result = scenario_cycle(snap, s.later, cfg, tree)
    book = QueueBook(tree, snap.cluster)
    book.load(snap.placements.values())
    want = book.alloc.copy()
    add_demand(book, want, s.later)
    fair = fair_shares(book, want)
    pending = {p.uid: p for p in s.later}
    reclaimers = {tree.leaf_of(pending[e.preemptor].queue) for e in result.evictions
                  if e.preemptor is not None
                  and tree.leaf_of(snap.placements[e.pod].queue) != tree.leaf_of(pending[e.preemptor].queue)}
    held = held_by_queue(tree, snap.cluster, after(snap, result))
    for q in reclaimers:
        assert held[q].get("gpu", 0) <= fair[book.index[q], GPU_DIM] + 1e-6, (q, held[q], fair[book.index[q]])


@WIDE
@given(scenarios(gangs=False), st.sampled_from([QueueingConfig(order="fair"), QueueingConfig(order="priority"),
                                                QueueingConfig(order="las")]))
def test_a_pod_of_an_unlimited_queue_waits_only_if_it_does_not_fit_what_is_left(
        s: Scenario, cfg: QueueingConfig) -> None:
    """Failures are reused only between pods under the same queue mask: a per-model limit of
    one queue must not make an identical pod of an unlimited queue fail."""
    snap = admitted(s)
    tree = s.tree
    result = scenario_cycle(snap, s.later, cfg, tree)
    final = snap.apply(result.binds)
    plain = build_profile(ProfileSettings())
    for uid in result.unschedulable:
        pod = next(p for p in s.later if p.uid == uid)
        path = [tree.queues[q] for q in tree.path(tree.leaf_of(pod.queue))]
        if any(q.limit or (not q.borrow and q.guaranteed) for q in path):
            continue  # limited (a queue that may not borrow is limited to its guarantee)
        probe = schedule(final, [pod], plain, now=NOW, rng=random.Random(0))
        assert not probe.binds, (uid, result.unschedulable[uid], probe.binds)
