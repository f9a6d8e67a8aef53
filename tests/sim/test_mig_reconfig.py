"""Demand-driven MIG in the replay (sim/mig_reconfig.py): changes after a delay, in-use instances kept,
placements remapped, the unallocated-slices meter."""

from __future__ import annotations

import pytest

from gpufleet.framework.profile import build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid
from gpufleet.model.mig_placement import MigInstance
from gpufleet.sim.mig_reconfig import MigMeter, MigReconfigurer
from gpufleet.sim.replay import ReplayResult, replay
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod

PROFILE = build_profile(builtin("bestfit"))

DELAY = 30.0
BALANCED = ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
"""mig-parted's all-balanced for 80 GB A100/H100."""


def _workload(*jobs: tuple[str, str, float, float]) -> Workload:
    """One H100 node with one GPU carved as mig-parted's balanced layout; jobs (name, profile, arrival, duration)."""
    node = make_node("n0").gpus(1).mig(0, *BALANCED).build()
    return Workload("t", (node,), tuple(Job((make_pod(n).mig(p).created(t).build(),), t, d) for n, p, t, d in jobs))


def _run(workload: Workload, plan: bool) -> tuple[ReplayResult, MigReconfigurer]:
    arrivals = [j.arrival_s for j in workload.jobs]
    reconf = MigReconfigurer(workload.nodes, (min(arrivals), max(arrivals) + 1000), plan=plan, delay_s=DELAY)
    return replay(workload, build_profile(builtin("bestfit")), 0, mig=reconf), reconf


def test_a_4g_request_is_carved_from_the_idle_instances_beside_a_running_3g_after_the_delay() -> None:
    w = _workload(("train", "3g.40gb", 0.0, 1000.0), ("big", "4g.40gb", 10.0, 100.0))
    result, reconf = _run(w, plan=True)
    assert [(e, i) for t, e, i in result.trace if e != "arrive"] == [("start", 0), ("start", 1), ("finish", 1),
                                                                      ("finish", 0)]
    assert result.records[1].start_s == 10.0 + DELAY
    assert result.records[0].start_s == 0.0 and result.records[0].end_s == 1000.0  # never interrupted
    assert reconf.reconfigurations == 1
    assert reconf.placed[(NodeName("n0"), 0)] == (MigInstance(0, "4g.40gb"), MigInstance(4, "3g.40gb"))


def test_a_static_layout_never_changes_and_the_4g_request_waits() -> None:
    w = _workload(("train", "3g.40gb", 0.0, 1000.0), ("big", "4g.40gb", 10.0, 100.0))
    result, reconf = _run(w, plan=False)
    assert result.records[1].start_s is None and reconf.reconfigurations == 0


def test_a_request_that_only_a_busy_instance_could_make_room_for_waits_for_it_to_finish() -> None:
    w = _workload(("small", "1g.10gb", 0.0, 500.0), ("whole", "7g.80gb", 10.0, 100.0))
    result, reconf = _run(w, plan=True)
    assert result.records[0].end_s == 500.0
    assert result.records[1].start_s == 500.0 + DELAY  # planned only once the 1g was free
    assert reconf.reconfigurations == 1


def test_a_running_pods_slice_index_follows_its_instance_through_a_relayout() -> None:
    node = make_node("n0").gpus(2).mig(0, *BALANCED).mig(1, *BALANCED).build()
    reconf = MigReconfigurer([node], (0.0, 1.0), plan=True, delay_s=DELAY)
    # GPU 1's 3g.40gb@4 is the node's 8th instance (4 on GPU 0, then 2g@0, 1g@2, 1g@3, 3g@4)
    held = Placement(PodUid("p"), NodeName("n0"), mig_slices=(7,))
    snap = ClusterSnapshot.build([node], [held]).owned()
    pending = [make_pod("q").mig("4g.40gb").build(), make_pod("r").mig("4g.40gb").build()]
    change = reconf.step(0.0, snap, pending, PROFILE)
    assert change is not None and len(change.ready) == 2
    (moved,) = change.placements
    gpus = change.nodes[0].gpus
    assert gpus[1].mig_slices == ("3g.40gb",) and gpus[0].mig_slices == ("3g.40gb",) and gpus[0].mig_enabled
    assert moved.mig_slices == (1,)  # GPU 0 keeps only its 3g, so GPU 1's 3g is now the 2nd instance


def test_the_meter_counts_idle_slices_only_while_a_request_is_pending_and_inside_the_window() -> None:
    meter = MigMeter((10.0, 110.0), slices=14)
    meter.advance(0.0, 14, 1)   # before the window: not counted
    meter.advance(20.0, 7, 0)   # 10-20: 14 idle, pending
    meter.advance(60.0, 7, 2)   # 20-60: 7 idle, nothing pending
    meter.advance(200.0, 0, 0)  # 60-110: 7 idle, pending (the rest is past the window)
    assert meter.idle_while_pending_s == 14 * 10 + 7 * 50
    assert meter.unallocated_pct() == pytest.approx(100 * (140 + 350) / (14 * 100))
    assert meter.allocated_pct() == pytest.approx(100 * (0 * 10 + 7 * 40 + 7 * 50) / (14 * 100))


def test_in_use_flags_follow_the_listed_order_of_the_gpus_instances_not_their_starts() -> None:
    # listed 1g, 1g, 2g, 3g; placed 2g@0, 1g@2, 1g@3, 3g@4: slice 0 is a 1g, not the 2g at slot 0
    node = make_node("n0").gpus(1).mig(0, *BALANCED).build()
    reconf = MigReconfigurer([node], (0.0, 1.0), plan=True, delay_s=DELAY)
    held = Placement(PodUid("p"), NodeName("n0"), mig_slices=(0,))
    snap = ClusterSnapshot.build([node], [held]).owned()
    change = reconf.step(0.0, snap, [make_pod("q").mig("2g.20gb").build(), make_pod("r").mig("2g.20gb").build()], PROFILE)
    assert change is not None
    (moved,) = change.placements
    assert change.nodes[0].gpus[0].mig_slices[moved.mig_slices[0]] == "1g.10gb"  # the pod still holds a 1g
    assert reconf.placed[(NodeName("n0"), 0)][moved.mig_slices[0]] == MigInstance(2, "1g.10gb")
