"""Issue 24's first must-show, on the real control plane: a pod created with `spec.nodeName` set
and a forged GPU assignment gets no device from the agent, nor does one carrying a copy of
another pod's signed assignment; each gets an `AssignmentRejected` event; the scheduler's own
pods are served, before and after the signing key is rotated.

The pieces: kube-apiserver and etcd; `gpufleet scheduler --assignment-keys` as a process under
its ServiceAccount; the agent in process as its ServiceAccount (`AgentNodeApi`, as `gpufleet
agent run` wires it) on a KWOK node, with the fake NVML backend; and the kubelet's side of the
device-plugin API played by the stand-in of tests/agent/kubelet.py (written from the published
API). KWOK is stopped on the node while pods arrive, as a kubelet that has not yet started their
containers: the agent serves only Pending pods, and KWOK would run them at once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import grpc  # type: ignore[import-untyped]
import pytest

from agent.kubelet import FakeKubelet
from gpufleet.agent import configsource, fake
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.model import annotations as ann
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION
from gpufleet.testing.cluster import Cluster

from .cluster_kit import Scheduler, agent_kubeconfig, install_gpufleet, scheduler_kubeconfig, wait_for
from .node_faults import start_kubelet, stop_kubelet
from .test_agent_live import add_node, node_api

NODE = "gpu-signed"
MILLI = ann.GPU_MILLI_RESOURCE
Obj = dict[str, Any]


def fraction_pod(name: str, milli: int, *, node: str | None = None, annotations: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"schedulerName": "gpufleet",
                 "containers": [{"name": "c", "image": "x", "resources": {"limits": {MILLI: str(milli)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}}, "spec": spec}


def rejected(c: Cluster) -> dict[str, str]:
    """Pod name -> note of each AssignmentRejected event in `default`."""
    # listed as core/v1 Events (the same objects): involvedObject and message for regarding and note
    return {(e.get("regarding") or e["involvedObject"])["name"]: e.get("note") or e.get("message", "")
            for e in c.admin.list("events", "default") if e.get("reason") == "AssignmentRejected"}


def tokens(gpu: str, n: int, start: int = 0) -> list[str]:
    return [f"{gpu}::{k}" for k in range(start, start + n)]


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "assignment-keys"  # what the mounted Secret looks like
    d.mkdir()
    (d / "k1").write_text("a" * 64)
    yield d


def test_forged_and_copied_assignments_get_no_device_and_rotation_keeps_the_schedulers_pods_served(
        tmp_path: Path, sock_dir: Path, keys: Path) -> None:  # noqa: F811
    config = tmp_path / "agent.yaml"
    config.write_text("gpufleet: {fractions: true, metricsPort: 0}\n")
    kubelet = FakeKubelet(sock_dir)
    kubelet.start()
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        add_node(c, NODE)
        with node_api(agent_kubeconfig(c, tmp_path / "agent.kubeconfig"), NODE) as api:
            agent = Agent(lambda: fake.load_fixture("h100-nvl-pairs"), api, configsource.ConfigSource(config),
                          AgentOptions(NODE, sock_dir, metrics_port=0, assignment_keys=keys))
            agent.start()
            try:
                ep = kubelet.endpoint(MILLI)
                count = len(ep.next_list().devices)
                # What the kubelet publishes for a registered plugin's devices (KWOK does not).
                c.admin.patch("nodes", NODE, {"status": {"capacity": {MILLI: str(count)},
                                                         "allocatable": {MILLI: str(count)}}}, subresource="status")
                wait_for(lambda: ann.INVENTORY_ANNOTATION in (c.admin.get("nodes", NODE) or {})["metadata"].get(
                    "annotations", {}), 30, "the agent's GPU inventory on the node")
                with Scheduler(scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig"), tmp_path / "scheduler.log",
                               "--qps", "0", "--assignment-keys", str(keys)) as s:
                    wait_for(s.ready, 30, "the scheduler")
                    stop_kubelet(c, NODE)  # containers wait to start: pods stay Pending
                    c.admin.create(fraction_pod("infer", 250))
                    wait_for(lambda: (c.admin.get("pods", "infer", "default") or {}).get("spec", {}).get("nodeName"),
                             15, "the scheduler binding its pod")
                    legit = c.admin.get("pods", "infer", "default")["metadata"]["annotations"]
                    assert legit[SIGNATURE_ANNOTATION].startswith("v1:k1:")
                    gpu = ann.decode_assignment(legit[ann.ASSIGNMENT_ANNOTATION]).gpus[0]
                    # A pod author's two ways in: write an assignment on a pre-bound pod, or copy a signed one.
                    forged = ann.encode_assignment(ann.GpuAssignment(NODE, (gpu,), 250))
                    c.admin.create(fraction_pod("forged", 250, node=NODE,
                                                annotations={ann.ASSIGNMENT_ANNOTATION: forged}))
                    c.admin.create(fraction_pod("copied", 250, node=NODE, annotations={
                        ann.ASSIGNMENT_ANNOTATION: legit[ann.ASSIGNMENT_ANNOTATION],
                        SIGNATURE_ANNOTATION: legit[SIGNATURE_ANNOTATION]}))
                    time.sleep(0.5)  # all three on the API server before the kubelet's first call
                    got = ep.allocate(tokens(gpu, 250))
                    assert got.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpu  # infer's own
                    for _ in ("forged", "copied"):
                        with pytest.raises(grpc.RpcError) as info:
                            ep.allocate(tokens(gpu, 250, 250))
                        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                    wait_for(lambda: set(rejected(c)) == {"forged", "copied"}, 15, "an event on each refused pod")
                    notes = rejected(c)
                    assert "signature is missing" in notes["forged"] and "signature is mismatch" in notes["copied"]
                    text = agent.metrics.text()
                    assert 'gpufleet_agent_assignments_rejected_total{reason="missing"} 1.0' in text
                    assert 'gpufleet_agent_assignments_rejected_total{reason="mismatch"} 1.0' in text

                    # Rotation: add k2 and make it active; the agent keeps accepting k1 meanwhile.
                    start_kubelet(c, NODE)  # the node's lease renewed while the key files change
                    (keys / "k2").write_text("b" * 64)
                    (keys / "active").write_text("k2")
                    time.sleep(10.5)  # both re-read their key ring at most every 10 s
                    stop_kubelet(c, NODE)
                    c.admin.create(fraction_pod("infer-2", 500))
                    wait_for(lambda: (c.admin.get("pods", "infer-2", "default") or {}).get("spec", {}).get("nodeName"),
                             15, "the scheduler binding its second pod")
                    second = c.admin.get("pods", "infer-2", "default")["metadata"]["annotations"]
                    assert second[SIGNATURE_ANNOTATION].startswith("v1:k2:")
                    gpu2 = ann.decode_assignment(second[ann.ASSIGNMENT_ANNOTATION]).gpus[0]
                    got = ep.allocate(tokens(gpu2, 500, 500))
                    assert got.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpu2
                    assert set(rejected(c)) == {"forged", "copied"}  # nothing new refused
                    assert s.terminate() == 0, s.log()[-3000:]
            finally:
                agent.stop()
                kubelet.stop()
