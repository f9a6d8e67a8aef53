"""Hypothesis properties of the queue-aware cycle (issue 4's must-show invariants)."""

from __future__ import annotations

import random
from typing import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.cycle import schedule
from gpufleet.core.queued import QueueContext
from gpufleet.core.quota import placement_gpu_milli
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, Placement, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

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
