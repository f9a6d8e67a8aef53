"""The public API of `gpufleet.testing.apiserver`, discovery and OpenAPI, and shutdown."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest
import yaml

import gpufleet.testing.apiserver as apiserver
from gpufleet.testing.apiserver import ApiServer

from .conftest import Client, pod


def test_the_public_api_is_pinned() -> None:
    assert sorted(apiserver.__all__) == ["ApiError", "ApiServer", "DURATION_ANNOTATION", "EXIT_CODE_ANNOTATION",
                                         "RequestRecord", "gpu_nodes"]


def test_the_kubeconfig_points_at_the_server_without_credentials(server: ApiServer, tmp_path: Path) -> None:
    config = yaml.safe_load(server.write_kubeconfig(tmp_path / "k").read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    assert cluster == {"server": server.url} and server.url.startswith("http://127.0.0.1:")


NAMES = [("pods", "pods"), ("po", "pods"), ("leases", "leases.coordination.k8s.io"),
         ("leases.coordination.k8s.io", "leases.coordination.k8s.io"), ("events", "events"),
         ("events.events.k8s.io", "events.events.k8s.io"), ("pdb", "poddisruptionbudgets.policy")]


@pytest.mark.parametrize("name, key", NAMES, ids=[f"{n} names {k}" for n, k in NAMES])
def test_python_api_resource_names(server: ApiServer, name: str, key: str) -> None:
    assert server.resource(name).key == key


def test_python_api_reads_events_written_through_either_api(server: ApiServer) -> None:
    server.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"},
                   "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Scheduled", "message": "ok",
                   "type": "Normal"})
    got = server.get("events.events.k8s.io", "e1", "default")
    assert got is not None and (got["regarding"]["name"], got["note"]) == ("p", "ok")


def test_discovery_lists_resources_with_verbs_and_subresources(client: Client) -> None:
    core = client.ok("GET", "/api/v1")["resources"]
    pods = next(r for r in core if r["name"] == "pods")
    assert (pods["namespaced"], pods["kind"], pods["shortNames"]) == (True, "Pod", ["po"])
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(pods["verbs"])
    names = {r["name"] for r in core}
    assert {"pods/binding", "pods/eviction", "pods/status", "nodes/status"} <= names
    assert client.ok("GET", "/api")["versions"] == ["v1"]
    assert client.ok("GET", "/version")["major"] == "1"
    groups = {g["name"] for g in client.ok("GET", "/apis")["groups"]}
    assert {"coordination.k8s.io", "events.k8s.io", "policy", "apiextensions.k8s.io"} <= groups


def test_openapi_v3_declares_field_validation_on_every_patch(client: Client) -> None:
    root = client.ok("GET", "/openapi/v3")["paths"]
    doc = client.ok("GET", root["api/v1"]["serverRelativeURL"])
    item = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert item["patch"]["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert any(p["name"] == "fieldValidation" for p in item["parameters"])


def test_an_expired_continue_token_is_410() -> None:
    with ApiServer(kubelet=False, history=2) as srv:
        client = Client(srv.url)
        for name in "abc":
            client.ok("POST", "/api/v1/namespaces/default/pods", pod(name))
        token = client.ok("GET", "/api/v1/pods?limit=1")["metadata"]["continue"]
        for name in "def":
            client.ok("POST", "/api/v1/namespaces/default/pods", pod(name))
        status, out = client.call("GET", f"/api/v1/pods?limit=1&continue={token}")
        assert (status, out["reason"]) == (410, "Expired")


def test_stopping_the_server_drops_kept_alive_connections() -> None:
    srv = ApiServer(kubelet=False).start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=2)
    conn.request("GET", "/api/v1/nodes")
    conn.getresponse().read()
    srv.stop()
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", "/api/v1/nodes")
        conn.getresponse().read()
