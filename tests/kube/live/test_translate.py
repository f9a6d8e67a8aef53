"""Pods, nodes, PodGroups and Queues as the API serves them -> model objects."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube import translate
from gpufleet.model import GpuKind, ModelError, Placement, PodUid
from gpufleet.model import annotations as ann


def pod(name: str = "p", *, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "gpufleet",
                     "containers": [{"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}],
                     **spec}}


def test_whole_gpus_cpu_and_memory() -> None:
    s = translate.pod_spec(pod(limits={"nvidia.com/gpu": "2"}, requests={"cpu": "1500m", "memory": "2Gi"}))
    assert (s.gpu.kind, s.gpu.count, s.cpu_milli, s.mem_mib) == (GpuKind.WHOLE, 2, 1500, 2048)
    assert s.uid == "uid-p" and s.namespace == "ns" and s.created_s > 0


def test_fraction_with_memory_cap() -> None:
    s = translate.pod_spec(pod(limits={"gpufleet.io/gpu-milli": 250, "gpufleet.io/gpu-memory": "4096"}))
    assert (s.gpu.kind, s.gpu.milli, s.gpu.mem_mib) == (GpuKind.FRACTION, 250, 4096)


def test_mig_slice_resource_name() -> None:
    s = translate.pod_spec(pod(limits={"nvidia.com/mig-1g.10gb": 1}))
    assert (s.gpu.kind, s.gpu.mig_profile, s.gpu.count) == (GpuKind.MIG, "1g.10gb", 1)


def test_gang_queue_priority_and_model_affinity() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A", "B"]}]}]}}}
    s = translate.pod_spec(pod(labels={"scheduling.x-k8s.io/pod-group": "g", "gpufleet.io/queue": "team-a"},
                               priority=7, affinity=affinity))
    assert (s.pod_group, s.queue, s.priority, s.gpu_models) == ("ns/g", "team-a", 7, frozenset({"A", "B"}))


@pytest.mark.parametrize(("limits", "message"), [
    ({"nvidia.com/gpu": "1.5"}, "pod ns/p: containers[0]: resources.nvidia.com/gpu: '1.5' is not a whole number"),
    ({"nvidia.com/mig-9g.99gb": 1}, "unknown MIG profile '9g.99gb'"),
    ({"nvidia.com/gpu": 2, "gpufleet.io/gpu-milli": 500}, "a fraction applies to exactly one GPU, but 2 GPUs"),
    ({"gpufleet.io/gpu-milli": 1500}, "a GPU fraction must be 1..999 milli"),
    ({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}, "whole GPUs cannot be combined with MIG slices"),
], ids=["1.5 GPUs", "an unknown MIG profile", "a fraction of several GPUs", "a fraction above one GPU",
        "whole GPUs and MIG at once"])
def test_invalid_gpu_requests_name_the_field(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as caught:
        translate.pod_spec(pod(limits=limits))
    assert message in str(caught.value) and "pod ns/p" in str(caught.value)


def test_scheduling_gates_are_seen() -> None:
    assert translate.scheduling_gated(pod(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]))
    assert not translate.scheduling_gated(pod())


INVENTORY = ann.encode_inventory((
    ann.InventoryGpu("GPU-a", "NVIDIA-A100-SXM4-80GB", 81920, 0, 0, "d0", True, ("3g.40gb", "3g.40gb"), ("MIG-1", "MIG-2")),
    ann.InventoryGpu("GPU-b", "NVIDIA-A100-SXM4-80GB", 81920, 1, 0, "d0"),
))


def node(name: str = "n1", **extra_annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-T4", "nvidia.com/gpu.memory": "15360"},
                         "annotations": extra_annotations},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"}}}


def test_node_from_the_agents_inventory() -> None:
    n = translate.node_info(node(**{ann.INVENTORY_ANNOTATION: INVENTORY}))
    assert [g.uuid for g in n.gpus] == ["GPU-a", "GPU-b"] and n.gpus[0].mig_slices == ("3g.40gb", "3g.40gb")
    assert (n.cpu_milli, n.mem_mib, n.taints[0].key) == (16000, 65536, "nvidia.com/gpu")


def test_node_without_the_agent_uses_capacity_and_feature_discovery_labels() -> None:
    n = translate.node_info(node())
    assert len(n.gpus) == 4 and {g.model for g in n.gpus} == {"NVIDIA-T4"} and n.gpus[0].mem_mib == 15360


def test_assignment_round_trip_whole_and_mig() -> None:
    n = translate.node_info(node(**{ann.INVENTORY_ANNOTATION: INVENTORY}))
    spec = translate.pod_spec(pod(limits={"nvidia.com/mig-3g.40gb": 1}))
    decided = Placement(PodUid("uid-p"), n.name, 0, 0, mig_slices=(1,))
    a = translate.assignment(decided, n)
    assert a.mig == (ann.MigSliceRef("GPU-a", 1, "MIG-2"),)
    bound = pod(limits={"nvidia.com/mig-3g.40gb": 1})
    bound["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(a)}
    assert translate.placement(bound, n, spec).mig_slices == (1,)
    whole = Placement(PodUid("uid-p"), n.name, 0, 0, (1,), 1000, 81920)
    bound["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(translate.assignment(whole, n))}
    assert translate.placement(bound, n, spec).gpus == (1,)


def test_a_mig_assignment_finds_its_instance_by_uuid_after_a_layout_change_moved_it() -> None:
    """MIG-2 was slice 1 of GPU-a; a layout change destroyed MIG-1 and carved MIG-3 after it."""
    a = ann.GpuAssignment("n1", mig=(ann.MigSliceRef("GPU-a", 1, "MIG-2"),))
    bound = pod(limits={"nvidia.com/mig-3g.40gb": 1})
    bound["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(a)}
    spec = translate.pod_spec(bound)
    changed = ann.encode_inventory((
        ann.InventoryGpu("GPU-a", "NVIDIA-A100-SXM4-80GB", 81920, 0, 0, "d0", True, ("3g.40gb", "3g.40gb"),
                         ("MIG-2", "MIG-3")),))
    assert translate.placement(bound, translate.node_info(node(**{ann.INVENTORY_ANNOTATION: changed})),
                               spec).mig_slices == (0,)
    gone = ann.encode_inventory((
        ann.InventoryGpu("GPU-a", "NVIDIA-A100-SXM4-80GB", 81920, 0, 0, "d0", True, ("3g.40gb", "3g.40gb"),
                         ("MIG-4", "MIG-3")),))
    with pytest.raises(ModelError, match="MIG device MIG-2 is no longer on GPU GPU-a of node n1"):
        translate.placement(bound, translate.node_info(node(**{ann.INVENTORY_ANNOTATION: gone})), spec)


def test_queue_quantities_become_dimensions() -> None:
    q = translate.queue({"metadata": {"name": "team-a"}, "spec": {
        "parent": "org", "weight": 2, "guaranteed": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4},
        "limit": {"nvidia.com/gpu": 8}, "gpuModels": [{"model": "NVIDIA-H100", "guaranteed": 2}]}})
    assert q.parent == "org" and q.weight == 2.0
    assert dict(q.guaranteed) == {"cpu": 8000, "memory": 16384, "gpu": 4000, "gpu/NVIDIA-H100": 2000}
    assert dict(q.limit) == {"gpu": 8000}


def test_pod_group() -> None:
    g = translate.pod_group({"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 4}})
    assert (g.key, g.min_member) == ("ns/g", 4)
