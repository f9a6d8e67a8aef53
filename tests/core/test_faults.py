"""core.faults: who is evicted by a device or node fault, quarantine, restore, and RecentFaults."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gpufleet.core.cycle import schedule
from gpufleet.core.faults import DeviceFault, NodeFault, quarantine, restore, victims
from gpufleet.framework.profile import ProfileError, ProfileSettings, ScoreRef, build_profile, parse_args
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.plugins.recent_faults import RecentFaults, RecentFaultsArgs
from gpufleet.model import ClusterSnapshot, ModelError, NodeName, Placement, PodGroup, PodUid
from gpufleet.testing import make_node, make_pod


def _hold(pod: str, node: str, gpus: tuple[int, ...] = (), milli: int = 1000, group: str | None = None,
          slices: tuple[int, ...] = ()) -> Placement:
    return Placement(PodUid(f"default/{pod}"), NodeName(node), 0, 0, gpus, milli if gpus else 0, 0, slices, group)


@pytest.fixture
def snap() -> ClusterSnapshot:
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).build(),
             make_node("m").gpus(2).mig(1, "3g.40gb", "1g.10gb", "1g.10gb").build()]
    running = [_hold("g0", "a", (0,), group="default/g"), _hold("g1", "b", (0,), group="default/g"),
               _hold("frac", "a", (1,), milli=500), _hold("other", "a", (2,)), _hold("solo", "b", (1,)),
               _hold("s0", "m", slices=(0,)), _hold("s1", "m", slices=(2,)), _hold("w", "m", (0,))]
    groups = [PodGroup("g", min_member=2)]
    return ClusterSnapshot.build(nodes, running, groups)


def _uids(evictions: tuple[object, ...]) -> list[str]:
    return [e.pod.split("/")[1] for e in evictions]  # type: ignore[attr-defined]


def test_a_device_fault_evicts_the_pods_on_that_device_and_their_whole_gang(snap: ClusterSnapshot) -> None:
    out = victims(snap, DeviceFault(NodeName("a"), 0, "XID 79"))
    assert _uids(out) == ["g0", "g1"]
    assert "GPU 0 on node a failed: XID 79" in out[0].reason
    assert "pod group default/g" in out[1].reason
    assert _uids(victims(snap, DeviceFault(NodeName("a"), 1, "XID 48"))) == ["frac"]
    assert _uids(victims(snap, DeviceFault(NodeName("a"), 3, "XID 48"))) == []


def test_a_pod_already_leaving_the_failed_device_does_not_pull_in_its_gang(snap: ClusterSnapshot) -> None:
    """A pod evicted from a node whose kubelet is gone stays, being deleted; the members started in
    its gang's place are not victims of its loss, while a leaving mate is not asked again."""
    fault = DeviceFault(NodeName("a"), 0, "XID 79")
    (g0, g1) = [e.pod for e in victims(snap, fault)]
    assert victims(snap, fault, frozenset({g0})) == ()
    assert _uids(victims(snap, fault, frozenset({g1}))) == ["g0"]


def test_a_device_fault_on_a_mig_gpu_evicts_the_pods_on_its_slices(snap: ClusterSnapshot) -> None:
    assert _uids(victims(snap, DeviceFault(NodeName("m"), 1, "XID 94"))) == ["s0", "s1"]
    assert _uids(victims(snap, DeviceFault(NodeName("m"), 0, "XID 94"))) == ["w"]


def test_a_node_fault_evicts_everything_on_the_node_and_the_gangs_elsewhere(snap: ClusterSnapshot) -> None:
    assert _uids(victims(snap, NodeFault(NodeName("b"), "NotReady"))) == ["g1", "solo", "g0"]


def test_quarantine_takes_only_the_device_out_and_restore_brings_it_back(snap: ClusterSnapshot) -> None:
    fault = DeviceFault(NodeName("a"), 3, "XID 79")
    out = quarantine(snap, fault, now=50.0)
    i = out.cluster.index[NodeName("a")]
    assert not out.usage.gpu_healthy[i, 3] and out.usage.free_whole[i] == 0
    assert out.usage.fault_at[i] == 50.0 and out.usage.node_ready[i]
    assert snap.usage.gpu_healthy[i, 3] and snap.usage.free_whole[i] == 1, "the input snapshot is untouched"
    pod = make_pod("p").gpus(1).build()
    profile = build_profile(ProfileSettings())
    result = schedule(out, [pod], profile, now=60.0, rng=random.Random(0))
    assert [p.node for p in result.binds] == ["b"], "a's only free GPU is quarantined"
    back = restore(out, fault)
    assert back.usage.gpu_healthy[i, 3] and back.usage.free_whole[i] == 1 and back.usage.fault_at[i] == 50.0


def test_a_node_fault_keeps_every_pod_off_the_node_until_restored() -> None:
    snap = ClusterSnapshot.build([make_node("a").gpus(2).build()])
    down = quarantine(snap, NodeFault(NodeName("a"), "NotReady"), now=0.0)
    profile = build_profile(ProfileSettings())
    pods = [make_pod("cpu").cpu(100).build(), make_pod("gpu").gpus(1).build()]
    result = schedule(down, pods, profile, now=1.0, rng=random.Random(0))
    assert result.binds == ()
    assert "1 node(s) were not ready" in result.unschedulable[PodUid("default/cpu")].message
    assert down.usage.usable_gpus[0] == 0 and not down.usage.usable().any()
    up = restore(down, NodeFault(NodeName("a"), "repaired"))
    assert len(schedule(up, pods, profile, now=2.0, rng=random.Random(0)).binds) == 2


def test_faults_on_unknown_capacity_are_clear_errors(snap: ClusterSnapshot) -> None:
    with pytest.raises(ModelError, match="no such node"):
        victims(snap, NodeFault(NodeName("zz"), "x"))
    with pytest.raises(ModelError, match="GPU index 7 does not exist"):
        quarantine(snap, DeviceFault(NodeName("a"), 7, "x"), now=0.0)


def test_recent_faults_scores_a_node_down_and_forgets_it_over_half_lives() -> None:
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).build()]
    snap = quarantine(ClusterSnapshot.build(nodes), NodeFault(NodeName("a"), "x"), now=0.0)
    snap = restore(snap, NodeFault(NodeName("a"), "x"))
    profile = build_profile(ProfileSettings(scores=(ScoreRef("RecentFaults"),)))
    pod = make_pod("p").gpus(1).build()
    soon = schedule(snap, [pod], profile, now=60.0, rng=random.Random(0))
    assert [p.node for p in soon.binds] == ["b"], "a failed a minute ago; without the score a wins by name"
    plugin = RecentFaults(RecentFaultsArgs())
    at_half = plugin.score(CycleState(random.Random(0), 6 * 3600.0), pod, snap, np.array([0, 1]))
    assert at_half.tolist() == pytest.approx([0.5, 1.0])


def test_recent_faults_args_are_validated() -> None:
    assert parse_args(RecentFaultsArgs, {"halfLifeSeconds": 60}, "x").half_life_seconds == 60.0
    with pytest.raises(ProfileError, match="halfLifeSeconds must be a positive"):
        parse_args(RecentFaultsArgs, {"halfLifeSeconds": 0}, "profiles[0].pluginConfig[0].args")


def test_recent_faults_scores_a_clean_cluster_all_alike() -> None:
    snap = ClusterSnapshot.build([make_node("a").gpus(1).build(), make_node("b").gpus(1).build()])
    plugin = RecentFaults(RecentFaultsArgs())
    state = CycleState(random.Random(0), 100.0)
    pod = make_pod("p").gpus(1).build()
    assert plugin.score(state, pod, snap, np.array([1, 0])).tolist() == [1.0, 1.0]
    assert plugin.uniform(state, pod, snap), "the core leaves it out of the sum"
    faulted = quarantine(snap, NodeFault(NodeName("b"), "x"), now=100.0)
    fresh = CycleState(random.Random(0), 100.0)
    assert plugin.score(fresh, pod, faulted, np.array([1, 0])).tolist() == [0.0, 1.0]
    assert not plugin.uniform(fresh, pod, faulted)


def test_fault_errors_name_the_fault_and_the_problem(snap: ClusterSnapshot) -> None:
    with pytest.raises(ModelError) as unknown:
        victims(snap, NodeFault(NodeName("zz"), "x"))
    assert str(unknown.value) == "fault on node 'zz': no such node in the snapshot"
    with pytest.raises(ModelError) as device:
        restore(snap, DeviceFault(NodeName("a"), 9, "x"))
    assert str(device.value) == "fault on node a: GPU index 9 does not exist (4 GPUs)"


@pytest.mark.parametrize("gpu", [-1, 4])
def test_a_device_fault_just_outside_the_nodes_gpus_is_an_error(snap: ClusterSnapshot, gpu: int) -> None:
    fault = DeviceFault(NodeName("a"), gpu, "x")
    for call in (lambda: victims(snap, fault), lambda: quarantine(snap, fault, now=0.0),
                 lambda: restore(snap, fault)):
        with pytest.raises(ModelError, match=f"GPU index {gpu} does not exist"):
            call()


def test_a_device_fault_finds_the_pods_on_the_slices_of_each_mig_gpu() -> None:
    """Slices are numbered across the cluster: a node's slices are found from where its own start."""
    nodes = [make_node("m").gpus(2).mig(0, "3g.40gb", "3g.40gb").mig(1, "3g.40gb", "3g.40gb").build(),
             make_node("k").gpus(2).mig(0, "3g.40gb", "3g.40gb").mig(1, "3g.40gb", "3g.40gb").build()]
    running = [_hold(f"{node}{s}", node, slices=(s,)) for node in ("m", "k") for s in range(4)]
    snap = ClusterSnapshot.build(nodes, running)
    for node in ("m", "k"):
        assert _uids(victims(snap, DeviceFault(NodeName(node), 0, "XID 94"))) == [f"{node}0", f"{node}1"]
        assert _uids(victims(snap, DeviceFault(NodeName(node), 1, "XID 94"))) == [f"{node}2", f"{node}3"]


def test_quarantine_and_restore_touch_only_the_faulted_device_and_keep_pods_and_gangs(snap: ClusterSnapshot) -> None:
    a = snap.cluster.index[NodeName("a")]
    first, second = DeviceFault(NodeName("a"), 3, "XID 79"), DeviceFault(NodeName("a"), 2, "XID 79")
    down = quarantine(quarantine(snap, first, now=10.0), second, now=20.0)
    assert down.usage.gpu_healthy[a].tolist() == [True, True, False, False]
    back = restore(down, first)
    assert back.usage.gpu_healthy[a].tolist() == [True, True, False, True], "GPU 2 is still faulted"
    for out in (down, back):
        assert out.placements == snap.placements, "pods on the failed capacity stay until evicted"
        assert out.pod_groups == snap.pod_groups
    node_down = quarantine(snap, NodeFault(NodeName("b"), "NotReady"), now=5.0)
    assert node_down.placements == snap.placements and node_down.pod_groups == snap.pod_groups
    node_up = restore(node_down, NodeFault(NodeName("b"), "repaired"))
    assert node_up.placements == snap.placements and node_up.pod_groups == snap.pod_groups
