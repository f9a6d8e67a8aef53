"""Queue limits on the real control plane (issue 25): an elastic gang and a gang under a
per-model limit, through Queue and PodGroup objects, `gpufleet scheduler` as a process under
deploy/'s ServiceAccount, in fair and in priority order. The outcome is read back from the
Pods: what is bound where, and the reason on every member left pending."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import SHAPES, Shape, gpu_node

from .cluster_kit import PROFILE, Scheduler, bound, gpufleet_pods, install_gpufleet, scheduler_kubeconfig, wait_for

H100X8 = next(s for s in SHAPES if s.name == "p5.48xlarge")
T4X4 = next(s for s in SHAPES if s.name == "g4dn.12xlarge")
A100X4 = Shape("p4d-half", "NVIDIA-A100-SXM4-80GB", 4, 81920, 48, 576, "ampere", True, 1)


def queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_group(name: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min_member}}


def member(name: str, group: str, queue_name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"gpufleet.io/queue": queue_name, "scheduling.x-k8s.io/pod-group": group}},
            "spec": {"schedulerName": "gpufleet",
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def decided(pod: dict[str, Any]) -> bool:
    """Bound, or told why not (the scheduler's PodScheduled=False condition)."""
    return bool(pod["spec"].get("nodeName")) or any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" for c in pod.get("status", {}).get("conditions", []))


def ready(node: dict[str, Any] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in ((node or {}).get("status") or {}).get("conditions", []))


def reason(pod: dict[str, Any]) -> str:
    return next((c.get("message", "") for c in pod.get("status", {}).get("conditions", [])
                 if c.get("type") == "PodScheduled"), "")


@pytest.mark.parametrize("order", ["fair", "priority"])
def test_an_elastic_gang_and_a_per_model_limit_hold_on_the_real_control_plane(tmp_path: Path, order: str) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE.read_text().replace("      order: fair\n", f"      order: {order}\n"))
    assert f"order: {order}" in profile.read_text()
    rng = random.Random(0)
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        c.admin.create_all([gpu_node("t4", T4X4, rng, index=1), gpu_node("a100", A100X4, rng, index=2)])
        c.admin.create_all([
            queue("elastic", {"limit": {"nvidia.com/gpu": 4}}),
            queue("t4-capped", {"gpuModels": [{"model": T4X4.product, "limit": 1}]}),
            pod_group("spread", 5), pod_group("elastic", 2)])
        kubeconfig = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0", profile=profile) as s:
            wait_for(s.ready, 30, "the scheduler")
            # Six 1-GPU members, minMember 5, one 4xT4 and one 4xA100 node, at most 1 T4.
            c.admin.create_all([member(f"spread-{i}", "spread", "t4-capped", 1) for i in range(6)])
            wait_for(lambda: len(bound(gpufleet_pods(c.admin))) == 5 and any(
                "queue t4-capped: limit of 1 Tesla-T4 GPU reached" in reason(p) for p in gpufleet_pods(c.admin)
                if not p["spec"].get("nodeName")), 60, "five members bound, the sixth told the per-model limit")
            spread = {p["metadata"]["name"]: p for p in gpufleet_pods(c.admin)}
            # Then an empty 8-GPU node and four 2-GPU members, minMember 2, under a limit of 4 GPUs.
            c.admin.create_all([gpu_node("h100", H100X8, rng, index=0)])
            wait_for(lambda: ready(c.admin.get("nodes", "h100")), 30, "the H100 node Ready")
            c.admin.create_all([member(f"elastic-{i}", "elastic", "elastic", 2) for i in range(4)])
            wait_for(lambda: sum(n.startswith("default/elastic") for n in bound(gpufleet_pods(c.admin))) >= 2 and all(
                "queue elastic: limit of 4 GPU reached" in reason(p) for p in gpufleet_pods(c.admin)
                if p["metadata"]["name"].startswith("elastic") and not p["spec"].get("nodeName")), 60,
                "the elastic gang's minimum bound, the other members told the limit")
            time.sleep(2)  # a few more cycles (50 ms each) in which an extra member could still be bound
            elastic = {p["metadata"]["name"]: p for p in gpufleet_pods(c.admin) if p["metadata"]["name"].startswith("el")}
            assert s.terminate() == 0, s.log()[-3000:]
    where = bound(spread.values())
    assert sorted(where.values()) == ["a100", "a100", "a100", "a100", "t4"], where
    running = bound(elastic.values())
    assert len(running) == 2, running  # 2 x 2 GPUs = the queue's limit of 4
    for name in set(elastic) - {n.split("/")[1] for n in running}:
        assert "queue elastic: limit of 4 GPU reached" in reason(elastic[name]), reason(elastic[name])
