"""End to end: the local API server with 200 simulated GPU nodes and the scheduler as a process.

Each test reads the outcome back from the API objects themselves (`gpufleet.testing.workload`):
assignments that match their nodes and requests, no device overcommitted, a reason on every
pod left pending, and no pending pod that one more cycle could still place.

The scheduler runs unthrottled (`--qps 0`) here to keep the suite fast; the 50-QPS budget is
measured by `bench/e2e.py`. Leader election runs with kube-scheduler's default lease settings
(15 s / 10 s / 2 s), so the failover test waits out a real 15 s lease.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.kube import translate
from gpufleet.testing import workload
from gpufleet.testing.apiserver import ApiServer, gpu_nodes

from .harness import (PROFILE, Scheduler, bound, clean_env, create_via_api, gpufleet_pods, install_crds, successful_bindings,
                      wait_for)

NODES = 200
LEASE = ("--leader-elect", "--lease-namespace", "kube-system")
"""kube-scheduler's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ApiServer, Path, list[dict[str, Any]]]]:
    with ApiServer(history=50_000) as srv:
        install_crds(srv)
        nodes = gpu_nodes(NODES, seed=7)
        for n in nodes:
            srv.create(n)
        for q in workload.queue_manifests():
            srv.create(q)
        yield srv, srv.write_kubeconfig(tmp_path / "kubeconfig"), nodes


def settled(srv: ApiServer) -> bool:
    pods = srv.list("pods")
    return not workload.check_pending(pods) and not workload.placeable(pods, srv.list("nodes"), srv.list("podgroups"))


def invalid_pods() -> list[dict[str, Any]]:
    def pod(name: str, limits: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c", "image": "x",
                                                                       "resources": {"limits": limits}}]}}
    return [pod("bad-one-and-a-half", {"nvidia.com/gpu": "1.5"}), pod("bad-mig", {"nvidia.com/mig-9g.99gb": 1}),
            pod("bad-fraction", {"nvidia.com/gpu": 2, "gpufleet.io/gpu-milli": 500})]


def test_2000_pods_kill_9_and_restart_no_double_binding_no_overcommit(cluster: Any, tmp_path: Path) -> None:
    srv, kubeconfig, nodes = cluster
    pods, groups = workload.pod_manifests(nodes, 2000, seed=11)
    for g in groups:
        srv.create(g)
    log = tmp_path / "scheduler.log"
    with Scheduler(kubeconfig, log, "--qps", "0") as first:
        wait_for(first.ready, 30, "the first scheduler to be ready")
        creator = threading.Thread(target=create_via_api, args=(srv, pods + invalid_pods()))
        creator.start()
        wait_for(lambda: len(bound(gpufleet_pods(srv))) >= 300, 60, "300 pods bound")
        first.kill()  # kill -9 in the middle of the run
        before = bound(gpufleet_pods(srv))
        creator.join()
    assert 300 <= len(before) < 2000
    with Scheduler(kubeconfig, log, "--qps", "0") as second:
        wait_for(lambda: settled(srv), 60, "every pod bound or marked Unschedulable", interval_s=0.5)
        wait_for(lambda: all((g.get("status") or {}).get("phase") for g in srv.list("podgroups")), 10,
                 "every PodGroup to have a phase")
        wait_for(lambda: all((q.get("status") or {}).get("allocated") for q in srv.list("queues")), 10,
                 "every Queue to show its allocation")
        _, metrics = second.get("/metrics")
        assert re.search(r'gpufleet_pending_pods\{queue="team-a",reason="Unschedulable"\} [1-9]', metrics)
        assert re.search(r'gpufleet_pending_pods\{queue="default",reason="InvalidRequest"\} 3', metrics)
        assert 0.5 < second.metric("gpufleet_gpu_allocation_ratio") <= 1.0
        assert "gpufleet_gpu_fragmentation_ratio" in metrics and "gpufleet_e2e_scheduling_duration_seconds_bucket" in metrics
        assert second.terminate() == 0
    final = gpufleet_pods(srv)
    after = bound(final)
    assert workload.check_assignments(final, srv.list("nodes")) == []
    assert workload.check_pending(final) == []
    # The default profile reclaims for queues below their fair share: a pod bound before the
    # kill is still on its node, or the scheduler evicted it through the Eviction API.
    evicted = {f"{parts[4]}/{parts[6]}" for r in srv.requests if r.method == "POST" and r.path.endswith("/eviction")
               and r.status in (200, 201) for parts in [r.path.split("/")]}
    assert {k: after.get(k) for k in before if k not in evicted} == {k: v for k, v in before.items()
                                                                       if k not in evicted}, \
        "a pod bound before the kill moved"
    assert all(after.get(k) is None for k in evicted), "an evicted pod is still bound"
    twice = {path: n for path, n in successful_bindings(srv).items() if n > 1}
    assert twice == {}, "pods bound twice"
    print(f"{len(before)} bound before the kill, {len(after)} bound in the end, {len(final) - len(after)} pending")
    kinds = {translate.pod_spec(p).gpu.kind.value for p in final if p["spec"].get("nodeName")}
    assert kinds == {"whole", "fraction", "mig", "none"}
    assert any(p["spec"].get("nodeName") and translate.POD_GROUP_LABEL in p["metadata"].get("labels", {})
               for p in final), "no gang was placed"
    assert len(after) > 700 and len(final) - len(after) > 100  # the mix leaves pods on both sides
    by_name = {p["metadata"]["name"]: p for p in final}
    messages = {name: next(c["message"] for c in by_name[name]["status"]["conditions"] if c["type"] == "PodScheduled")
                for name in ("bad-one-and-a-half", "bad-mig", "bad-fraction")}
    assert "resources.nvidia.com/gpu: '1.5' is not a whole number" in messages["bad-one-and-a-half"]
    assert "unknown MIG profile '9g.99gb'" in messages["bad-mig"]
    assert "a fraction applies to exactly one GPU, but 2 GPUs were asked for" in messages["bad-fraction"]
    unschedulable = [p for p in final if not p["spec"].get("nodeName")]
    assert all(re.match(r"0/200 nodes are available: |pod group |pod default/bad-",
                        next(c["message"] for c in p["status"]["conditions"] if c["type"] == "PodScheduled"))
               for p in unschedulable)
    queues = {q["metadata"]["name"]: q["status"] for q in srv.list("queues")}
    team_a = queues["team-a"]
    assert team_a["pending"] > 0 and team_a["allocated"]["nvidia.com/gpu"] != "0m"
    assert team_a["fairShare"]["nvidia.com/gpu"].endswith("m")
    events = srv.list("events")
    reasons: dict[str, int] = {}
    failed_per_pod: dict[str, int] = {}
    for e in events:
        reasons[e.get("reason", "")] = reasons.get(e.get("reason", ""), 0) + 1
        if e.get("reason") == "FailedScheduling":
            who = (e.get("regarding") or e.get("involvedObject") or {}).get("name", "")
            failed_per_pod[who] = failed_per_pod.get(who, 0) + 1
    assert reasons.get("Scheduled", 0) > 0 and reasons.get("FailedScheduling", 0) > 0
    assert max(failed_per_pod.values()) <= 3  # rate-limited: a new message at most every 10 s, a repeat every 60 s
    group_phases = {g["metadata"]["name"]: (g.get("status") or {}).get("phase") for g in srv.list("podgroups")}
    assert set(group_phases.values()) <= {"Pending", "Scheduling", "Running"}


def test_two_replicas_only_the_leader_binds_and_the_other_takes_over(cluster: Any, tmp_path: Path) -> None:
    srv, kubeconfig, nodes = cluster
    first_pods, _ = workload.pod_manifests(nodes, 150, seed=3, prefix="a")
    later_pods, _ = workload.pod_manifests(nodes, 100, seed=4, prefix="b")
    with Scheduler(kubeconfig, tmp_path / "a.log", "--qps", "0", *LEASE, name="replica-a") as a, \
            Scheduler(kubeconfig, tmp_path / "b.log", "--qps", "0", *LEASE, name="replica-b") as b:
        wait_for(lambda: a.leading() or b.leading(), 30, "a leader")
        leader, standby = (a, b) if a.leading() else (b, a)
        wait_for(standby.ready, 10, "the standby to be ready (synced) too")
        assert not standby.leading() and standby.get("/healthz")[0] == 200
        create_via_api(srv, first_pods)
        wait_for(lambda: settled(srv), 60, "the first pods settled", interval_s=0.5)
        n_bound = len(bound(gpufleet_pods(srv)))
        assert n_bound > 0
        wait_for(lambda: leader.metric("gpufleet_binds_total") == n_bound, 5, "the leader to count its binds")
        assert standby.metric("gpufleet_binds_total") == 0
        leader.kill()
        took = wait_for(standby.leading, 20, "the standby to take over", interval_s=0.05)
        create_via_api(srv, later_pods)
        wait_for(lambda: settled(srv), 60, "the later pods settled", interval_s=0.5)
        lease = srv.get("leases", "gpufleet-scheduler", "kube-system")
        assert lease is not None and lease["spec"]["holderIdentity"] == standby.name
        assert lease["spec"]["leaseTransitions"] >= 1
        assert standby.metric("gpufleet_binds_total") > 0
        print(f"standby took over {took:.2f} s after the leader was killed")
        # The lease runs 15 s from the leader's last renewal (every 2 s), and the standby tries
        # again right when it runs out: 13-15 s after the kill, plus this loop's 50 ms polling.
        assert took < 15.1, f"the standby took {took:.2f} s to take over"
        assert standby.terminate() == 0  # SIGTERM: clean exit, lease released
        lease = srv.get("leases", "gpufleet-scheduler", "kube-system")
        assert lease is not None and not lease["spec"].get("holderIdentity")
    final = gpufleet_pods(srv)
    assert workload.check_assignments(final, srv.list("nodes")) == []
    assert {p: n for p, n in successful_bindings(srv).items() if n > 1} == {}


def test_preemption_goes_through_the_eviction_api_and_respects_a_budget(tmp_path: Path) -> None:
    profile = tmp_path / "preempt.yaml"
    profile.write_text(PROFILE.read_text().replace("    queueing:\n", "    queueing:\n      preemption: true\n"))
    assert "preemption: true" in profile.read_text()
    with ApiServer() as srv:
        install_crds(srv)
        nodes = gpu_nodes(2, seed=2)
        for n in nodes:
            srv.create(n)
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        whole = sum(len(g.mig_slices) == 0 for n in nodes for g in translate.node_gpus(n))
        low = [workload_pod(f"low-{i}", {"nvidia.com/gpu": 1}, labels={"app": "low"}) for i in range(whole)]
        srv.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "low", "namespace": "default"},
                    "spec": {"minAvailable": whole, "selector": {"matchLabels": {"app": "low"}}}})
        log = tmp_path / "scheduler.log"
        with Scheduler(kubeconfig, log, "--qps", "0", "--config", str(profile)) as s:
            wait_for(s.ready, 30, "the scheduler")
            create_via_api(srv, low)
            wait_for(lambda: sum(p["status"].get("phase") == "Running" for p in gpufleet_pods(srv)) == whole, 30,
                     "the low-priority pods running")
            create_via_api(srv, [workload_pod("high", {"nvidia.com/gpu": 1}, priority=1000)])
            wait_for(lambda: "blocked" in log.read_text(), 20, "an eviction refused by the budget (429)")
            # The eviction and the preemptor's status write go out concurrently: the 429 can be
            # logged before nominatedNodeName is written.
            wait_for(lambda: bool((srv.get("pods", "high", "default") or {}).get("status", {}).get("nominatedNodeName")),
                     10, "the high-priority pod nominated to its victims' node")
            high = srv.get("pods", "high", "default")
            assert high is not None and not high["spec"].get("nodeName")
            pdb = srv.get("poddisruptionbudgets", "low", "default")
            assert pdb is not None
            pdb["spec"]["minAvailable"] = whole - 1
            srv.update(pdb)  # the budget now allows one disruption
            wait_for(lambda: bool((srv.get("pods", "high", "default") or {}).get("spec", {}).get("nodeName")), 30,
                     "the high-priority pod bound after its victims left")
            assert s.terminate() == 0
        remaining = gpufleet_pods(srv)
        assert sum(1 for p in remaining if p["metadata"]["name"].startswith("low-")) == whole - 1
        assert workload.check_assignments(remaining, srv.list("nodes")) == []
        assert [r.status for r in srv.requests if r.path.endswith("/eviction")].count(429) >= 1


def workload_pod(name: str, limits: dict[str, Any], *, labels: dict[str, str] | None = None,
                 priority: int = 0) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"schedulerName": "gpufleet", "priority": priority,
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}


def test_kubectl_describe_shows_why_a_pod_waits_and_where_one_runs(tmp_path: Path) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    with ApiServer() as srv:
        for n in gpu_nodes(3, seed=1):
            srv.create(n)
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0") as s:
            wait_for(s.ready, 30, "the scheduler")
            create_via_api(srv, [workload_pod("big", {"nvidia.com/gpu": 16}), workload_pod("small", {"nvidia.com/gpu": 1})])

            def describe(name: str) -> str:
                out = subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), "describe", "pod", name],
                                     capture_output=True, text=True, timeout=30, env=clean_env())
                return out.stdout
            wait_for(lambda: "FailedScheduling" in describe("big") and "Scheduled" in describe("small"), 20,
                     "the scheduler's events in kubectl describe")
        big, small = describe("big"), describe("small")
    assert re.search(r"PodScheduled\s+False", big)
    assert re.search(r"Warning\s+FailedScheduling\s+.*0/3 nodes are available: 3 Insufficient GPU\.", big)
    assert re.search(r"Normal\s+Scheduled\s+.*Successfully assigned default/small to gpu-node-\d+ \(GPUs GPU-", small)
    assert "gpufleet.io/gpu-assignment" in small


def test_patch_then_bind_at_the_default_budget(cluster: Any, tmp_path: Path) -> None:
    """`--assign-with patch` (annotation first, then the Binding) under the default 50 QPS."""
    srv, kubeconfig, nodes = cluster
    pods, _ = workload.pod_manifests(nodes, 60, seed=9, prefix="q")
    with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--assign-with", "patch") as s:
        wait_for(s.ready, 30, "the scheduler")
        create_via_api(srv, pods)
        wait_for(lambda: settled(srv), 60, "every pod bound or marked Unschedulable", interval_s=0.5)
        assert s.terminate() == 0
    final = gpufleet_pods(srv)
    assert len(bound(final)) > 30 and workload.check_assignments(final, srv.list("nodes")) == []
    patches = [r for r in srv.requests if r.method == "PATCH" and re.search(r"/pods/[^/]+$", r.path)]
    assert len(patches) >= len(bound(final))
