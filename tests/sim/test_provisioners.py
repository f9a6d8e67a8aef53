"""The simulator's autoscalers: a fixed cluster, the Karpenter-like provisioner and the gpufleet planner.

They are pure functions of their inputs (plus their own timers), so they are tested on
hand-made snapshots without running a replay.
"""

from __future__ import annotations

from typing import Sequence

import pytest

from gpufleet.autoscale import NodeTemplate
from gpufleet.model import ClusterSnapshot, ModelError, Placement, PodGroup, PodSpec, PodUid
from gpufleet.sim.provisioners import (FixedCluster, GpufleetPlanner, KarpenterLike, ScalerSettings, check_templates,
                                       existing_nodes, karpenter_batch)
from gpufleet.sim.scaling import NewNode
from gpufleet.testing import make_pod

GIB = 1024
X1 = NodeTemplate("l40s-x1", 16_000, 128 * GIB, 3.0, gpu_model="L40S", gpus=1, gpu_mem_mib=48 * GIB, start_delay_s=120)
X4 = NodeTemplate("l40s-x4", 48_000, 384 * GIB, 10.49, gpu_model="L40S", gpus=4, gpu_mem_mib=48 * GIB,
                  start_delay_s=180)
X8 = NodeTemplate("h100-x8", 192_000, 2048 * GIB, 55.04, gpu_model="H100-80GB", gpus=8, gpu_mem_mib=80 * GIB,
                  start_delay_s=300)
ALL = [X1, X4, X8]


def ones(n: int, group: str | None = None) -> list[PodSpec]:
    out = []
    for k in range(n):
        b = make_pod(f"p{k}").cpu(4000).mem_mib(16 * GIB).gpus(1).created(float(k))
        out.append((b.gang(group) if group else b).build())
    return out


def fractions(n: int, milli: int = 250) -> list[PodSpec]:
    return [make_pod(f"f{k}").cpu(1000).mem_mib(2 * GIB).fraction(milli).created(float(k)).build() for k in range(n)]


def new_counts(nodes: Sequence[NewNode]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in nodes:
        out[n.node.labels["gpufleet.io/node-template"]] = out.get(n.node.labels["gpufleet.io/node-template"], 0) + 1
    return out


EMPTY = ClusterSnapshot.build([])


# -- karpenter_batch ------------------------------------------------------------------------------
def test_karpenter_opens_one_node_per_member_of_an_8_pod_gang_when_the_cheapest_template_has_one_gpu() -> None:
    batch = karpenter_batch(ones(8, "g"), [X1])
    assert [t.name for t, _ in batch.new] == ["l40s-x1"] * 8
    assert sorted(uid for _, pods in batch.new for uid in pods) == sorted(p.uid for p in ones(8, "g"))


def test_karpenter_narrows_a_new_node_to_templates_holding_all_its_pods_and_launches_the_cheapest() -> None:
    # Pod by pod the node's options shrink from {x1, x4, x8} to {x8}: one 8-GPU node at 55.04/h,
    # where two 4-GPU nodes would cost 20.98/h (the planner's choice, below).
    batch = karpenter_batch(ones(8), ALL)
    assert [t.name for t, _ in batch.new] == ["h100-x8"]
    assert batch.summary() == {"nodes": 1, "gpus": 8, "cost_per_hour": 55.04, "unplaced": 0}


def test_karpenter_counts_a_fraction_as_a_whole_gpu() -> None:
    assert [t.name for t, _ in karpenter_batch(fractions(4), [X1]).new] == ["l40s-x1"] * 4


def test_karpenter_places_pods_largest_cpu_first() -> None:
    big = make_pod("big").cpu(40_000).mem_mib(8 * GIB).gpus(1).created(5.0).build()
    small = ones(1)
    # Arrival order would open an x1 for the small pod, then an x4 for the big one; CPU order puts
    # the big pod first on an x4, where the small one fits too.
    batch = karpenter_batch([*small, big], ALL)
    assert [(t.name, pods) for t, pods in batch.new] == [("l40s-x4", (big.uid, small[0].uid))]


def test_karpenter_sees_a_gpu_shared_by_fractions_as_used_by_each_of_them() -> None:
    node = X4.node_info("n1")
    running = [Placement(PodUid(f"r{k}"), node.name, 1000, 2 * GIB, (0,), 250) for k in range(3)]
    snap = ClusterSnapshot.build([node], running)
    existing = existing_nodes(snap, [], ALL)
    assert [sum(m == 1000 for m in e.room.milli) for e in existing] == [1]  # 4 GPUs, 3 asked for
    batch = karpenter_batch(fractions(2), ALL, existing)
    assert dict(batch.on_existing) == {"n1": (PodUid("default/f0"),)}
    assert [t.name for t, _ in batch.new] == ["l40s-x1"]


def test_karpenter_fills_launching_nodes_before_opening_new_ones() -> None:
    launching = [NewNode(X4.node_info("l1"), X4.price_per_hour, X4.start_delay_s)]
    batch = karpenter_batch(ones(5), ALL, existing_nodes(EMPTY, launching, ALL))
    assert len(batch.on_existing["l1"]) == 4
    assert [t.name for t, _ in batch.new] == ["l40s-x1"]


def test_karpenter_reports_pods_no_template_can_host() -> None:
    huge = make_pod("huge").cpu(1000).gpus(16).build()
    batch = karpenter_batch([huge], ALL)
    assert batch.new == ()
    assert "no template can host it (16 GPUs)" in batch.unplaced[huge.uid]


# -- KarpenterLike.step: batching and WhenEmpty consolidation --------------------------------------------
def test_karpenter_like_provisions_for_new_pending_pods_and_not_again_while_they_wait() -> None:
    k = KarpenterLike(ALL)
    pods = ones(2)
    first = k.step(0.0, EMPTY, pods, [])
    assert new_counts(first.add) == {"l40s-x4": 1}
    assert k.step(10.0, EMPTY, pods, first.add).add == ()
    # Still pending a minute after the last run: Karpenter looks again (and finds the launching node).
    assert k.step(60.0, EMPTY, pods, first.add).add == ()


def test_karpenter_like_removes_an_empty_node_only_after_the_consolidation_delay() -> None:
    k = KarpenterLike(ALL, ScalerSettings(consolidate_after_s=60.0))
    empty = X1.node_info("e")
    busy = X1.node_info("b")
    snap = ClusterSnapshot.build([empty, busy], [Placement(PodUid("r"), busy.name, 1000, GIB, (0,), 1000)])
    removed = {t: k.step(t, snap, [], []).remove for t in (0.0, 10.0, 50.0, 60.0)}
    assert removed == {0.0: (), 10.0: (), 50.0: (), 60.0: ("e",)}


def test_karpenter_like_keeps_a_node_it_just_meant_pods_for() -> None:
    k = KarpenterLike([X4], ScalerSettings(consolidate_after_s=0.0))
    node = X4.node_info("n")
    snap = ClusterSnapshot.build([node])
    # The gang of 8 cannot start on the 4-GPU node, but Karpenter means half of it for that node.
    step = k.step(0.0, snap, ones(8, "g"), [])
    assert new_counts(step.add) == {"l40s-x4": 1}
    assert step.remove == ()
    assert k.step(30.0, snap, [], []).remove == ("n",)


# -- GpufleetPlanner.step ------------------------------------------------------------------------------
def test_planner_packs_fractions_onto_one_gpu() -> None:
    assert new_counts(GpufleetPlanner(ALL).step(0.0, EMPTY, fractions(4), []).add) == {"l40s-x1": 1}


def test_planner_serves_eight_one_gpu_pods_with_two_4_gpu_nodes() -> None:
    assert new_counts(GpufleetPlanner(ALL).step(0.0, EMPTY, ones(8), []).add) == {"l40s-x4": 2}


def test_planner_counts_launching_nodes_as_capacity() -> None:
    p = GpufleetPlanner(ALL)
    first = p.step(0.0, EMPTY, fractions(2, 400), [])
    assert new_counts(first.add) == {"l40s-x1": 1}
    # Two more fractions arrive: one fits beside the first two on the launching GPU (1000m),
    # the other needs a node.
    later = p.step(10.0, EMPTY, fractions(4, 400), first.add)
    assert new_counts(later.add) == {"l40s-x1": 1}


def test_planner_plans_a_gang_all_at_once() -> None:
    groups = [PodGroup("g", 3)]
    gang = [make_pod(f"m{k}").cpu(8000).mem_mib(32 * GIB).gpus(8).gang("g").build() for k in range(3)]
    snap = ClusterSnapshot.build([], pod_groups=groups)
    assert new_counts(GpufleetPlanner(ALL).step(0.0, snap, gang, []).add) == {"h100-x8": 3}


def test_planner_does_not_remove_an_idle_node_a_waiting_gang_needs() -> None:
    groups = [PodGroup("g", 2)]
    gang = [make_pod(f"m{k}").cpu(8000).mem_mib(32 * GIB).gpus(8).gang("g").build() for k in range(2)]
    joined = X8.node_info("h1")
    snap = ClusterSnapshot.build([joined], pod_groups=groups)
    launching = [NewNode(X8.node_info("h2"), X8.price_per_hour, X8.start_delay_s)]
    p = GpufleetPlanner(ALL, ScalerSettings(consolidate_after_s=0.0))
    assert p.step(0.0, snap, gang, launching).remove == ()
    assert p.step(10.0, snap, [], []).remove == ("h1",)


def test_planner_removes_idle_nodes_most_expensive_first_within_the_budget() -> None:
    nodes = [X1.node_info("a"), X8.node_info("b"), X4.node_info("c")]
    p = GpufleetPlanner(ALL, ScalerSettings(consolidate_after_s=0.0, budget=0.5))
    assert p.step(0.0, ClusterSnapshot.build(nodes), [], []).remove == ("b", "c")


def test_planner_underutilized_mode_moves_pods_off_a_node() -> None:
    a, b = X4.node_info("a"), X4.node_info("b")
    run = [Placement(PodUid("ra"), a.name, 1000, GIB, (0,), 1000), Placement(PodUid("rb"), b.name, 1000, GIB, (0,), 1000)]
    snap = ClusterSnapshot.build([a, b], run)
    settings = ScalerSettings(consolidate_after_s=0.0)
    assert GpufleetPlanner(ALL, settings).step(0.0, snap, [], []).remove == ()
    assert len(GpufleetPlanner(ALL, settings, consolidation="underutilized").step(0.0, snap, [], []).remove) == 1


# -- FixedCluster, names, bad input ----------------------------------------------------------------------
def test_fixed_cluster_requests_its_nodes_once_at_once_with_fresh_names() -> None:
    taken = X4.node_info("l40s-x4-00001")
    f = FixedCluster([(X4, 2), (X8, 1)])
    first = f.step(0.0, ClusterSnapshot.build([taken]), ones(3), [])
    assert new_counts(first.add) == {"l40s-x4": 2, "h100-x8": 1}
    assert all(n.start_delay_s == 0.0 for n in first.add)
    assert "l40s-x4-00001" not in {n.node.name for n in first.add}
    assert f.step(3600.0, EMPTY, ones(3), []).add == ()


@pytest.mark.parametrize(("templates", "message"), [
    ([], "at least one template"),
    ([X1, X1], "must be unique"),
    ([NodeTemplate("nothing", 0, 0, 1.0)], "can host nothing"),
], ids=["no templates", "duplicate names", "a template that can host nothing"])
def test_bad_templates_are_refused_with_a_reason(templates: list[NodeTemplate], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        check_templates(templates)
    with pytest.raises(ModelError, match=message):
        KarpenterLike(templates)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ModelError, match="interval_s"):
        ScalerSettings(interval_s=0.0)
    with pytest.raises(ModelError, match="unknown mode"):
        GpufleetPlanner(ALL, consolidation="sometimes")
