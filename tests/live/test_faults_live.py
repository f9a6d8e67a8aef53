"""Fault handling on the real control plane: a failed GPU and a node whose kubelet died take no
new pods at once; after a grace period their pods and every gang mate are evicted through the
Eviction API (once per episode), and placement resumes when they recover.

The scheduler runs in process with the `gpufleet-scheduler` ServiceAccount's kubeconfig. GPU
faults are written as the node agent writes them, with the `gpufleet-agent` ServiceAccount; a
dead kubelet is KWOK no longer playing the node, which kube-controller-manager's node-lifecycle
controller marks Unknown and taints once the node's lease has not been renewed for 20 s. Gangs
are Indexed Jobs, so kube-controller-manager's Job controller recreates evicted members.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.kube import events as events_api
from gpufleet.kube.faults import FaultSettings
from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from .cluster_kit import (SCHEDULER_SA, Obj, agent_kubeconfig, install_gpufleet, scheduler_in_process,
                          scheduler_kubeconfig, service_account_user, successful_bindings, wait_for)
from .node_faults import UNREACHABLE, lifecycle_taints, ready, set_gpu_health, start_kubelet, stop_kubelet

P5 = next(s for s in SHAPES if s.name == "p5.48xlarge")
SCHEDULER_USER = service_account_user(SCHEDULER_SA)
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


class Kubeconfigs:
    def __init__(self, c: Cluster, tmp_path: Path) -> None:
        self.scheduler = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        self.agent = agent_kubeconfig(c, tmp_path / "agent.kubeconfig")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Kubeconfigs]]:
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        yield c, Kubeconfigs(c, tmp_path)


def add_nodes(c: Cluster, names: str) -> None:
    """p5.48xlarge nodes (8 H100s each), once KWOK has them Ready and the node-lifecycle controller
    has lifted the not-ready taint that admission puts on every new node."""
    for k, name in enumerate(names):
        c.admin.create(gpu_node(name, P5, random.Random(k + 1), index=k + 1))
    wait_for(lambda: all(ready(n) == "True" and not lifecycle_taints(n) for n in c.admin.list("nodes")
                         if n["metadata"]["name"] in names), 60, f"nodes {', '.join(names)} Ready")


def pod_spec(gpus: int) -> Obj:
    return {"schedulerName": "gpufleet",
            "containers": [{"name": "c", "image": "train", "resources": {"limits": {"nvidia.com/gpu": gpus},
                                                                         "requests": {"cpu": "1", "memory": "1Gi"}}}]}


def pod(name: str, gpus: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": {"app": "test"}}, "spec": pod_spec(gpus)}


def gang(name: str, members: int, gpus: int) -> list[Obj]:
    """A PodGroup and an Indexed Job whose pods are its members: the Job controller recreates a
    member that is evicted (under a new name, with the same completion index)."""
    template = {"metadata": {"labels": {"app": "test", "scheduling.x-k8s.io/pod-group": name}},
                "spec": {**pod_spec(gpus), "restartPolicy": "Never"}}
    return [{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": members}},
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
             "spec": {"completionMode": "Indexed", "completions": members, "parallelism": members,
                      "backoffLimit": 20, "template": template}}]


def pods(c: Cluster) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in c.admin.list("pods", "default")}


def bound(c: Cluster) -> dict[str, Obj]:
    """Pods placed on a node and not being deleted."""
    return {n: p for n, p in pods(c).items()
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


def members(ps: dict[str, Obj]) -> dict[str, int]:
    """Gang member pod -> its completion index."""
    return {n: int(p["metadata"]["labels"][INDEX_LABEL]) for n, p in ps.items()
            if INDEX_LABEL in p["metadata"]["labels"]}


def condition(p: Obj) -> Obj:
    return next((c for c in (p.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"), {})


def assignment(p: Obj) -> ann.GpuAssignment | None:
    text = (p["metadata"].get("annotations") or {}).get(ann.ASSIGNMENT_ANNOTATION)
    return ann.decode_assignment(text) if text else None


def evictions(c: Cluster) -> list[str]:
    """The pods the scheduler evicted (successful Eviction API calls, from the audit log), in order."""
    return [r.name for r in c.iter_audit() if r.user == SCHEDULER_USER and r.resource == "pods"
            and r.subresource == "eviction" and r.verb == "create" and 200 <= r.code < 300]


def events(c: Cluster, reason: str) -> dict[str, str]:
    """Pod name -> the message of the scheduler's event with this reason about it (kube-controller-manager's
    node-lifecycle controller writes NodeNotReady events of its own)."""
    return {e["involvedObject"]["name"]: e.get("message", "") for e in c.admin.list("events", "default")
            if e.get("reason") == reason and e.get("reportingComponent") == events_api.CONTROLLER}


def test_no_pod_is_bound_to_an_unhealthy_gpu_and_placement_resumes_when_it_recovers(cluster: Any) -> None:
    c, kc = cluster
    add_nodes(c, "a")
    bad = set_gpu_health(c, kc.agent, "a", 3, False)
    node = c.admin.get("nodes", "a")
    assert node is not None and f"unhealthy.gpufleet.io/{bad}" in {t["key"] for t in node["spec"]["taints"]}
    with scheduler_in_process(kc.scheduler):
        c.admin.create_all(pod(f"p{k}", 1) for k in range(8))
        wait_for(lambda: len(bound(c)) == 7 and any(condition(p).get("reason") == "Unschedulable"
                                                    for p in pods(c).values()), 60, "7 pods bound, 1 waiting")
        (waiting,) = [p for p in pods(c).values() if not p["spec"].get("nodeName")]
        assert "Insufficient" in condition(waiting)["message"]
        set_gpu_health(c, kc.agent, "a", 3, True)
        wait_for(lambda: len(bound(c)) == 8, 60, "the 8th pod bound once the GPU is healthy")
    placed = {n: assignment(p) for n, p in pods(c).items()}
    first = [a.gpus for n, a in placed.items() if a is not None and n != waiting["metadata"]["name"]]
    assert len(first) == 7 and [g for g in first if bad in g] == []
    late = placed[waiting["metadata"]["name"]]
    assert late is not None and late.gpus == (bad,)
    assert set(successful_bindings(c).values()) == {1} and len(successful_bindings(c)) == 8


def test_a_failed_gpu_evicts_the_gang_which_its_job_controller_restarts_elsewhere(cluster: Any) -> None:
    c, kc = cluster
    add_nodes(c, "abcd")
    with scheduler_in_process(kc.scheduler, faults=FaultSettings(device_grace_s=0.5)) as svc:
        c.admin.create_all(gang("g", 2, 8))
        c.admin.create(pod("other", 8))
        wait_for(lambda: len(bound(c)) == 3, 60, "the gang and the other pod bound")
        first = members(bound(c))
        victim = next(n for n, i in first.items() if i == 0)
        failed_node = bound(c)[victim]["spec"]["nodeName"]
        other_node = bound(c)["other"]["spec"]["nodeName"]
        uuid = set_gpu_health(c, kc.agent, failed_node, 5, False)
        started = time.monotonic()
        wait_for(lambda: set(evictions(c)) == set(first), 60, "both gang members evicted")
        latency = time.monotonic() - started
        wait_for(lambda: len(members(bound(c))) == 2 and not set(members(bound(c))) & set(first), 120,
                 "the restarted gang bound again")
        now = bound(c)
        restarted = members(now)
        assert sorted(restarted.values()) == [0, 1]  # the Job controller's replacements, one per index
        assert now["other"]["spec"]["nodeName"] == other_node  # not in the gang: untouched
        assert failed_node not in {now[n]["spec"]["nodeName"] for n in restarted}
        assert all(uuid not in (assignment(now[n]) or ann.GpuAssignment("")).gpus for n in restarted)
        wait_for(lambda: svc.metrics.fault_evictions.labels("device")._value.get() == 2, 10, "the metric")
    assert sorted(evictions(c)) == sorted(first), "each member evicted once"
    notes = events(c, "GpuFault")
    mate = next(n for n in first if n != victim)
    assert set(notes) == set(first) and uuid in notes[victim] and "pod group default/g" in notes[mate]
    assert events(c, "Preempted") == {}, "a fault victim gets its fault's event, not a preemption's"
    print(f"gang evicted {latency:.2f} s after the GPU failed (grace 0.5 s)")


def test_a_node_whose_kubelet_died_takes_no_new_pods_and_its_gang_is_evicted_after_the_grace_period(
        cluster: Any) -> None:
    c, kc = cluster
    add_nodes(c, "abc")
    with scheduler_in_process(kc.scheduler, faults=FaultSettings(node_grace_s=1.0)):
        c.admin.create_all(gang("g", 2, 8))
        wait_for(lambda: len(bound(c)) == 2, 60, "the gang bound")
        first = members(bound(c))
        lost = next(p["spec"]["nodeName"] for n, p in bound(c).items() if first[n] == 0)
        stop_kubelet(c, lost)
        noticed = wait_for(lambda: set(evictions(c)) == set(first), 120, "the gang evicted")
        node = c.admin.get("nodes", lost)
        assert node is not None and ready(node) == "Unknown" and f"{UNREACHABLE}:NoSchedule" in lifecycle_taints(node)
        wait_for(lambda: len(members(bound(c))) == 2 and not set(members(bound(c))) & set(first), 120,
                 "the restarted gang bound again")
        on_lost = [n for n, p in pods(c).items() if p["spec"].get("nodeName") == lost]
        assert set(on_lost) <= set(first), "nothing new bound to the node whose kubelet died"
        start_kubelet(c, lost)
        wait_for(lambda: ready(c.admin.get("nodes", lost) or {}) == "True"
                 and not lifecycle_taints(c.admin.get("nodes", lost) or {}), 90, "the node Ready again")
        c.admin.create(pod("late", 8))
        wait_for(lambda: "late" in bound(c), 90, "a pod placed on the node back in service")
        assert bound(c)["late"]["spec"]["nodeName"] == lost
    assert sorted(evictions(c)) == sorted(first), "each member evicted once"
    assert set(events(c, "NodeNotReady")) == set(first)
    print(f"gang evicted {noticed:.1f} s after the kubelet stopped (node-monitor grace 20 s, scheduler grace 1 s)")
