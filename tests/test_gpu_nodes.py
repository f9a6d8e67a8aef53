"""`gpu_nodes`: realistic GPU nodes whose annotation follows the scheduler/agent contract (that
the real kube-apiserver stores them as generated and KWOK makes them Ready:
tests/live/test_snapshot_live.py)."""

from __future__ import annotations

from gpufleet.model import annotations as ann
from gpufleet.testing.gpu_nodes import gpu_nodes


def test_the_same_seed_gives_the_same_fleet_and_another_seed_another() -> None:
    assert gpu_nodes(20, seed=7) == gpu_nodes(20, seed=7)
    assert gpu_nodes(20, seed=7) != gpu_nodes(20, seed=8)


def test_a_fleet_mixes_models_counts_and_mig() -> None:
    nodes = gpu_nodes(60, seed=1)
    products = {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in nodes}
    assert {"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "NVIDIA-A10"} <= products
    counts = {len(ann.decode_inventory(n["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])) for n in nodes}
    assert {1, 4, 8} <= counts
    assert any(k.startswith(ann.MIG_RESOURCE_PREFIX) for n in nodes for k in n["status"]["allocatable"])


def test_capacity_matches_the_inventory_annotation() -> None:
    for node in gpu_nodes(30, seed=2):
        gpus = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
        whole = [g for g in gpus if not g.mig]
        cap = node["status"]["capacity"]
        assert int(cap[ann.GPU_RESOURCE]) == len(whole)
        assert int(cap.get(ann.GPU_MILLI_RESOURCE, 0)) == 1000 * len(whole)
        slices = sum(int(v) for k, v in cap.items() if ann.mig_profile_of(k))
        assert slices == sum(len(g.mig) for g in gpus)
        assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == str(len(whole))
        assert node["status"]["allocatable"] == cap
