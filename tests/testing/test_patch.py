"""Merge, strategic merge and JSON patches, as kubectl and gpufleet send them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.testing.apiserver import patch

from .conftest import Client, pod

PODS = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"


def _status(conditions: list[dict[str, str]]) -> dict[str, Any]:
    return {"status": {"conditions": conditions}}


CASES: list[tuple[str, str, dict[str, Any], Any, dict[str, Any]]] = [
    ("merge patch replaces lists and null deletes a key", patch.MERGE,
     {"a": [1, 2], "b": {"c": 1, "d": 2}}, {"a": [3], "b": {"c": None}}, {"a": [3], "b": {"d": 2}}),
    ("strategic merge merges conditions by type", patch.STRATEGIC,
     _status([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]),
     _status([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
     _status([{"type": "Ready", "status": "True"},
              {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])),
    ("strategic merge merges containers and their env by name", patch.STRATEGIC,
     {"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]}, {"name": "b", "image": "y"}]},
     {"containers": [{"name": "a", "env": [{"name": "F", "value": "2"}]}]},
     {"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}, {"name": "F", "value": "2"}]},
                     {"name": "b", "image": "y"}]}),
    ("$patch delete removes one list item by key", patch.STRATEGIC,
     _status([{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]),
     _status([{"type": "A", "$patch": "delete"}]), _status([{"type": "B", "status": "True"}])),
    ("$patch replace on a map replaces it whole", patch.STRATEGIC,
     {"m": {"a": 1, "b": 2}}, {"m": {"$patch": "replace", "c": 3}}, {"m": {"c": 3}}),
    ("$setElementOrder from kubectl apply orders and is not stored", patch.STRATEGIC,
     {"containers": [{"name": "a"}, {"name": "b"}]},
     {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "z"}]},
     {"containers": [{"name": "b", "image": "z"}, {"name": "a"}]}),
    ("finalizers merge as a set", patch.STRATEGIC, {"finalizers": ["a"]}, {"finalizers": ["b", "a"]},
     {"finalizers": ["a", "b"]}),
    ("$deleteFromPrimitiveList removes values", patch.STRATEGIC, {"finalizers": ["a", "b"]},
     {"$deleteFromPrimitiveList/finalizers": ["a"]}, {"finalizers": ["b"]}),
    ("json patch adds, replaces and removes", patch.JSON_PATCH, {"a": {"b": 1}, "l": [1, 3]},
     [{"op": "add", "path": "/l/1", "value": 2}, {"op": "replace", "path": "/a/b", "value": 5},
      {"op": "add", "path": "/a/c~1d", "value": 0}, {"op": "remove", "path": "/a/b"}],
     {"a": {"c/d": 0}, "l": [1, 2, 3]}),
]


@pytest.mark.parametrize("what, kind, target, body, expected", CASES, ids=[c[0] for c in CASES])
def test_patch(what: str, kind: str, target: dict[str, Any], body: Any, expected: dict[str, Any]) -> None:
    before = repr(target)
    assert patch.apply_patch(kind, target, body, custom=False) == expected
    assert repr(target) == before  # the stored object is never modified in place


def test_a_failed_json_patch_test_operation_is_422(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    status, _ = client.call("PATCH", f"{PODS}/a", [{"op": "test", "path": "/metadata/name", "value": "b"}],
                            patch.JSON_PATCH)
    assert status == 422


def test_an_unknown_patch_type_is_415(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    assert client.call("PATCH", f"{PODS}/a", {}, "application/apply-patch+yaml")[0] == 415


def test_the_scheduler_s_unschedulable_condition_merges_into_pod_status(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}
    out = client.ok("PATCH", f"{PODS}/a/status", {"status": {"conditions": [condition]}}, STRATEGIC)
    assert out["status"]["conditions"] == [condition]
    assert out["status"]["phase"] == "Pending"
