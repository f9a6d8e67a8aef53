"""Live fault handling: failed GPUs and NotReady nodes take no new pods at once; after a grace
period their pods and every gang mate are evicted (once per episode), and placement resumes
when they recover.

These tests drive the `FaultFollower` directly with node objects and a virtual clock; the
scheduler against the real control plane, with GPUs failing and kubelets dying, is in
tests/live/test_faults_live.py.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from typing import Any

import pytest

from gpufleet.core.faults import DeviceFault, NodeFault
from gpufleet.kube import translate
from gpufleet.kube.faults import FaultFollower, FaultSettings
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodGroup, PodUid
from gpufleet.model import annotations as ann
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

P5 = next(s for s in SHAPES if s.name == "p5.48xlarge")


def node(name: str, index: int = 0) -> dict[str, Any]:
    return gpu_node(name, P5, random.Random(index), index=index)


def unhealthy(obj: dict[str, Any], gpu: int, fault: str = "xid-79") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    a = obj["metadata"]["annotations"]
    gpus = list(ann.decode_inventory(a[ann.INVENTORY_ANNOTATION]))
    gpus[gpu] = dataclasses.replace(gpus[gpu], healthy=False)
    a[ann.INVENTORY_ANNOTATION] = ann.encode_inventory(tuple(gpus))
    obj["spec"]["taints"] = [{"key": f"unhealthy.gpufleet.io/{gpus[gpu].uuid}", "value": fault,
                              "effect": "PreferNoSchedule"}]
    return obj


def not_ready(obj: dict[str, Any], since: str = "") -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for c in obj["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", reason="KubeletNotReady", lastTransitionTime=since or c["lastTransitionTime"])
    return obj


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def snapshot(nodes: list[dict[str, Any]], running: list[Placement]) -> ClusterSnapshot:
    return ClusterSnapshot.build([translate.node_info(n) for n in nodes], running,
                                 [PodGroup("g", 2, "ns")])


def on(pod_name: str, node_name: str, gpu: int, group: str | None = None) -> Placement:
    return Placement(PodUid(pod_name), NodeName(node_name), 1000, 1024, (gpu,), 1000, 81559, pod_group=group)


# -- the follower, on virtual time ----------------------------------------------------------

def test_a_failed_gpu_evicts_its_pod_and_the_gang_once_the_grace_period_is_over() -> None:
    clock = Clock()
    follower = FaultFollower(FaultSettings(device_grace_s=30), clock=clock, wall=lambda: 5e9 + clock.now)
    a, b = node("a", 1), node("b", 2)
    running = [on("m0", "a", 3, "ns/g"), on("m1", "b", 0, "ns/g"), on("alone", "a", 4), on("other", "b", 1)]
    assert follower.upsert_node(unhealthy(a, 3)) is True  # an episode started: the scheduler is woken
    snap = snapshot([unhealthy(a, 3), b], running)
    assert follower.due(snap) == []  # within the grace period
    assert follower.next_deadline() == pytest.approx(1030.0)
    clock.now += 30
    (action,) = follower.due(snap)
    assert isinstance(action.fault, DeviceFault) and (action.fault.node, action.fault.gpu) == ("a", 3)
    assert [e.pod for e in action.evictions] == ["m0", "m1"]  # the pod on the GPU, then its gang mate
    assert "xid-79" in action.evictions[0].reason and "pod group ns/g" in action.evictions[1].reason
    assert action.first and action.new == action.evictions
    clock.now += 10  # a later cycle while the victims are still leaving: asked again, not announced again
    (again,) = follower.due(snap)
    assert not again.first and again.new == () and [e.pod for e in again.evictions] == ["m0", "m1"]
    assert follower.due(snap, terminating=frozenset({PodUid("m0"), PodUid("m1")})) == []
    assert follower.next_deadline() is None


def test_a_gpu_that_recovers_within_the_grace_period_evicts_nothing_and_a_new_fault_is_a_new_episode() -> None:
    clock = Clock()
    follower = FaultFollower(FaultSettings(device_grace_s=30), clock=clock)
    a = node("a", 1)
    follower.upsert_node(unhealthy(a, 0))
    clock.now += 20
    assert follower.upsert_node(a) is True  # healthy again: the episode ends
    clock.now += 20
    snap = snapshot([a], [on("p", "a", 0)])
    assert follower.due(snap) == [] and follower.episodes() == []
    follower.upsert_node(unhealthy(a, 0))
    clock.now += 30
    assert [e.pod for a_ in follower.due(snapshot([unhealthy(a, 0)], [on("p", "a", 0)])) for e in a_.evictions] == ["p"]


def test_a_not_ready_node_is_quarantined_at_once_and_evicted_after_its_grace_period() -> None:
    clock = Clock()
    wall = 1_800_000_000.0
    follower = FaultFollower(FaultSettings(node_grace_s=300), clock=clock, wall=lambda: wall + clock.now - 1000)
    a, b = node("a", 1), node("b", 2)
    # NotReady for 200 s already when the scheduler first sees it (say, after a restart)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall - 200))
    follower.upsert_node(not_ready(a, since))
    running = [on("m0", "a", 0, "ns/g"), on("m1", "b", 0, "ns/g")]
    snap = follower.apply(snapshot([a, b], running))
    i = snap.cluster.index[NodeName("a")]
    assert not snap.usage.node_ready[i] and snap.usage.free_whole[i] == 0  # no new pods go there
    assert snap.usage.fault_at[i] == pytest.approx(wall - 200)
    assert follower.next_deadline() == pytest.approx(1100.0)  # 300 s after the transition, not after first sight
    clock.now += 100
    (action,) = follower.due(snap)
    assert isinstance(action.fault, NodeFault) and "NotReady" in action.fault.reason
    assert [e.pod for e in action.evictions] == ["m0", "m1"]
    follower.upsert_node(a)  # Ready again
    back = follower.apply(snapshot([a, b], []))
    assert back.usage.node_ready.all() and back.usage.fault_at[i] == pytest.approx(wall - 200)  # RecentFaults remembers


def test_the_node_controller_taints_count_as_not_ready_and_eviction_can_be_switched_off() -> None:
    clock = Clock()
    follower = FaultFollower(FaultSettings(node_grace_s=0, evict=False), clock=clock)
    a = node("a", 1)
    a["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]
    follower.upsert_node(a)
    (ep,) = follower.episodes()
    assert ep.kind == "node" and "unreachable" in ep.reason
    snap = follower.apply(snapshot([a], [on("p", "a", 0)]))
    assert not snap.usage.node_ready.any()
    assert follower.due(snap) == [] and follower.next_deadline() is None
