"""CustomResourceDefinitions and the custom resources they serve: discovery, schema, status."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.testing.apiserver import ApiServer

from .conftest import Client
from .crds import PODGROUP_CRD, QUEUE_CRD, podgroup, queue

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PGS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
QUEUES = "/apis/gpufleet.io/v1alpha1/queues"


@pytest.fixture
def crds(client: Client) -> Client:
    client.ok("POST", CRDS, PODGROUP_CRD)
    client.ok("POST", CRDS, QUEUE_CRD)
    return client


def test_a_created_crd_is_established_and_its_resource_discoverable(crds: Client) -> None:
    got = crds.ok("GET", f"{CRDS}/podgroups.scheduling.x-k8s.io")
    assert {c["type"]: c["status"] for c in got["status"]["conditions"]} == {"NamesAccepted": "True",
                                                                             "Established": "True"}
    groups = {g["name"] for g in crds.ok("GET", "/apis")["groups"]}
    assert {"scheduling.x-k8s.io", "gpufleet.io"} <= groups
    resources = crds.ok("GET", "/apis/scheduling.x-k8s.io/v1alpha1")["resources"]
    entry = next(r for r in resources if r["name"] == "podgroups")
    assert (entry["kind"], entry["namespaced"], entry["shortNames"]) == ("PodGroup", True, ["pg", "pgs"])
    assert any(r["name"] == "podgroups/status" for r in resources)


def test_a_namespaced_and_a_cluster_scoped_custom_resource_round_trip(server: ApiServer, crds: Client) -> None:
    crds.ok("POST", PGS, podgroup("g1", 4))
    crds.ok("POST", QUEUES, queue("research", 2, guaranteed={"nvidia.com/gpu": 8, "memory": "64Gi"}))
    assert crds.ok("GET", f"{PGS}/g1")["spec"]["minMember"] == 4
    assert crds.ok("GET", f"{QUEUES}/research")["spec"]["guaranteed"] == {"nvidia.com/gpu": 8, "memory": "64Gi"}
    assert [q["metadata"]["name"] for q in server.list("queues")] == ["research"]
    assert server.get("podgroups", "g1", "default") is not None


def test_schema_defaults_fill_missing_fields(crds: Client) -> None:
    assert crds.ok("POST", PGS, podgroup("g1"))["spec"]["scheduleTimeoutSeconds"] == 60


def test_unknown_fields_are_pruned_or_refused_under_strict_validation(crds: Client) -> None:
    out = crds.ok("POST", PGS, podgroup("g1", bogus=1))
    assert "bogus" not in out["spec"]
    status, body = crds.call("POST", f"{PGS}?fieldValidation=Strict", podgroup("g2", bogus=1))
    assert status == 400 and 'unknown field "spec.bogus"' in body["message"]


def test_preserve_unknown_fields_keeps_what_the_schema_does_not_list(crds: Client) -> None:
    out = crds.ok("POST", QUEUES, queue("q", extra={"anything": {"goes": True}}))
    assert out["spec"]["extra"] == {"anything": {"goes": True}}


CASES: list[tuple[str, dict[str, Any], str, str, str]] = [
    ("a string where an integer belongs", podgroup("bad", "lots"), PGS, "spec.minMember",
     'spec.minMember: Invalid value: "string": spec.minMember in body must be of type integer: "string"'),
    ("a value below the minimum", podgroup("bad", 0), PGS, "spec.minMember",
     "spec.minMember: Invalid value: 0: spec.minMember in body should be greater than or equal to 1"),
    ("a quantity that is neither integer nor string", podgroup("bad", 2, minResources={"cpu": [1]}), PGS,
     "spec.minResources.cpu", "spec.minResources.cpu"),
    ("a missing required field", {**queue("bad"), "spec": {"parent": "root"}}, QUEUES, "spec.weight",
     "spec.weight: Required value"),
]


@pytest.mark.parametrize("what, body, path, field, message", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_custom_resource_is_422_invalid_naming_the_field(
        crds: Client, what: str, body: dict[str, Any], path: str, field: str, message: str) -> None:
    status, out = crds.call("POST", path, body)
    assert (status, out["reason"]) == (422, "Invalid")
    assert out["details"]["causes"][0]["field"] == field
    assert message in out["message"]


def test_an_int_or_string_quantity_accepts_both(crds: Client) -> None:
    out = crds.ok("POST", PGS, podgroup("g", 2, minResources={"cpu": 4, "memory": "1Gi"}))
    assert out["spec"]["minResources"] == {"cpu": 4, "memory": "1Gi"}


def test_the_status_subresource_alone_changes_status(crds: Client) -> None:
    created = crds.ok("POST", PGS, {**podgroup("g"), "status": {"phase": "Running"}})
    assert "status" not in created  # ignored on create when the status subresource exists
    merge = "application/merge-patch+json"
    out = crds.ok("PATCH", f"{PGS}/g/status", {"status": {"phase": "Scheduling"}, "spec": {"minMember": 9}}, merge)
    assert (out["status"]["phase"], out["spec"]["minMember"]) == ("Scheduling", 2)
    status, body = crds.call("PATCH", f"{PGS}/g/status", {"status": {"phase": "Sleeping"}}, merge)
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.phase"


def test_spec_changes_bump_the_generation_and_status_changes_do_not(crds: Client) -> None:
    crds.ok("POST", PGS, podgroup("g"))
    merge = "application/merge-patch+json"
    assert crds.ok("PATCH", f"{PGS}/g", {"spec": {"minMember": 3}}, merge)["metadata"]["generation"] == 2
    assert crds.ok("PATCH", f"{PGS}/g/status", {"status": {"phase": "Running"}}, merge)["metadata"]["generation"] == 2


def test_strategic_merge_patch_on_a_custom_resource_is_415(crds: Client) -> None:
    crds.ok("POST", PGS, podgroup("g"))
    status, _ = crds.call("PATCH", f"{PGS}/g", {"spec": {"minMember": 3}}, "application/strategic-merge-patch+json")
    assert status == 415


def test_deleting_the_crd_stops_serving_and_removes_its_objects(server: ApiServer, crds: Client) -> None:
    crds.ok("POST", PGS, podgroup("g"))
    crds.ok("DELETE", f"{CRDS}/podgroups.scheduling.x-k8s.io")
    assert crds.call("GET", PGS)[0] == 404
    assert server.store.count("podgroups.scheduling.x-k8s.io") == 0


def test_a_crd_whose_name_is_not_plural_dot_group_is_422(client: Client) -> None:
    bad = {**PODGROUP_CRD, "metadata": {"name": "groups.example.com"}}
    status, out = client.call("POST", CRDS, bad)
    assert status == 422 and out["details"]["causes"][0]["field"] == "metadata.name"


def test_custom_resources_can_be_watched(crds: Client) -> None:
    rv = crds.ok("GET", QUEUES)["metadata"]["resourceVersion"]
    crds.ok("POST", QUEUES, queue("q1"))
    crds.ok("POST", QUEUES, queue("end"))
    events = crds.watch_until(f"{QUEUES}?watch=true&resourceVersion={rv}", "end")
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "Queue", "q1")]


def test_the_python_api_updates_a_custom_resource_and_its_status(server: ApiServer, crds: Client) -> None:
    created = crds.ok("POST", PGS, podgroup("g"))
    server.update({**created, "spec": {**created["spec"], "minMember": 5}})
    server.update({**created, "status": {"phase": "Running"}}, status=True)
    got = server.get("podgroups", "g", "default") or {}
    assert (got["spec"]["minMember"], got["status"]["phase"]) == (5, "Running")
