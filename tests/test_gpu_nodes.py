"""`gpu_nodes`: realistic GPU nodes whose annotation follows the scheduler/agent contract (that
the real kube-apiserver stores them as generated and KWOK makes them Ready:
tests/live/test_snapshot_live.py)."""

from __future__ import annotations

import copy
import time
import types
from typing import Any

import pytest

from gpufleet.model import annotations as ann
from gpufleet.testing import gpu_nodes as gpu_nodes_module
from gpufleet.testing.gpu_nodes import gpu_nodes

TIMES = ("lastHeartbeatTime", "lastTransitionTime")


def timeless(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes without their conditions' wall-clock times (the only part a seed does not fix)."""
    out = copy.deepcopy(nodes)
    for node in out:
        for condition in node["status"]["conditions"]:
            for key in TIMES:
                del condition[key]
    return out


def test_the_same_seed_gives_the_same_fleet_and_another_seed_another(monkeypatch: pytest.MonkeyPatch) -> None:
    first = gpu_nodes(20, seed=7)
    # The second fleet is made an hour later on the wall clock, so a comparison that looked
    # at heartbeat times would fail every time rather than only when a second ticks over.
    later = types.SimpleNamespace(strftime=time.strftime, gmtime=lambda: time.gmtime(time.time() + 3600))
    monkeypatch.setattr(gpu_nodes_module, "time", later)
    again = gpu_nodes(20, seed=7)
    assert {c[k] for n in first for c in n["status"]["conditions"] for k in TIMES} \
        != {c[k] for n in again for c in n["status"]["conditions"] for k in TIMES}
    assert timeless(first) == timeless(again)
    assert timeless(first) != timeless(gpu_nodes(20, seed=8))


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
