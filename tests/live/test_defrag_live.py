"""Defragmentation on the real control plane (`--defrag`, under deploy/'s scheduler RBAC).

Two 4-GPU nodes each run two 1-GPU pods; a pod asking for 4 GPUs fits neither, though 4 GPUs are
free in all. The cheapest move is the pods of node `a` (started last, so they lose the least
work), but a PodDisruptionBudget (minAvailable 2, its status computed by kube-controller-manager's
disruption controller) protects them. The scheduler moves the pods of node `b` through the
Eviction API, binds the big pod there, and never asks to evict a protected pod."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.core.defrag import DefragSettings
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import Shape, gpu_node

from .cluster_kit import Obj, install_gpufleet, scheduler_in_process, scheduler_kubeconfig, wait_for

SHAPE = Shape("test-4gpu", "NVIDIA-H100-80GB-HBM3", 4, 81559, 64, 512, "hopper", True, 1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("defrag") / "cluster") as c:
        install_gpufleet(c)
        yield c


def pod(name: str, gpus: int, node: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"schedulerName": "gpufleet", "containers": [{"name": "c", "image": "cuda", "resources": {
        "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": labels or {}}, "spec": spec}


def phase(c: Cluster, name: str) -> tuple[str | None, str | None]:
    p = c.admin.get("pods", name, "default") or {}
    return (p.get("spec") or {}).get("nodeName"), (p.get("status") or {}).get("phase")


def test_a_big_pod_blocked_by_fragmentation_gets_room_by_moving_pods_no_budget_protects(
        cluster: Cluster, tmp_path: Path) -> None:
    for name in ("a", "b"):
        cluster.admin.create(gpu_node(name, SHAPE, random.Random(name)))
    settings = DefragSettings(min_gpus=4, min_wait_s=0.0, interval_s=0.5, budget_gpu_hours_per_hour=10.0)
    with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "scheduler"), defrag=settings) as s:
        for name in ("b-0", "b-1", "a-0", "a-1"):  # b's first: they have run longer, so moving them costs more
            node = name[0]
            cluster.admin.create(pod(name, 1, node, {"app": "protected"} if node == "a" else {}))
            wait_for(lambda: phase(cluster, name) == (node, "Running"), 30, f"pod {name} running on {node}")
        cluster.admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                              "metadata": {"name": "keep-a", "namespace": "default"},
                              "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "protected"}}}})
        wait_for(lambda: ((cluster.admin.get("poddisruptionbudgets", "keep-a", "default") or {}).get("status") or {})
                 .get("currentHealthy") == 2, 30, "the disruption controller to count the protected pods")
        cluster.admin.create(pod("big", 4))
        wait_for(lambda: phase(cluster, "big")[0] == "b", 60, "the 4-GPU pod bound to node b after the moves")
        assert s.defrag is not None and s.defrag.plans >= 1
        assert phase(cluster, "a-0") == ("a", "Running") and phase(cluster, "a-1") == ("a", "Running")
        assert cluster.admin.get("pods", "b-0", "default") is None and cluster.admin.get("pods", "b-1", "default") is None
    evicted = sorted(r.path.rsplit("/", 1)[-1] for r in cluster.audit() if r.subresource == "eviction")
    assert evicted == ["b-0", "b-1"], evicted  # never a protected pod, not even one the API would refuse
