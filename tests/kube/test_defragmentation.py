"""The live defragmentation driver's pure parts: PodDisruptionBudgets as defragmentation sees them
(label selectors, namespaces, the controller's disruptionsAllowed) and the units it plans for.
The whole path runs on the real control plane in tests/live/test_defrag_live.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube import translate
from gpufleet.kube.defragmentation import units
from gpufleet.kube.disruption_budgets import live_budgets, selects
from gpufleet.model import PodUid


@pytest.mark.parametrize("selector,labels,expected", [
    ({}, {"app": "x"}, True),
    (None, {"app": "x"}, False),
    ({"matchLabels": {"app": "x"}}, {"app": "x", "tier": "1"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "y"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}, {"app": "y"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, {}, False),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, {"app": "x"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": ""}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, {"app": "2"}, False),
], ids=["empty selects all", "none selects none", "matchLabels", "matchLabels differ", "In", "In without the key",
        "NotIn without the key", "NotIn", "Exists", "DoesNotExist", "an unknown operator matches nothing"])
def test_label_selectors_as_kubernetes_reads_them(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


def _pod(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels}}


def _pdb(name: str, namespace: str, selector: Any, status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector}, "status": status}


def test_a_budget_selects_only_its_namespace_and_allows_what_its_status_says() -> None:
    pods = [_pod("a", "team-a", app="x"), _pod("b", "team-b", app="x"), _pod("c", "team-a", app="y")]
    budgets = live_budgets([_pdb("keep", "team-a", {"matchLabels": {"app": "x"}}, {"disruptionsAllowed": 1}),
                            _pdb("new", "team-b", {}, None)], pods)
    assert [(b.name, sorted(b.pods), b.disruptions_allowed) for b in budgets] == [
        ("team-a/keep", [PodUid("uid-a")], 1), ("team-b/new", [PodUid("uid-b")], 0)]  # no status yet: nothing


def test_units_are_single_pods_and_gangs_in_queue_order() -> None:
    def spec(name: str, group: str | None = None) -> Any:
        obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                                            "labels": {"scheduling.x-k8s.io/pod-group": group} if group else {}},
                               "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c", "resources": {
                                   "limits": {"nvidia.com/gpu": "4"}}}]}}
        return translate.pod_spec(obj)
    specs = [spec("solo"), spec("g-0", "g"), spec("other"), spec("g-1", "g"), spec("bound")]
    waiting = {s.uid for s in specs} - {PodUid("uid-bound")}
    assert [[s.name for s in u] for u in units(specs, waiting)] == [["solo"], ["g-0", "g-1"], ["other"]]
