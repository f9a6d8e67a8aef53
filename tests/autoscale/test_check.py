"""The planner's check (`autoscale.check`) binds exactly what a full `schedule()` binds.

The check leaves out the queue accounting, the current nodes no leftover pod fits on, and
every unit before the first one a change of the planned nodes can affect. Each saving is
exact; these tests compare with a plain `schedule()` of the leftover pods on every current
node plus the planned ones, on random clusters (running pods, gangs partly running, an
unhealthy GPU), templates, pods and changes of the planned nodes.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.autoscale import NodeTemplate, Plan, plan
from gpufleet.autoscale import check as checking
from gpufleet.autoscale.check import Check, Outcome, node_local
from gpufleet.core import faults
from gpufleet.core.cycle import plain_without_queues, schedule
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import Cluster, ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, Usage
from gpufleet.testing import make_node, make_pod
from template_strategies import GIB, MODELS, PROFILE_NAMES, profile, templates

MIG_LAYOUTS = ((), ("1g.10gb",) * 7)
PROFILES = {name: profile(name) for name in PROFILE_NAMES}
PROFILE = PROFILES["default"]


@dataclass
class View:
    cluster: Cluster
    usage: Usage


def pod(draw: st.DrawFn, name: str, created: float) -> PodSpec:
    b = make_pod(name).cpu(draw(st.sampled_from((500, 2000, 8000)))).mem_mib(4 * GIB).created(created)
    b.priority(draw(st.sampled_from((0, 0, 1))))
    kind = draw(st.sampled_from(("cpu", "fraction", "whole", "whole", "mig")))
    if kind == "fraction":
        b.fraction(draw(st.sampled_from((100, 250, 500, 700))), draw(st.sampled_from((0, 8 * GIB))))
    elif kind == "whole":
        b.gpus(draw(st.sampled_from((1, 1, 2, 4, 8))))
    elif kind == "mig":
        b.mig("1g.10gb")
    if kind in ("fraction", "whole") and draw(st.booleans()):
        b.models(*draw(st.sets(st.sampled_from(MODELS), min_size=1, max_size=2)))
    if draw(st.integers(0, 3)) == 0:
        b.tolerate("dedicated", "ml", "NoSchedule")
    return b.build()


@st.composite
def pods(draw: st.DrawFn, prefix: str, most: int) -> tuple[list[PodSpec], list[PodGroup]]:
    out = [pod(draw, f"{prefix}{i}", float(i)) for i in range(draw(st.integers(0, most)))]
    groups = []
    for g in range(draw(st.integers(0, 2))):
        n, gpus = draw(st.integers(2, 4)), draw(st.sampled_from((1, 2, 8)))
        groups.append(PodGroup(f"{prefix}g{g}", draw(st.integers(1, n))))
        out += [make_pod(f"{prefix}g{g}-{k}").cpu(4000).mem_mib(8 * GIB).gpus(gpus).gang(f"{prefix}g{g}")
                .created(float(draw(st.integers(0, most)))).build() for k in range(n)]
    return out, groups


Faults = list[tuple[faults.Fault, bool]]
"""Faults on current nodes, and whether each was repaired (its fault time stays: RecentFaults)."""


def with_faults(snap: ClusterSnapshot, done: Faults) -> ClusterSnapshot:
    for fault, repaired in done:
        snap = faults.quarantine(snap, fault, now=-600.0)
        if repaired:
            snap = faults.restore(snap, fault)
    return snap


@st.composite
def current(draw: st.DrawFn) -> tuple[ClusterSnapshot, Faults]:
    """A cluster with some pods running (gang members too) and maybe a faulty or recently faulty node."""
    nodes: list[NodeInfo] = []
    for i in range(draw(st.integers(0, 4))):
        b = make_node(f"n{i}").cpu(32_000).mem_gib(256).gpus(draw(st.sampled_from((1, 2, 4))),
                                                               model=draw(st.sampled_from(MODELS)))
        if draw(st.integers(0, 3)) == 0:
            b.taint("dedicated", "ml")
        nodes.append(b.build())
    running, groups = draw(pods("run-", 10))
    snap = ClusterSnapshot.build(nodes, (), groups)
    snap = snap.apply(schedule(snap, running, PROFILE, now=0.0, rng=random.Random(0)).binds)
    done: Faults = []
    for node in nodes:
        kind = draw(st.sampled_from(("none", "none", "device", "node")))
        if kind != "none":
            fault = faults.DeviceFault(node.name, 0, "xid") if kind == "device" else faults.NodeFault(node.name, "down")
            done.append((fault, draw(st.booleans())))
    return with_faults(snap, done), done


def full(after: ClusterSnapshot, done: Faults, planned: list[tuple[NodeName, int]],
         tpls: list[NodeTemplate], left: list[PodSpec], groups: list[PodGroup], profile: Profile) -> CycleResult:
    """The reference: `schedule()` of `left` on every current node plus the planned ones, with the
faults of `after` (rebuilt the way a driver would: same placements, same faults)."""
    nodes = list(after.cluster.nodes) + [tpls[t].node_info(name) for name, t in planned]
    snap = ClusterSnapshot.build(nodes, after.placements.values(), list(after.pod_groups.values()) + groups)
    return schedule(with_faults(snap, done), left, profile, now=0.0, rng=random.Random(0))


def same(got: Outcome, want: CycleResult) -> None:
    assert sorted(got.result.binds, key=lambda p: p.pod) == sorted(want.binds, key=lambda p: p.pod)
    assert set(got.result.unschedulable) == set(want.unschedulable)


@pytest.mark.parametrize("name", PROFILE_NAMES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_check_and_rerun_bind_what_a_full_schedule_binds(name: str, data: st.DataObject) -> None:
    prof = PROFILES[name]
    after, done = data.draw(current())
    tpls = data.draw(templates(layouts=MIG_LAYOUTS, cpu_template=True))
    left, groups = data.draw(pods("p", 16))
    for key in sorted(after.pod_groups)[:1]:  # pending members of a gang that partly runs
        left += [make_pod(f"late-{k}").cpu(4000).mem_mib(8 * GIB).gpus(1).gang(key.split("/")[1]).build()
                 for k in range(data.draw(st.integers(0, 2)))]
    after = after.with_pod_groups(groups)
    planned = [(NodeName(f"planned-{k:05d}-x"), data.draw(st.integers(0, len(tpls) - 1)))
               for k in range(data.draw(st.integers(0, 6)))]
    check = Check(after, left, tpls, prof, 0.0)
    assert check.incremental
    outcome = check.run(planned)
    same(outcome, full(after, done, planned, tpls, left, groups, prof))
    named = len(planned)
    for _ in range(3):
        # drop some nodes that got no pod, add some named after every node so far
        empty = [x for x in planned if x[0] not in outcome.first_use]
        gone = set(data.draw(st.lists(st.sampled_from(empty), unique=True))) if empty else set()
        count = data.draw(st.integers(0, 3))
        new = [(NodeName(f"planned-{k:05d}-y"), data.draw(st.integers(0, len(tpls) - 1)))
               for k in range(named, named + count)]
        named += count
        planned = [x for x in planned if x not in gone] + new
        outcome = check.rerun(outcome, planned)
        same(outcome, full(after, done, planned, tpls, left, groups, prof))


def test_a_change_that_cannot_matter_schedules_nothing_again() -> None:
    """While an empty node of a template is left, adding or dropping others of it changes nothing."""
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB)]
    left = [make_pod(f"p{k}").cpu(1000).gpus(1).created(float(k)).build() for k in range(3)]
    snap = ClusterSnapshot.build([])
    check = Check(snap, left, tpls, PROFILE, 0.0)
    planned = [(NodeName(f"planned-{k:05d}"), 0) for k in range(5)]
    first = check.run(planned)
    assert len(first.first_use) == 3 and first.scheduled == 3
    fewer = check.rerun(first, planned[:4])  # one of two empty nodes goes: the other is left
    assert fewer.scheduled == 3 and fewer.result.binds == first.result.binds
    more = check.rerun(fewer, planned[:4] + [(NodeName("planned-00009"), 0)])
    assert more.scheduled == 3
    last = check.rerun(more, planned[:3])  # the last empty node goes too: pods after the last first use
    assert last.scheduled == 3 and last.result.binds == first.result.binds


def test_dropping_empty_nodes_reuses_the_last_snapshot_and_binds_what_a_full_schedule_binds() -> None:
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB)]
    left = ([make_pod(f"g{k}").cpu(1000).gpus(1).created(float(k)).build() for k in range(3)]
            + [make_pod(f"c{k}").cpu(1000).created(10.0 + k).build() for k in range(2)])
    after = ClusterSnapshot.build([])
    check = Check(after, left, tpls, PROFILE, 0.0)
    planned = [(NodeName(f"planned-{k:05d}"), 0) for k in range(5)]
    first = check.run(planned)
    assert len(first.first_use) == 3  # the CPU-only pods go to the tighter used nodes, not the empty one
    kept = planned[:3]
    again = check.rerun(first, kept)  # from the first CPU-only pod: the empty node it saw is gone
    assert again.scheduled == first.scheduled + 2
    assert again.base is not None and first.base is not None and again.base.cluster is first.base.cluster
    same(again, full(after, [], kept, tpls, left, [], PROFILE))
    snap = again.base
    fresh = next(f for f in check.checking_profile(snap, kept).filters if isinstance(f, checking.FreshFirst))
    dropped = [snap.cluster.index[name] for name, _ in planned[3:]]
    mask = fresh.filter(CycleState(random.Random(0), 0.0), left[-1], checking._View(snap.cluster, snap.usage))
    assert sorted(fresh.hidden) == dropped and not mask[dropped].any() and mask[:3].all()


def test_a_drop_after_an_addition_that_changed_nothing_does_not_reuse_a_snapshot_without_the_added_node() -> None:
    tpls = [NodeTemplate(name, 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB)
            for name in ("a", "b")]
    left = ([make_pod(f"g{k}").cpu(1000).gpus(1).created(float(k)).build() for k in range(3)]
            + [make_pod(f"c{k}").cpu(1000).created(10.0 + k).build() for k in range(2)])
    after = ClusterSnapshot.build([])
    check = Check(after, left, tpls, PROFILE, 0.0)
    planned = [(NodeName(f"planned-{k:05d}"), 0) for k in range(5)] + [(NodeName("planned-00005"), 1)]
    first = check.run(planned)
    assert len(first.first_use) == 3
    grown = planned + [(NodeName("planned-00006"), 1)]
    more = check.rerun(first, grown)  # template b still has an empty node: nothing is scheduled again
    assert more.scheduled == first.scheduled
    kept = planned[:3] + grown[5:]  # template a's empty nodes go
    last = check.rerun(more, kept)
    same(last, full(after, [], kept, tpls, left, [], PROFILE))


def test_adding_a_template_without_fresh_nodes_reschedules_from_the_first_pod_it_fits() -> None:
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB),
            NodeTemplate("cpu", 16_000, 64 * GIB, 1.0)]
    left = ([make_pod(f"c{k}").cpu(1000).created(float(k)).build() for k in range(3)]
            + [make_pod(f"g{k}").cpu(1000).gpus(1).created(10.0 + k).build() for k in range(3)])
    check = Check(ClusterSnapshot.build([]), left, tpls, PROFILE, 0.0)
    planned = [(NodeName("planned-00000"), 1), (NodeName("planned-00001"), 0)]
    first = check.run(planned)
    assert len(first.result.unschedulable) == 2  # one GPU node for three GPU pods
    more = check.rerun(first, planned + [(NodeName("planned-00002"), 0), (NodeName("planned-00003"), 0)])
    assert more.scheduled == 6 + 2  # from the second GPU pod: the first one still took the old node
    assert not more.result.unschedulable


def test_a_new_node_that_sorts_before_others_means_a_full_run() -> None:
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB)]
    left = [make_pod(f"p{k}").cpu(1000).gpus(1).created(float(k)).build() for k in range(2)]
    check = Check(ClusterSnapshot.build([]), left, tpls, PROFILE, 0.0)
    first = check.run([(NodeName("planned-00005"), 0)])
    again = check.rerun(first, [(NodeName("planned-00005"), 0), (NodeName("planned-00001"), 0)])
    assert again.scheduled == 4 and not again.result.unschedulable


def test_profiles_with_other_plugins_check_in_full() -> None:
    assert all(node_local(p) for p in PROFILES.values()) and node_local(profile("fgd"))
    random_score = build_profile(ProfileSettings(scores=(ScoreRef("Random"),)))
    assert not node_local(random_score)
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB)]
    left = [make_pod(f"p{k}").cpu(1000).gpus(1).created(float(k)).build() for k in range(2)]
    empty = ClusterSnapshot.build([])
    for prof, incremental in ((random_score, True), (PROFILE, False)):
        check = Check(empty, left, tpls, prof, 0.0, incremental=incremental)
        first = check.run([(NodeName("planned-00000"), 0), (NodeName("planned-00001"), 0),
                           (NodeName("planned-00002"), 0)])
        kept = [(NodeName("planned-00000"), 0), (NodeName("planned-00001"), 0)]
        again = check.rerun(first, kept)
        assert not check.incremental and again.scheduled == 4
        same(again, full(empty, [], kept, tpls, left, [], prof))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_plain_loop_binds_what_the_queue_aware_loop_binds_without_queues(data: st.DataObject) -> None:
    after, _ = data.draw(current())
    pending, groups = data.draw(pods("p", 16))
    pending = [dataclasses.replace(p, queue=data.draw(st.sampled_from(("default", "team-a")))) for p in pending]
    snap = after.with_pod_groups(groups)
    queueing = data.draw(st.sampled_from((
        PROFILE.queueing,                                               # fair order with reclaim
        QueueingConfig(order="priority", reclaim=True),
        QueueingConfig(order="fair", usage_half_life_seconds=3600.0),
        QueueingConfig(order="fair", reclaim=True, starvation_bound_seconds=1e6))))   # no pod waits that long
    profile = dataclasses.replace(PROFILE, queueing=queueing)
    plain = dataclasses.replace(profile, queueing=QueueingConfig())
    assert plain.queueing != profile.queueing and plain_without_queues(profile.queueing, pending, 0.0)
    want = schedule(snap, pending, profile, now=0.0, rng=random.Random(0), queues=QueueContext())  # queue-aware
    assert schedule(snap, pending, plain, now=0.0, rng=random.Random(0)) == want
    assert schedule(snap, pending, profile, now=0.0, rng=random.Random(0)) == want  # the core's own shortcut


def _key(p: Plan) -> tuple[object, ...]:
    return (p.add, p.remove, p.fits_now, sorted(p.unplaceable), p.cost_per_hour_added)


@pytest.mark.parametrize("name", PROFILE_NAMES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_plan_is_the_same_with_every_check_in_full(name: str, data: st.DataObject) -> None:
    after, _ = data.draw(current())
    tpls = data.draw(templates(layouts=MIG_LAYOUTS, cpu_template=True))
    pending, groups = data.draw(pods("p", 24))
    snap = after.with_pod_groups(groups)
    fast = plan(pending, tpls, snap, profile=PROFILES[name])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checking, "node_local", lambda profile: False)
        slow = plan(pending, tpls, snap, profile=PROFILES[name])
    assert _key(fast) == _key(slow)


@pytest.mark.parametrize("name", PROFILE_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_showing_one_empty_node_per_template_changes_no_decision_and_no_reason(name: str,
                                                                              data: st.DataObject) -> None:
    after, _ = data.draw(current())
    tpls = data.draw(templates(layouts=MIG_LAYOUTS, cpu_template=True))
    left, groups = data.draw(pods("p", 16))
    after = after.with_pod_groups(groups)
    planned = [(NodeName(f"planned-{k:05d}"), data.draw(st.integers(0, min(2, len(tpls) - 1))))
               for k in range(data.draw(st.integers(0, 10)))]
    check = Check(after, left, tpls, PROFILES[name], 0.0)
    snap = check.snapshot(planned)
    hiding = check.checking_profile(snap, planned)
    assert any(isinstance(f, checking.FreshFirst) for f in hiding.filters)
    want = schedule(snap, left, check.profile, now=0.0, rng=random.Random(0))
    assert schedule(snap, left, hiding, now=0.0, rng=random.Random(0)) == want  # reasons included


def test_only_the_lowest_named_empty_node_of_a_template_passes_until_it_gets_a_pod() -> None:
    tpls = [NodeTemplate("h1", 16_000, 64 * GIB, 1.0, gpu_model="H100-80GB", gpus=1, gpu_mem_mib=80 * GIB),
            NodeTemplate("cpu", 16_000, 64 * GIB, 1.0)]
    left = [make_pod("g0").cpu(1000).gpus(1).build()]
    check = Check(ClusterSnapshot.build([]), left, tpls, PROFILE, 0.0)
    planned = [(NodeName(f"planned-{k:05d}"), k % 2) for k in range(5)]  # h1: 0, 2, 4; cpu: 1, 3
    snap = check.snapshot(planned)
    fresh = next(f for f in check.checking_profile(snap, planned).filters if isinstance(f, checking.FreshFirst))
    state = CycleState(random.Random(0), 0.0)
    view = View(snap.cluster, snap.usage.copy())
    assert fresh.filter(state, left[0], view).tolist() == [True, True, False, False, False]
    placed = Placement(left[0].uid, NodeName("planned-00000"), 1000, 0, (0,), 1000, 80 * GIB)
    view.usage.place(placed, 0)
    fresh.reserve(state, left[0], view, 0)
    assert fresh.filter(state, left[0], view).tolist() == [True, True, True, False, False]
    view.usage.place(placed, 0, sign=-1)  # a gang rolled back: node 0 is empty again and passes instead of node 2
    fresh.unreserve(state, left[0], view, 0)
    assert fresh.filter(state, left[0], view).tolist() == [True, True, False, False, False]
