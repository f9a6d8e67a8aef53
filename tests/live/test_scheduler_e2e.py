"""End to end on the real control plane: etcd, kube-apiserver, kube-controller-manager and KWOK
with 200 GPU nodes, and `gpufleet scheduler` as a process with the ServiceAccount and RBAC of
`deploy/` (not as admin: kube-apiserver enforces every rule).

Each test reads the outcome back from the API objects themselves (`gpufleet.testing.workload`):
assignments that match their nodes and requests, no device overcommitted, a reason on every
pod left pending, and no pending pod that one more cycle could still place. Bindings are
counted from kube-apiserver's audit log, so "bound twice" means the server accepted two.

The scheduler runs unthrottled (`--qps 0`) here to keep the suite fast; the 50-QPS budget is
measured by `bench/e2e.py`. Leader election runs with kube-scheduler's default lease settings
(15 s / 10 s / 2 s), so the failover test waits out a real 15 s lease.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.kube import translate
from gpufleet.testing import workload
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import (NAMESPACE, PROFILE, Scheduler, bound, clean_env, create_all, gpufleet_pods, install_gpufleet,
                          scheduler_kubeconfig, successful_bindings, try_create, wait_for)

NODES = 200
LEASE = ("--leader-elect",)
"""kube-scheduler's defaults: 15 s lease, 10 s renew deadline, 2 s retry period; the Lease in gpufleet-system."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path, list[dict[str, Any]]]]:
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        nodes = gpu_nodes(NODES, seed=7)
        create_all(c.admin, nodes)
        c.admin.create_all(workload.queue_manifests() + workload.priority_class_manifests())
        yield c, scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig"), nodes


def settled(c: Cluster) -> bool:
    pods = c.admin.list("pods")
    return not workload.check_pending(pods) and not workload.placeable(pods, c.admin.list("nodes"),
                                                                       c.admin.list("podgroups"))


def _print_nominated(pods: list[dict[str, Any]], c: Cluster) -> None:
    """On failure: what holds each nominated node (phase, deletion, queue) and the evictions asked for."""
    nodes = {(p.get("status") or {}).get("nominatedNodeName") for p in pods} - {None}
    evictions = [(r.path, r.code) for r in c.audit() if r.subresource == "eviction"]
    print(f"{len(evictions)} evictions asked:", evictions[-10:])
    for node in sorted(nodes):
        held = [(p["metadata"]["name"], (p.get("status") or {}).get("phase"), p["metadata"].get("deletionTimestamp"),
                 p["metadata"].get("labels"))
                for p in pods if p["spec"].get("nodeName") == node]
        print(f"node {node}: {held}")


def pod(name: str, limits: dict[str, Any], *, labels: dict[str, str] | None = None,
        priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "gpufleet",
                            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": spec}


def test_the_api_server_refuses_a_fractional_whole_gpu_request(cluster: Any) -> None:
    """Extended resources must be whole numbers: kube-apiserver refuses 1.5 GPUs itself, so the
    scheduler never sees such a pod (gpufleet's own check covers other API servers' clients)."""
    c, _, _ = cluster
    refused = try_create(c.admin, pod("bad-one-and-a-half", {"nvidia.com/gpu": "1.5"}))
    assert refused is not None and refused.status == 422
    assert "must be an integer" in refused.message


def test_2000_pods_kill_9_and_restart_no_double_binding_no_overcommit(cluster: Any, tmp_path: Path) -> None:
    c, kubeconfig, nodes = cluster
    pods, groups = workload.pod_manifests(nodes, 2000, seed=11)
    c.admin.create_all(groups)
    invalid = [pod("bad-mig", {"nvidia.com/mig-9g.99gb": 1}),
               pod("bad-fraction", {"nvidia.com/gpu": 2, "gpufleet.io/gpu-milli": 500})]
    log = tmp_path / "scheduler.log"
    with Scheduler(kubeconfig, log, "--qps", "0") as first:
        wait_for(first.ready, 30, "the first scheduler to be ready")
        creator = threading.Thread(target=create_all, args=(c.admin, pods + invalid))
        creator.start()
        wait_for(lambda: len(bound(gpufleet_pods(c.admin))) >= 300, 120, "300 pods bound")
        first.kill()  # kill -9 in the middle of the run
        before = bound(gpufleet_pods(c.admin))
        creator.join()
    assert 300 <= len(before) < 2000
    with Scheduler(kubeconfig, log, "--qps", "0") as second:
        try:
            wait_for(lambda: settled(c), 300, "every pod bound or marked Unschedulable", interval_s=1.0)
        except AssertionError:
            pods_now = c.admin.list("pods")
            print("not reported:", workload.check_pending(pods_now)[:10])
            print("still placeable:", workload.placeable(pods_now, c.admin.list("nodes"), c.admin.list("podgroups"))[:10])
            _print_nominated(pods_now, c)
            print([line for line in second.get("/metrics")[1].splitlines() if "evict" in line or "preempt" in line])
            print(second.log()[-4000:])
            raise
        # A killed leader's status write still in flight can land after its successor's: the
        # successor puts back what the pod should show instead of leaving a stale nomination.
        victim = next(p for p in gpufleet_pods(c.admin) if not p["spec"].get("nodeName")
                      and not p["metadata"]["name"].startswith("bad-"))
        late = {"status": {"nominatedNodeName": "gpu-node-000", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "waiting for 1 preempted pod(s) to leave node gpu-node-000"}]}}
        c.admin.patch("pods", victim["metadata"]["name"], late, "default", subresource="status")
        wait_for(lambda: settled(c), 60, "the late write undone")
        wait_for(lambda: all((g.get("status") or {}).get("phase") for g in c.admin.list("podgroups")), 20,
                 "every PodGroup to have a phase")
        wait_for(lambda: all((q.get("status") or {}).get("allocated") for q in c.admin.list("queues")), 20,
                 "every Queue to show its allocation")
        _, metrics = second.get("/metrics")
        assert re.search(r'gpufleet_pending_pods\{queue="team-a",reason="Unschedulable"\} [1-9]', metrics)
        assert re.search(r'gpufleet_pending_pods\{queue="default",reason="InvalidRequest"\} 2', metrics)
        assert 0.5 < second.metric("gpufleet_gpu_allocation_ratio") <= 1.0
        assert "gpufleet_gpu_fragmentation_ratio" in metrics and "gpufleet_e2e_scheduling_duration_seconds_bucket" in metrics
        assert second.terminate() == 0
    final = gpufleet_pods(c.admin)
    after = bound(final)
    assert workload.check_assignments(final, c.admin.list("nodes")) == []
    assert workload.check_pending(final) == []
    audit = c.audit()
    scheduler_user = f"system:serviceaccount:{NAMESPACE}:gpufleet-scheduler"
    assert {r.user for r in audit if r.subresource == "binding"} == {scheduler_user}
    assert [r for r in audit if r.user == scheduler_user and r.code == 403] == [], "a request RBAC refused"
    # The default profile reclaims for queues below their fair share: a pod bound before the
    # kill is still on its node, or the scheduler evicted it through the Eviction API.
    evicted = {r.path for r in audit if r.subresource == "eviction" and r.code in (200, 201)}
    assert {k: after.get(k) for k in before if k not in evicted} == {k: v for k, v in before.items()
                                                                       if k not in evicted}, \
        "a pod bound before the kill moved"
    assert all(after.get(k) is None for k in evicted), "an evicted pod is still bound"
    twice = {path: n for path, n in successful_bindings(c).items() if n > 1}
    assert twice == {}, "pods bound twice"
    print(f"{len(before)} bound before the kill, {len(after)} bound in the end, {len(final) - len(after)} pending")
    kinds = {translate.pod_spec(p).gpu.kind.value for p in final if p["spec"].get("nodeName")}
    assert kinds == {"whole", "fraction", "mig", "none"}
    assert any(p["spec"].get("nodeName") and translate.POD_GROUP_LABEL in p["metadata"].get("labels", {})
               for p in final), "no gang was placed"
    assert len(after) > 700 and len(final) - len(after) > 100  # the mix leaves pods on both sides
    running = sum(1 for p in final if (p.get("status") or {}).get("phase") == "Running")
    assert running > 0.9 * len(after), "KWOK runs the bound pods"
    by_name = {p["metadata"]["name"]: p for p in final}
    messages = {name: next(c["message"] for c in by_name[name]["status"]["conditions"] if c["type"] == "PodScheduled")
                for name in ("bad-mig", "bad-fraction")}
    assert "unknown MIG profile '9g.99gb'" in messages["bad-mig"]
    assert "a fraction applies to exactly one GPU, but 2 GPUs were asked for" in messages["bad-fraction"]
    unschedulable = [p for p in final if not p["spec"].get("nodeName")]
    assert all(re.match(r"0/200 nodes are available: |pod group |pod default/bad-",
                        next(c["message"] for c in p["status"]["conditions"] if c["type"] == "PodScheduled"))
               for p in unschedulable)
    queues = {q["metadata"]["name"]: q["status"] for q in c.admin.list("queues")}
    team_a = queues["team-a"]
    assert team_a["pending"] > 0 and team_a["allocated"]["nvidia.com/gpu"] != "0m"
    assert team_a["fairShare"]["nvidia.com/gpu"].endswith("m")
    reasons: dict[str, int] = {}
    failed_per_pod: dict[str, int] = {}
    for e in c.admin.list("events"):
        reasons[e.get("reason", "")] = reasons.get(e.get("reason", ""), 0) + 1
        if e.get("reason") == "FailedScheduling":
            who = (e.get("regarding") or e.get("involvedObject") or {}).get("name", "")
            failed_per_pod[who] = failed_per_pod.get(who, 0) + (e.get("count") or 1)
    assert reasons.get("Scheduled", 0) > 0 and reasons.get("FailedScheduling", 0) > 0
    assert max(failed_per_pod.values()) <= 3  # rate-limited: a new message at most every 10 s, a repeat every 60 s
    group_phases = {g["metadata"]["name"]: (g.get("status") or {}).get("phase") for g in c.admin.list("podgroups")}
    assert set(group_phases.values()) <= {"Pending", "Scheduling", "Running"}


def test_two_replicas_only_the_leader_binds_and_the_other_takes_over(cluster: Any, tmp_path: Path) -> None:
    c, kubeconfig, nodes = cluster
    first_pods, _ = workload.pod_manifests(nodes, 150, seed=3, prefix="a")
    later_pods, _ = workload.pod_manifests(nodes, 100, seed=4, prefix="b")
    with Scheduler(kubeconfig, tmp_path / "a.log", "--qps", "0", *LEASE, name="replica-a") as a, \
            Scheduler(kubeconfig, tmp_path / "b.log", "--qps", "0", *LEASE, name="replica-b") as b:
        wait_for(lambda: a.leading() or b.leading(), 30, "a leader")
        leader, standby = (a, b) if a.leading() else (b, a)
        wait_for(standby.ready, 10, "the standby to be ready (synced) too")
        assert not standby.leading() and standby.get("/healthz")[0] == 200
        create_all(c.admin, first_pods)
        wait_for(lambda: settled(c), 90, "the first pods settled", interval_s=0.5)
        n_bound = len(bound(gpufleet_pods(c.admin)))
        assert n_bound > 0
        wait_for(lambda: leader.metric("gpufleet_binds_total") == n_bound, 5, "the leader to count its binds")
        assert standby.metric("gpufleet_binds_total") == 0
        leader.kill()
        took = wait_for(standby.leading, 20, "the standby to take over", interval_s=0.05)
        create_all(c.admin, later_pods)
        wait_for(lambda: settled(c), 90, "the later pods settled", interval_s=0.5)
        lease = c.admin.get("leases", "gpufleet-scheduler", NAMESPACE)
        assert lease is not None and lease["spec"]["holderIdentity"] == standby.name
        assert lease["spec"]["leaseTransitions"] >= 1
        assert standby.metric("gpufleet_binds_total") > 0
        print(f"standby took over {took:.2f} s after the leader was killed")
        # The lease runs 15 s from the leader's last renewal (every 2 s), and the standby tries
        # again right when it runs out: 13-15 s after the kill, plus this loop's 50 ms polling.
        assert took < 15.1, f"the standby took {took:.2f} s to take over"
        assert standby.terminate() == 0  # SIGTERM: clean exit, lease released
        lease = c.admin.get("leases", "gpufleet-scheduler", NAMESPACE)
        assert lease is not None and not lease["spec"].get("holderIdentity")
    final = gpufleet_pods(c.admin)
    assert workload.check_assignments(final, c.admin.list("nodes")) == []
    assert {p: n for p, n in successful_bindings(c).items() if n > 1} == {}
    binders = {r.user for r in c.audit() if r.subresource == "binding"}
    assert binders == {f"system:serviceaccount:{NAMESPACE}:gpufleet-scheduler"}


def test_preemption_goes_through_the_eviction_api_and_respects_a_budget(tmp_path: Path) -> None:
    profile = tmp_path / "preempt.yaml"
    profile.write_text(PROFILE.read_text().replace("    queueing:\n", "    queueing:\n      preemption: true\n"))
    assert "preemption: true" in profile.read_text()
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        nodes = gpu_nodes(2, seed=2)
        c.admin.create_all(nodes)
        c.admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
                        "value": 1000})
        kubeconfig = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        whole = sum(len(g.mig_slices) == 0 for n in nodes for g in translate.node_gpus(n))
        low = [pod(f"low-{i}", {"nvidia.com/gpu": 1}, labels={"app": "low"}) for i in range(whole)]
        c.admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "low", "namespace": "default"},
                        "spec": {"minAvailable": whole, "selector": {"matchLabels": {"app": "low"}}}})
        log = tmp_path / "scheduler.log"
        with Scheduler(kubeconfig, log, "--qps", "0", profile=profile) as s:
            wait_for(s.ready, 30, "the scheduler")
            create_all(c.admin, low)
            # kube-controller-manager's disruption controller counts the healthy pods (KWOK
            # reports them Ready), and only then does the budget allow or refuse anything.
            wait_for(lambda: sum(p["status"].get("phase") == "Running" for p in gpufleet_pods(c.admin)) == whole, 60,
                     "the low-priority pods running")
            create_all(c.admin, [pod("high", {"nvidia.com/gpu": 1}, priority_class="high")])
            wait_for(lambda: "blocked" in log.read_text(), 30, "an eviction refused by the budget (429)")
            wait_for(lambda: bool((c.admin.get("pods", "high", "default") or {}).get("status", {})
                                  .get("nominatedNodeName")), 10, "the high-priority pod nominated to its victims' node")
            high = c.admin.get("pods", "high", "default")
            assert high is not None and not high["spec"].get("nodeName")
            c.admin.patch("poddisruptionbudgets", "low", {"spec": {"minAvailable": whole - 1}}, "default")
            wait_for(lambda: bool((c.admin.get("pods", "high", "default") or {}).get("spec", {}).get("nodeName")), 60,
                     "the high-priority pod bound after its victim left")
            assert s.terminate() == 0
        remaining = gpufleet_pods(c.admin)
        assert sum(1 for p in remaining if p["metadata"]["name"].startswith("low-")) == whole - 1
        assert workload.check_assignments(remaining, c.admin.list("nodes")) == []
        evictions = [r.code for r in c.audit() if r.subresource == "eviction"]
        assert evictions.count(429) >= 1 and evictions.count(201) == 1


def test_kubectl_describe_shows_why_a_pod_waits_and_where_one_runs(tmp_path: Path) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        c.admin.create_all(gpu_nodes(3, seed=1))
        kubeconfig = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        admin = c.write_kubeconfig(tmp_path / "admin.kubeconfig")
        with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0") as s:
            wait_for(s.ready, 30, "the scheduler")
            create_all(c.admin, [pod("big", {"nvidia.com/gpu": 16}), pod("small", {"nvidia.com/gpu": 1})])

            def describe(name: str) -> str:
                out = subprocess.run([str(kubectl), "--kubeconfig", str(admin), "describe", "pod", name],
                                     capture_output=True, text=True, timeout=30, env=clean_env())
                return out.stdout
            wait_for(lambda: "FailedScheduling" in describe("big") and "Scheduled" in describe("small"), 30,
                     "the scheduler's events in kubectl describe")
            wait_for(lambda: "Status:           Running" in describe("small"), 30, "KWOK to run the pod")
        big, small = describe("big"), describe("small")
    assert re.search(r"PodScheduled\s+False", big)
    assert re.search(r"Warning\s+FailedScheduling\s+.*0/3 nodes are available: 3 Insufficient GPU\.", big)
    assert re.search(r"Normal\s+Scheduled\s+.*Successfully assigned default/small to gpu-node-\d+ \(GPUs GPU-", small)
    assert "gpufleet.io/gpu-assignment" in small


def test_patch_then_bind_at_the_default_budget(cluster: Any, tmp_path: Path) -> None:
    """`--assign-with patch` (annotation first, then the Binding) under the default 50 QPS."""
    c, kubeconfig, nodes = cluster
    pods, _ = workload.pod_manifests(nodes, 60, seed=9, prefix="q")
    with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--assign-with", "patch") as s:
        wait_for(s.ready, 30, "the scheduler")
        create_all(c.admin, pods)
        wait_for(lambda: settled(c), 60, "every pod bound or marked Unschedulable", interval_s=0.5)
        assert s.terminate() == 0
    final = gpufleet_pods(c.admin)
    assert len(bound(final)) > 30 and workload.check_assignments(final, c.admin.list("nodes")) == []
    patches = [r for r in c.audit() if r.verb == "patch" and r.resource == "pods" and not r.subresource]
    assert len(patches) >= len(bound(final))
