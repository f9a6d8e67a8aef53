"""pods/eviction against PodDisruptionBudgets."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from gpufleet.testing.apiserver import ApiServer, gpu_nodes

from .conftest import Client, binding, pod

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"namespace": "default"}}


def _pdb(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, **spec}}


@pytest.fixture
def running() -> Iterator[tuple[ApiServer, Client]]:
    """Three Running, Ready pods labelled app=train and one Running pod of another app."""
    with ApiServer(kubelet=True, kubelet_start_delay_s=0.0) as srv:
        client = Client(srv.url)
        srv.create(gpu_nodes(1, seed=0)[0])
        for name, app in (("t0", "train"), ("t1", "train"), ("t2", "train"), ("other", "web")):
            client.ok("POST", PODS, pod(name, labels={"app": app}))
            client.ok("POST", f"{PODS}/{name}/binding", binding(name, "gpu-node-000"))
        deadline = time.monotonic() + 3
        while any(p["status"]["phase"] != "Running" for p in srv.list("pods")):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield srv, client


def _evict(client: Client, name: str) -> tuple[int, Any]:
    return client.call("POST", f"{PODS}/{name}/eviction", {**EVICTION, "metadata": {"name": name}})


def test_evicting_an_unprotected_pod_deletes_it(running: tuple[ApiServer, Client]) -> None:
    srv, client = running
    status, out = _evict(client, "other")
    assert (status, out["status"]) == (201, "Success")
    assert srv.get("pods", "other") is None


CASES = [("minAvailable 2 of 3 allows one eviction", {"minAvailable": 2}, 1),
         ("maxUnavailable 1 allows one eviction", {"maxUnavailable": 1}, 1),
         ("minAvailable 100% allows none", {"minAvailable": "100%"}, 0),
         ("maxUnavailable 34% rounds up to two", {"maxUnavailable": "34%"}, 2)]


@pytest.mark.parametrize("what, spec, allowed", CASES, ids=[c[0] for c in CASES])
def test_a_budget_allows_so_many_evictions_then_answers_429(
        running: tuple[ApiServer, Client], what: str, spec: dict[str, Any], allowed: int) -> None:
    srv, client = running
    client.ok("POST", PDBS, _pdb("train", **spec))
    results = [_evict(client, name)[0] for name in ("t0", "t1", "t2")]
    assert results == [201] * allowed + [429] * (3 - allowed)
    status, out = _evict(client, "t2")
    assert (status, out["reason"]) == (429, "TooManyRequests")
    assert "disruption budget" in out["message"]
    assert out["details"]["causes"][0]["reason"] == "DisruptionBudget"


def test_two_budgets_selecting_one_pod_is_500(running: tuple[ApiServer, Client]) -> None:
    _, client = running
    client.ok("POST", PDBS, _pdb("a", minAvailable=1))
    client.ok("POST", PDBS, _pdb("b", minAvailable=1))
    status, out = _evict(client, "t0")
    assert status == 500 and "more than one PodDisruptionBudget" in out["message"]


def test_a_pending_pod_is_evicted_regardless_of_its_budget(client: Client) -> None:
    client.ok("POST", PODS, pod("p", labels={"app": "train"}))
    client.ok("POST", PDBS, _pdb("train", minAvailable="100%"))
    assert _evict(client, "p")[0] == 201
