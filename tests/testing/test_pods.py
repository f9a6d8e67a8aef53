"""pods/binding and the simulated kubelets."""

from __future__ import annotations

import time
from typing import Any

from gpufleet.testing.apiserver import DURATION_ANNOTATION, ApiServer, gpu_nodes

from .conftest import Client, binding, pod

PODS = "/api/v1/namespaces/default/pods"


def _wait(condition: Any, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_binding_sets_the_node_copies_annotations_and_marks_pod_scheduled(server: ApiServer, client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    status, out = client.call("POST", f"{PODS}/a/binding",
                              binding("a", "n1", annotations={"gpufleet.io/gpu-assignment": "{}"}))
    assert (status, out["kind"], out["status"]) == (201, "Status", "Success")
    bound = server.get("pods", "a")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"]["gpufleet.io/gpu-assignment"] == "{}"
    assert [(c["type"], c["status"]) for c in bound["status"]["conditions"]] == [("PodScheduled", "True")]


def test_binding_a_bound_pod_is_409(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    client.ok("POST", f"{PODS}/a/binding", binding("a", "n1"))
    status, out = client.call("POST", f"{PODS}/a/binding", binding("a", "n2"))
    assert (status, out["reason"]) == (409, "Conflict")
    assert out["message"] == 'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n1"'


def test_binding_with_another_pods_uid_is_409(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    status, out = client.call("POST", f"{PODS}/a/binding", binding("a", "n1", uid="not-this-pod"))
    assert status == 409 and "Precondition failed: UID in precondition: not-this-pod" in out["message"]


def test_binding_a_missing_pod_is_404(client: Client) -> None:
    assert client.call("POST", f"{PODS}/ghost/binding", binding("ghost", "n1"))[0] == 404


def test_the_legacy_bindings_collection_binds_too(server: ApiServer, client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    assert client.call("POST", "/api/v1/namespaces/default/bindings", binding("a", "n1"))[0] == 201
    assert (server.get("pods", "a") or {})["spec"]["nodeName"] == "n1"


def test_a_bound_pod_runs_then_succeeds_after_its_simulated_duration() -> None:
    with ApiServer(kubelet=True, kubelet_start_delay_s=0.01) as srv:
        client = Client(srv.url)
        srv.create(gpu_nodes(1, seed=3)[0])
        client.ok("POST", PODS, pod("a", annotations={DURATION_ANNOTATION: "0.3"}))
        client.ok("POST", PODS, pod("forever"))
        client.ok("POST", f"{PODS}/a/binding", binding("a", "gpu-node-000"))
        client.ok("POST", f"{PODS}/forever/binding", binding("forever", "gpu-node-000"))
        _wait(lambda: (srv.get("pods", "a") or {})["status"]["phase"] == "Running")
        running = srv.get("pods", "a") or {}
        assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
        assert running["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        assert running["status"]["startTime"] and running["status"]["podIP"]
        _wait(lambda: (srv.get("pods", "a") or {})["status"]["phase"] == "Succeeded")
        done = (srv.get("pods", "a") or {})["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (done["exitCode"], done["reason"]) == (0, "Completed")
        assert (srv.get("pods", "forever") or {})["status"]["phase"] == "Running"


def test_a_pod_bound_to_a_node_that_does_not_exist_stays_pending() -> None:
    with ApiServer(kubelet=True, kubelet_start_delay_s=0.01) as srv:
        client = Client(srv.url)
        client.ok("POST", PODS, pod("a"))
        client.ok("POST", f"{PODS}/a/binding", binding("a", "nowhere"))
        time.sleep(0.2)
        assert (srv.get("pods", "a") or {})["status"]["phase"] == "Pending"
