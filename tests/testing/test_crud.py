"""Create, read, update, delete and optimistic concurrency over HTTP, as kube-apiserver answers."""

from __future__ import annotations

from gpufleet.testing.apiserver import ApiServer

from .conftest import Client, pod

PODS = "/api/v1/namespaces/default/pods"


def test_create_assigns_uid_creation_time_and_resource_version(client: Client) -> None:
    created = client.ok("POST", PODS, pod("a"))
    m = created["metadata"]
    assert m["uid"] and m["creationTimestamp"].endswith("Z") and int(m["resourceVersion"]) > 0
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert client.ok("GET", f"{PODS}/a")["metadata"]["uid"] == m["uid"]


def test_creating_an_existing_name_is_409_already_exists(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    status, body = client.call("POST", PODS, pod("a"))
    assert (status, body["kind"], body["reason"], body["message"]) == (
        409, "Status", "AlreadyExists", 'pods "a" already exists')


def test_generate_name_gets_a_random_suffix(client: Client) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "job-"}
    name = client.ok("POST", PODS, body)["metadata"]["name"]
    assert name.startswith("job-") and len(name) == len("job-") + 5


def test_a_missing_name_is_422_naming_the_field(client: Client) -> None:
    body = pod("")
    body["metadata"] = {}
    status, out = client.call("POST", PODS, body)
    assert (status, out["reason"], out["details"]["causes"][0]["field"]) == (422, "Invalid", "metadata.name")


def test_a_pod_without_an_image_is_422_naming_the_container_field(client: Client) -> None:
    body = pod("a")
    del body["spec"]["containers"][0]["image"]
    status, out = client.call("POST", PODS, body)
    assert status == 422 and out["details"]["causes"][0]["field"] == "spec.containers[0].image"


def test_an_update_with_a_stale_resource_version_is_409_conflict(client: Client) -> None:
    first = client.ok("POST", PODS, pod("a"))
    first["metadata"]["labels"] = {"x": "1"}
    client.ok("PUT", f"{PODS}/a", first)
    first["metadata"]["labels"] = {"x": "2"}
    status, out = client.call("PUT", f"{PODS}/a", first)
    assert (status, out["reason"]) == (409, "Conflict")
    assert "the object has been modified" in out["message"]


def test_a_patch_carrying_a_stale_resource_version_is_409(client: Client) -> None:
    created = client.ok("POST", PODS, pod("a"))
    client.ok("PATCH", f"{PODS}/a", {"metadata": {"labels": {"x": "1"}}}, "application/merge-patch+json")
    status, _ = client.call("PATCH", f"{PODS}/a", {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"],
                                                                "labels": {"x": "2"}}}, "application/merge-patch+json")
    assert status == 409


def test_an_update_that_changes_nothing_keeps_the_resource_version(client: Client) -> None:
    created = client.ok("POST", PODS, pod("a"))
    again = client.ok("PUT", f"{PODS}/a", created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_the_pod_spec_is_immutable_except_images(client: Client) -> None:
    created = client.ok("POST", PODS, pod("a"))
    created["spec"]["containers"][0]["image"] = "busybox:2"
    client.ok("PUT", f"{PODS}/a", created)
    status, out = client.call("PATCH", f"{PODS}/a", {"spec": {"nodeName": "n1"}}, "application/merge-patch+json")
    assert status == 422 and "pod updates may not change fields" in out["message"]


def test_the_main_resource_ignores_status_and_the_status_subresource_ignores_the_rest(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    out = client.ok("PATCH", f"{PODS}/a", {"status": {"phase": "Running"}, "metadata": {"labels": {"k": "v"}}},
                    "application/merge-patch+json")
    assert out["status"]["phase"] == "Pending" and out["metadata"]["labels"] == {"k": "v"}
    out = client.ok("PATCH", f"{PODS}/a/status", {"status": {"phase": "Running"}, "metadata": {"labels": {"k": "w"}}},
                    "application/merge-patch+json")
    assert out["status"]["phase"] == "Running" and out["metadata"]["labels"] == {"k": "v"}


def test_a_namespaced_object_in_a_missing_namespace_is_404(client: Client) -> None:
    status, out = client.call("POST", "/api/v1/namespaces/nowhere/pods", pod("a", namespace="nowhere"))
    assert (status, out["message"]) == (404, 'namespaces "nowhere" not found')


def test_delete_removes_at_once_and_a_second_delete_is_404(client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    assert client.ok("DELETE", f"{PODS}/a")["metadata"]["name"] == "a"
    assert client.call("GET", f"{PODS}/a")[0] == 404
    assert client.call("DELETE", f"{PODS}/a")[0] == 404


def test_deleting_a_namespace_deletes_what_is_in_it(server: ApiServer, client: Client) -> None:
    client.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    client.ok("POST", "/api/v1/namespaces/team/pods", pod("a", namespace="team"))
    client.ok("DELETE", "/api/v1/namespaces/team")
    assert server.list("pods", "team") == []


def test_leases_refuse_times_without_six_fractional_digits(client: Client) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "gpufleet"},
             "spec": {"holderIdentity": "a", "renewTime": "2026-01-01T00:00:00Z"}}
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    status, out = client.call("POST", path, lease)
    assert status == 400 and "2006-01-02T15:04:05.000000Z07:00" in out["message"]
    lease["spec"]["renewTime"] = "2026-01-01T00:00:00.000000Z"
    assert client.ok("POST", path, lease)["spec"]["holderIdentity"] == "a"


def test_list_supports_limit_and_continue(client: Client) -> None:
    for name in "abcde":
        client.ok("POST", PODS, pod(name))
    first = client.ok("GET", f"{PODS}?limit=2")
    second = client.ok("GET", f"{PODS}?limit=2&continue={first['metadata']['continue']}")
    rest = client.ok("GET", f"{PODS}?limit=2&continue={second['metadata']['continue']}")
    names = [p["metadata"]["name"] for page in (first, second, rest) for p in page["items"]]
    assert names == list("abcde") and "continue" not in rest["metadata"]


def test_the_python_api_reads_what_http_wrote_and_hands_out_copies(server: ApiServer, client: Client) -> None:
    client.ok("POST", PODS, pod("a"))
    got = server.get("pods", "a")
    assert got is not None
    got["metadata"]["name"] = "changed"
    assert [p["metadata"]["name"] for p in server.list("pods")] == ["a"]
    server.delete("pods", "a")
    assert server.get("pods", "a") is None
