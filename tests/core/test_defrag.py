"""core.defrag: who may be moved, how many, at what cost, and that the blocked pod then fits.

Table tests pin the rules of the module docstring one by one; Hypothesis properties check,
over random clusters, running pods, PodDisruptionBudgets, move histories and budgets, that a
plan never moves a protected pod, never overspends the budget and always lets the pod fit,
and (on small cases, against brute force over every subset of movable pods) that it moves
the fewest pods, then loses the least work.
"""

from __future__ import annotations

import itertools
import random
from types import MappingProxyType
from typing import Sequence

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.core import defrag
from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid
from gpufleet.model.disruption import QUEUE_LABEL, DisruptionBudget
from gpufleet.testing import make_node, make_pod

NOW = 10_000.0
PROFILE = build_profile(ProfileSettings())
GPU_MIB = 80 * 1024
PLENTY = defrag.DefragSettings(budget_gpu_hours_per_hour=1e9)


def nodes(n: int, gpus: int = 8) -> list[NodeInfo]:
    return [make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(gpus, mem_gib=80).build() for i in range(n)]


def running(name: str, node: int, gpus: Sequence[int], *, milli: int = 1000, started: float = 0.0,
            preemptible: bool = True, group: str | None = None, queue: str = "default") -> Placement:
    return Placement(PodUid(f"default/{name}"), NodeName(f"n{node}"), 1000, 1024, tuple(gpus), milli,
                     GPU_MIB if milli == 1000 else 0, (), group, queue, 0, preemptible, started)


def big(gpus: int = 8) -> PodSpec:
    return make_pod("big").gpus(gpus).build()


def plan(snap: ClusterSnapshot, unit: Sequence[PodSpec], cfg: defrag.DefragSettings = PLENTY,
         ledger: defrag.DefragLedger = defrag.DefragLedger(), budgets: Sequence[DisruptionBudget] = (),
         ) -> defrag.DefragPlan | str:
    return defrag.plan(snap, unit, PROFILE, now=NOW, rng=random.Random(0), settings=cfg, ledger=ledger,
                       budgets=budgets, specs=lambda uid: spec_of(snap, uid))


def spec_of(snap: ClusterSnapshot, uid: PodUid) -> PodSpec | None:
    p = snap.placements.get(uid)
    if p is None:
        return None
    b = make_pod(uid.split("/")[1]).cpu(p.cpu_milli).mem_mib(p.mem_mib)
    b = b.gpus(len(p.gpus)) if p.milli == 1000 else b.fraction(p.milli)
    return b.queue(p.queue).build()


def half_full(started: Sequence[float] = (0.0, 0.0)) -> ClusterSnapshot:
    """Two 8-GPU nodes, each with 4 free GPUs and a half-GPU pod on each of the other 4."""
    pods = [running(f"f{n}{j}", n, (j,), milli=500, started=started[n]) for n in range(2) for j in range(4)]
    return ClusterSnapshot.build(nodes(2), pods)


def evicted(result: defrag.DefragPlan | str) -> list[str]:
    assert isinstance(result, defrag.DefragPlan), result
    return sorted(e.pod.split("/")[1] for e in result.evictions)


# -- the rules, one by one ---------------------------------------------------------------------
def test_fragmented_pod_gets_a_node_by_moving_the_fewest_cheapest_pods() -> None:
    snap = half_full(started=(NOW - 600, NOW - 60))  # node 1's pods started later: less work lost
    result = plan(snap, [big()])
    assert evicted(result) == ["f10", "f11", "f12", "f13"]
    assert isinstance(result, defrag.DefragPlan)
    assert [p.node for p in result.placements] == ["n1"] and len(result.placements[0].gpus) == 8
    assert result.lost_gpu_hours == pytest.approx(4 * 0.5 * 60 / 3600)


def test_moved_pods_are_placed_again_elsewhere_never_on_the_room_just_made() -> None:
    result = plan(half_full(started=(NOW - 600, NOW - 60)), [big()])
    assert isinstance(result, defrag.DefragPlan)
    assert sorted(m.pod.split("/")[1] for m in result.moves) == ["f10", "f11", "f12", "f13"]
    assert {m.node for m in result.moves} == {"n0"} and not result.requeued


def test_a_moved_pod_whose_spec_is_unknown_goes_back_to_the_queue() -> None:
    snap = half_full()
    result = defrag.plan(snap, [big()], PROFILE, now=NOW, rng=random.Random(0), settings=PLENTY)
    assert isinstance(result, defrag.DefragPlan)
    assert not result.moves and len(result.requeued) == 4


def test_not_enough_free_gpus_in_all_is_not_fragmentation_and_moves_nothing() -> None:
    pods = [running(f"f{n}{j}", n, (j,), milli=500) for n in range(2) for j in range(5)]
    result = plan(ClusterSnapshot.build(nodes(2), pods), [big()])
    assert isinstance(result, str) and result.startswith("not fragmentation: 6 free whole GPUs")


def test_a_pod_that_fits_needs_no_moves() -> None:
    assert plan(ClusterSnapshot.build(nodes(2)), [big()]) == "the pod fits without moving anything"


@pytest.mark.parametrize("protect", ["not preemptible", "two GPUs", "gang member", "moved within the window",
                                     "budget with no disruptions left"], ids=lambda s: f"a pod that is {s} stays")
def test_protected_pods_are_never_moved(protect: str) -> None:
    """Both nodes have GPUs 0-4 taken by pods that may never move and GPUs 6-7 free. On node 1
    the pod that differs holds GPU 5 (and 6 when it has two GPUs); on node 0 two movable pods
    share GPU 5. Moving the one pod would be cheapest: the plan must take node 0's two instead."""
    pods = [running(f"u{n}{j}", n, (j,), milli=300, preemptible=False) for n in range(2) for j in range(5)]
    pods += [running(f"a{k}", 0, (5,), milli=300) for k in range(2)]
    odd = dict(preemptible=protect != "not preemptible", group="default/g" if protect == "gang member" else None,
               queue="keep" if protect.startswith("budget") else "default")
    gpus = (5, 6) if protect == "two GPUs" else (5,)
    pods.append(running("odd", 1, gpus, milli=1000 if protect == "two GPUs" else 300, **odd))  # type: ignore[arg-type]
    groups = [PodGroup("g", 1)] if protect == "gang member" else []
    snap = ClusterSnapshot.build(nodes(2), pods, groups)
    ledger = defrag.DefragLedger(MappingProxyType({PodUid("default/odd"): NOW - 100})) \
        if protect == "moved within the window" else defrag.DefragLedger()
    budgets = [DisruptionBudget("keep", MappingProxyType({QUEUE_LABEL: "keep"}), min_available=1)]
    result = plan(snap, [big(3)], ledger=ledger, budgets=budgets)
    assert evicted(result) == ["a0", "a1"]
    assert isinstance(result, defrag.DefragPlan) and result.placements[0].node == "n0"


def test_the_odd_pod_is_moved_when_nothing_protects_it() -> None:
    """The control of the test above: the same cluster with the pod movable moves it alone."""
    pods = [running(f"u{n}{j}", n, (j,), milli=300, preemptible=False) for n in range(2) for j in range(5)]
    pods += [running(f"a{k}", 0, (5,), milli=300) for k in range(2)] + [running("odd", 1, (5,), milli=300)]
    assert evicted(plan(ClusterSnapshot.build(nodes(2), pods), [big(3)])) == ["odd"]


def test_the_budget_refuses_a_plan_that_would_lose_too_much() -> None:
    snap = half_full(started=(0.0, 0.0))  # every pod has run 10,000 s: 4 x 0.5 GPU x 2.78 h = 5.6 GPU-hours
    tight = defrag.DefragSettings(budget_gpu_hours_per_hour=5.0)
    result = plan(snap, [big()], tight)
    assert isinstance(result, str) and "budget" in result
    spent = defrag.DefragLedger(spent=((NOW - 3000, 1.0),))
    assert isinstance(plan(snap, [big()], defrag.DefragSettings(budget_gpu_hours_per_hour=6.0), spent), str)
    assert isinstance(plan(snap, [big()], defrag.DefragSettings(budget_gpu_hours_per_hour=6.0)), defrag.DefragPlan)


def test_checkpoints_limit_the_work_counted_lost() -> None:
    snap = half_full(started=(0.0, 0.0))
    result = plan(snap, [big()], defrag.DefragSettings(checkpoint_s=3600.0, budget_gpu_hours_per_hour=1e9))
    assert isinstance(result, defrag.DefragPlan)
    assert result.lost_gpu_hours == pytest.approx(4 * 0.5 * (NOW % 3600) / 3600)


def test_the_ledger_keeps_an_hour_of_losses_and_the_window_of_moves() -> None:
    result = plan(half_full(), [big()])
    assert isinstance(result, defrag.DefragPlan)
    cfg = defrag.DefragSettings(window_s=7200.0, budget_gpu_hours_per_hour=10.0)
    ledger = defrag.DefragLedger(MappingProxyType({PodUid("old"): NOW - 8000}), ((NOW - 4000, 3.0),))
    after = ledger.record(result, NOW, cfg)
    assert set(after.moved_at) == {e.pod for e in result.evictions}
    assert after.left(cfg, NOW) == pytest.approx(10.0 - result.lost_gpu_hours)


def test_a_gang_gets_room_for_every_member_it_still_needs() -> None:
    """Three nodes with 2 free GPUs each and half-GPU pods on the other 6; a gang of two 3-GPU members."""
    pods = [running(f"f{n}{j}", n, (j,), milli=500, started=NOW - 10 * j) for n in range(3) for j in range(6)]
    snap = ClusterSnapshot.build(nodes(3), pods, [PodGroup("g", 2)])
    gang = [make_pod(f"m{k}").gpus(3).gang("g").build() for k in range(2)]
    result = plan(snap, gang)
    assert isinstance(result, defrag.DefragPlan)
    assert len({p.node for p in result.placements}) == 2 and evicted(result) == ["f00", "f10"]
    assert sorted([m.pod for m in result.moves] + list(result.requeued)) == [e.pod for e in result.evictions]


def test_a_gang_with_members_running_plans_only_for_the_members_it_still_lacks() -> None:
    """minMember 3, one member already runs: of three pending members, two are placed, for one
    node's worth of moves; a gang that ran no member would need a third node cleared."""
    pods = [running(f"f{n}{j}", n, (j,), milli=500, started=NOW - 10 * j) for n in range(3) for j in range(6)]
    pods.append(running("m-run", 3, (0, 1, 2), group="default/g"))
    snap = ClusterSnapshot.build(nodes(4), pods, [PodGroup("g", 3)])
    gang = [make_pod(f"m{k}").gpus(3).gang("g").build() for k in range(3)]
    result = plan(snap, gang)
    assert isinstance(result, defrag.DefragPlan)
    assert len(result.placements) == 2 and [p.pod for p in result.placements] == [gang[0].uid, gang[1].uid]


def test_a_gang_member_that_fits_is_placed_without_moves_and_only_the_other_moves_pods() -> None:
    """Node 3 is empty: one 8-GPU member fits there; the other needs node 0 or 1 cleared."""
    pods = [running(f"f{n}{j}", n, (j,), milli=500, started=NOW - 10 * j) for n in range(2) for j in range(4)]
    snap = ClusterSnapshot.build(nodes(3), pods, [PodGroup("g", 2)])
    gang = [make_pod(f"m{k}").gpus(8).gang("g").build() for k in range(2)]
    result = plan(snap, gang)
    assert isinstance(result, defrag.DefragPlan)
    assert len(result.evictions) == 4 and {p.node for p in result.placements} >= {NodeName("n2")}


def test_evictions_name_the_pod_they_make_room_for() -> None:
    result = plan(half_full(), [big()])
    assert isinstance(result, defrag.DefragPlan)
    assert {e.preemptor for e in result.evictions} == {big().uid}
    assert all(e.reason == "moved to make room for pod default/big (defragmentation)" for e in result.evictions)


def test_a_plan_is_only_for_whole_gpu_units() -> None:
    assert plan(half_full(), [make_pod("frac").fraction(500).build()]) == \
        "defragmentation is only for pods asking whole GPUs"


def test_a_budget_with_one_disruption_left_gives_one_of_its_pods_and_the_next_cheapest_pod_fills_in() -> None:
    """Node 0: 4 free GPUs, half-GPU pods on GPUs 4-7; two cheap ones in the `serving` queue, whose
    budget (minAvailable 1) allows one disruption, and two that ran longer. Node 1 cannot be
    cleared. A 6-GPU pod needs two of GPUs 4-7: one serving pod and the cheaper of the others."""
    pods = [running("s4", 0, (4,), milli=500, started=NOW - 60, queue="serving"),
            running("s5", 0, (5,), milli=500, started=NOW - 60, queue="serving"),
            running("d6", 0, (6,), milli=500, started=NOW - 600),
            running("d7", 0, (7,), milli=500, started=NOW - 1200),
            *(running(f"x{j}", 1, (j,), preemptible=False) for j in range(6))]
    snap = ClusterSnapshot.build(nodes(2), pods)
    serving = DisruptionBudget("serving", MappingProxyType({QUEUE_LABEL: "serving"}), min_available=1)
    assert evicted(plan(snap, [big(6)], budgets=[serving])) == ["d6", "s4"]
    assert evicted(plan(snap, [big(6)])) == ["s4", "s5"]  # without the budget: the two cheapest


@pytest.mark.parametrize("unit,age,wanted", [
    ([("w", 4)], 300.0, True),
    ([("w", 3)], 300.0, False),
    ([("w", 4)], 299.0, False),
    ([("w", 2), ("w", 2)], 300.0, True),
    ([("w", 4), ("f", 1)], 300.0, False),
    ([], 300.0, False),
], ids=["at the GPU and wait bounds", "too few GPUs", "not waited long enough", "a gang's GPUs add up",
        "a fraction in the unit", "no unit"])
def test_which_units_defragmentation_is_for(unit: list[tuple[str, int]], age: float, wanted: bool) -> None:
    cfg = defrag.DefragSettings(min_gpus=4, min_wait_s=300.0)
    pods = [(make_pod(f"p{k}").gpus(n) if kind == "w" else make_pod(f"p{k}").fraction(500)).created(NOW - age).build()
            for k, (kind, n) in enumerate(unit)]
    assert defrag.wants_defrag(pods, NOW, cfg) is wanted


# -- properties ----------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn, max_nodes: int = 3, budgets_too: bool = True
              ) -> tuple[ClusterSnapshot, PodSpec, defrag.DefragSettings, defrag.DefragLedger,
                         list[DisruptionBudget]]:
    """Nodes (mostly 8 GPUs) whose GPUs are each free, or hold fractions, a one-GPU pod, part of a two-GPU pod or a
    gang member (each preemptible or not, of queue a or b, started at one of three times); mostly
    a pod asking one GPU more than the freest node has (the fragmented case), else any size."""
    n_nodes = draw(st.integers(2, max_nodes))
    sizes = [draw(st.sampled_from([4, 8, 8])) for _ in range(n_nodes)]
    cluster = [make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(g, mem_gib=80).build() for i, g in enumerate(sizes)]
    pods: list[Placement] = []
    groups: list[PodGroup] = []
    for i, g in enumerate(sizes):
        j = 0
        while j < g:
            kind = draw(st.sampled_from(["free", "free", "fractions", "fractions", "one", "two", "gang"]))
            if kind == "free" or (kind == "two" and j == g - 1):
                j += 1
                continue
            def common() -> dict[str, object]:
                return dict(started=draw(st.sampled_from([0.0, NOW - 3000, NOW - 100])),
                            preemptible=draw(st.booleans()) or draw(st.booleans()),
                            queue=draw(st.sampled_from(["a", "b"])))
            name = f"p{i}-{j}"
            if kind == "fractions":
                for k in range(draw(st.integers(1, 2))):
                    pods.append(running(f"{name}-{k}", i, (j,), milli=draw(st.sampled_from([250, 500])),
                                        **common()))  # type: ignore[arg-type]
            else:
                take = (j, j + 1) if kind == "two" else (j,)
                group = None
                if kind == "gang":
                    group = f"default/{name}"
                    groups.append(PodGroup(name, 1))
                pods.append(running(name, i, take, group=group, **common()))  # type: ignore[arg-type]
            j += 2 if kind == "two" else 1
    snap = ClusterSnapshot.build(cluster, pods, groups)
    most, total = int(snap.usage.free_whole.max()), int(snap.usage.free_whole.sum())
    if most < min(max(sizes), total) and draw(st.integers(0, 3)):
        ask = draw(st.integers(most + 1, min(max(sizes), total)))
    else:
        ask = draw(st.sampled_from([2, 4, 8]))
    cfg = defrag.DefragSettings(window_s=1000.0, budget_gpu_hours_per_hour=draw(st.sampled_from([0.5, 2.0, 1e9])),
                                checkpoint_s=draw(st.sampled_from([None, 1800.0])))
    moved = {p.pod: NOW - draw(st.sampled_from([50.0, 5000.0])) for p in pods if draw(st.booleans())}
    ledger = defrag.DefragLedger(MappingProxyType(moved), ((NOW - 1000, draw(st.sampled_from([0.0, 0.4]))),))
    budgets = []
    if budgets_too:
        for q in ("a", "b"):
            if draw(st.booleans()):
                budgets.append(DisruptionBudget(q, MappingProxyType({QUEUE_LABEL: q}),
                                                max_unavailable=draw(st.integers(0, 2))))
    return snap, make_pod("big").gpus(ask).build(), cfg, ledger, budgets


def free_whole(snap: ClusterSnapshot, ask: int) -> int:
    """Free whole GPUs on the nodes big enough for a pod asking `ask` (in these clusters the only filter
    that can keep it off an empty node)."""
    return int(snap.usage.free_whole[snap.cluster.gpu_count >= ask].sum())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_plans_move_only_movable_pods_within_budget_and_make_the_pod_fit(
        case: tuple[ClusterSnapshot, PodSpec, defrag.DefragSettings, defrag.DefragLedger, list[DisruptionBudget]]
) -> None:
    snap, pod, cfg, ledger, budgets = case
    result = plan(snap, [pod], cfg, ledger, budgets)
    event("a plan" if isinstance(result, defrag.DefragPlan) else result.split(":")[0].split(";")[0][:40])
    if free_whole(snap, pod.gpu.count) < pod.gpu.count:
        assert isinstance(result, str) and result.startswith("not fragmentation")
    else:
        assert not (isinstance(result, str) and result.startswith("not fragmentation")), result
    if isinstance(result, str):
        return
    running_pods = list(snap.placements.values())
    victims = [snap.placements[e.pod] for e in result.evictions]
    assert victims
    for v in victims:
        assert v.preemptible and len(v.gpus) == 1 and v.pod_group is None, v
        assert NOW - ledger.moved_at.get(v.pod, -1e18) >= cfg.window_s, v
    for b in budgets:
        assert sum(b.selects(v) for v in victims) <= b.allowed(running_pods), b
    lost = sum(defrag.lost_gpu_hours(v, NOW, cfg.checkpoint_s) for v in victims)
    assert result.lost_gpu_hours == pytest.approx(lost)
    assert lost <= ledger.left(cfg, NOW) + 1e-9
    after = snap.apply(binds=[*result.placements, *result.moves], releases=[v.pod for v in victims])
    for i in range(after.cluster.n_nodes):
        assert after.usage.overcommitted(i) is None
    (placed,) = result.placements
    assert placed.pod == pod.uid and len(set(placed.gpus)) == pod.gpu.count
    # before the moves it fitted nowhere
    assert not schedule(snap, [pod], PROFILE, now=NOW, rng=random.Random(0)).binds


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_nodes=2, budgets_too=False))
def test_plans_are_minimal_against_brute_force(
        case: tuple[ClusterSnapshot, PodSpec, defrag.DefragSettings, defrag.DefragLedger, list[DisruptionBudget]]
) -> None:
    snap, pod, cfg, ledger, _ = case
    cfg = defrag.DefragSettings(window_s=cfg.window_s, checkpoint_s=cfg.checkpoint_s, budget_gpu_hours_per_hour=1e9)
    movable = [p for p in snap.placements.values() if p.preemptible and len(p.gpus) == 1 and p.pod_group is None
               and NOW - ledger.moved_at.get(p.pod, -1e18) >= cfg.window_s]
    if len(movable) > 12 or free_whole(snap, pod.gpu.count) < pod.gpu.count:
        return
    best: tuple[int, float] | None = None
    for k in range(len(movable) + 1):
        for subset in itertools.combinations(movable, k):
            cost = (k, sum(defrag.lost_gpu_hours(p, NOW, cfg.checkpoint_s) for p in subset))
            if best is not None and cost >= best:
                continue
            trial = snap.apply(releases=[p.pod for p in subset])
            if schedule(trial, [pod], PROFILE, now=NOW, rng=random.Random(0)).binds:
                best = cost
        if best is not None and best[0] == k:
            break
    result = plan(snap, [pod], cfg, ledger)
    event("no subset fits" if best is None else "fits as it is" if best[0] == 0 else f"{best[0]} pods to move")
    if best is None:
        assert isinstance(result, str)
    elif best[0] == 0:
        assert result == "the pod fits without moving anything"
    else:
        assert isinstance(result, defrag.DefragPlan), result
        assert len(result.evictions) == best[0]
        assert result.lost_gpu_hours == pytest.approx(best[1], abs=1e-9)
