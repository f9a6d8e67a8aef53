"""The in-memory and offline node APIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.agent.kube import FakeNodeApi, KubeAccessError, NodeCondition, NodePatch, OfflineNodeApi
from gpufleet.model import Taint


def test_patch_merges_labels_replaces_owned_taints_and_sets_capacity() -> None:
    api = FakeNodeApi(labels={"a": "1", "b": "2"})
    api.node.taints = [Taint("other/x"), Taint("mine/old")]
    api.patch_node(NodePatch(labels={"a": None, "c": "3"}, conditions=(NodeCondition("X", "True", "R", "m"),),
                             taint_prefix="mine/", taints=(Taint("mine/new"),), capacity={"r": 5}))
    assert api.node.labels == {"b": "2", "c": "3"}
    assert [t.key for t in api.node.taints] == ["other/x", "mine/new"]
    assert api.node.capacity == {"r": 5} and api.node.conditions["X"].status == "True"
    api.patch_node(NodePatch(capacity={"r": None}))
    assert api.node.capacity == {}


def test_an_unreachable_fake_api_raises_the_access_error() -> None:
    api = FakeNodeApi()
    api.fail = True
    with pytest.raises(KubeAccessError):
        api.pods_on_node()


def test_offline_api_writes_node_state_and_an_nfd_feature_file(tmp_path: Path) -> None:
    api = OfflineNodeApi(tmp_path / "node.json", tmp_path / "gfd", labels={"nvidia.com/device-plugin.config": "x"})
    api.patch_node(NodePatch(labels={"nvidia.com/gpu.count": "8"}, annotations={"k": "v"}))
    assert api.node_labels() == {"nvidia.com/device-plugin.config": "x"}
    with pytest.raises(KubeAccessError, match="no Kubernetes API access"):
        api.pods_on_node()
    state = json.loads((tmp_path / "node.json").read_text())
    assert state["labels"] == {"nvidia.com/gpu.count": "8"} and state["annotations"] == {"k": "v"}
    assert (tmp_path / "gfd").read_text() == "nvidia.com/gpu.count=8\n"
