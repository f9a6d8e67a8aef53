"""The CRDs: PodGroup as scheduler-plugins defines it, Queue as gpufleet's model reads it, and
schemas that reject malformed objects (the issue's "malformed CRs are rejected by schema")."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from gpufleet.model import annotations as ann
from tests.deploy import manifests
from tests.deploy.manifests import Obj

QUEUE = "gpufleet.io/v1alpha1"
PODGROUP = "scheduling.x-k8s.io/v1alpha1"


def crd(crds: list[Obj], name: str) -> Obj:
    return manifests.find(crds, "CustomResourceDefinition", name)


def schema(crds: list[Obj], api_version: str, kind: str) -> Obj:
    return manifests.crd_schema(crds, api_version, kind)


@pytest.mark.parametrize("name", ["podgroups.scheduling.x-k8s.io", "queues.gpufleet.io"])
def test_crd_schemas_are_structural(crds: list[Obj], name: str) -> None:
    (version,) = crd(crds, name)["spec"]["versions"]
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    assert list(manifests.structural_problems(version["schema"]["openAPIV3Schema"])) == []


def test_podgroup_matches_scheduler_plugins_coscheduling(crds: list[Obj]) -> None:
    """Names and fields of scheduler-plugins' apis/scheduling/v1alpha1 PodGroup."""
    spec = crd(crds, "podgroups.scheduling.x-k8s.io")["spec"]
    assert spec["group"] == "scheduling.x-k8s.io" and spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                             "singular": "podgroup", "shortNames": ["pg", "pgs"]}
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Phase", "MinMember", "Running", "Succeeded", "Failed", "Age"]
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    assert set(props["status"]["properties"]) == {"phase", "occupiedBy", "running", "succeeded", "failed",
                                                  "scheduleStartTime"}
    assert props["spec"]["properties"]["minMember"]["format"] == "int32"
    assert props["spec"]["properties"]["minMember"]["minimum"] == 1


def test_queue_is_a_cluster_scoped_gpufleet_kind_with_the_model_fields(crds: list[Obj]) -> None:
    spec = crd(crds, "queues.gpufleet.io")["spec"]
    assert spec["group"] == "gpufleet.io" and spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "Queue" and spec["names"]["plural"] == "queues"
    assert not {"q", "queue", "queues", "pg", "cq", "lq"} & set(spec["names"]["shortNames"])
    props = schema(crds, QUEUE, "Queue")["properties"]
    # gpufleet.model.queue.Queue's fields, in the CR's spelling (gpuModels -> gpu/<model> dimensions)
    assert set(props["spec"]["properties"]) == {"parent", "weight", "borrow", "guaranteed", "limit", "gpuModels",
                                                "namespaces"}
    assert set(props["spec"]["properties"]["guaranteed"]["properties"]) == {"cpu", "memory", ann.GPU_RESOURCE}
    assert set(props["status"]["properties"]) == {"allocated", "pending", "fairShare", "conditions"}


VALID_QUEUE: Obj = {
    "apiVersion": QUEUE, "kind": "Queue", "metadata": {"name": "team-a", "labels": {"x": "y"}},
    "spec": {"parent": "org", "weight": 1.5, "borrow": False, "namespaces": ["team-a", "team-a-dev"],
             "guaranteed": {"cpu": "500m", "memory": "64Gi", "nvidia.com/gpu": 4},
             "limit": {"cpu": 32, "memory": "1e12", "nvidia.com/gpu": "8"},
             "gpuModels": [{"model": "NVIDIA-H100-80GB-HBM3", "guaranteed": 2, "limit": "4"},
                           {"model": "NVIDIA-A100-SXM4-40GB"}]},
    "status": {"allocated": {"nvidia.com/gpu": "3"}, "pending": 2, "fairShare": {"nvidia.com/gpu": "2500m"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "",
                               "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
}
VALID_PODGROUP: Obj = {
    "apiVersion": PODGROUP, "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"},
    "spec": {"minMember": 4, "minResources": {"cpu": "4", "nvidia.com/gpu": 8}, "scheduleTimeoutSeconds": 60},
    "status": {"phase": "Running", "occupiedBy": "uid", "running": 4, "succeeded": 0, "failed": 0,
               "scheduleStartTime": "2026-01-01T00:00:00Z"},
}


def with_(base: Obj, edit: Callable[[Any], None]) -> Obj:
    obj = copy.deepcopy(base)
    edit(obj)
    return obj


def spec_set(**changes: Any) -> Callable[[Any], None]:
    return lambda o: o["spec"].update(changes)


def test_well_formed_queue_and_podgroup_are_accepted(crds: list[Obj]) -> None:
    assert manifests.validate_custom(VALID_QUEUE, crds) == []
    assert manifests.validate_custom(VALID_PODGROUP, crds) == []
    assert manifests.validate_custom({"apiVersion": QUEUE, "kind": "Queue", "metadata": {"name": "q"}}, crds) == []


MALFORMED = [
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["guaranteed"].update({"nvidia.com/gpu": "-1"}), "nvidia.com/gpu",
                 id="queue: a negative GPU quantity (string) is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["limit"].update(cpu=-2), "limit.cpu",
                 id="queue: a negative integer quantity is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["guaranteed"].update(memory="-64Gi"), "guaranteed.memory",
                 id="queue: a negative memory quantity is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["guaranteed"].update(memory="64 GB"), "guaranteed.memory",
                 id="queue: a malformed quantity is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["limit"].update({"nvidia.com/gpu": "1.5"}), "nvidia.com/gpu",
                 id="queue: a fraction of a GPU in a quota is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["guaranteed"].update({"nvidia.com/gpus": 2}), "nvidia.com/gpus",
                 id="queue: an unknown resource key in guaranteed is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["limit"].update(gpu=2), "gpu",
                 id="queue: an unknown resource key in limit is rejected"),
    pytest.param(VALID_QUEUE, spec_set(weight=0), "weight", id="queue: weight 0 is rejected"),
    pytest.param(VALID_QUEUE, spec_set(weight=-1), "weight", id="queue: a negative weight is rejected"),
    pytest.param(VALID_QUEUE, spec_set(weight="2"), "weight", id="queue: a weight as a string is rejected"),
    pytest.param(VALID_QUEUE, spec_set(borrow="yes"), "borrow", id="queue: borrow must be a boolean"),
    pytest.param(VALID_QUEUE, spec_set(parent="Team_A"), "parent", id="queue: a parent that is no queue name is rejected"),
    pytest.param(VALID_QUEUE, spec_set(guaranted={"cpu": 1}), "guaranted", id="queue: a misspelt spec field is rejected"),
    pytest.param(VALID_QUEUE, spec_set(namespaces=[]), "namespaces",
                 id="queue: an empty namespace list is rejected (leave it out to admit every namespace)"),
    pytest.param(VALID_QUEUE, spec_set(namespaces=["Team_A"]), "namespaces",
                 id="queue: a namespace that is no namespace name is rejected"),
    pytest.param(VALID_QUEUE, spec_set(namespaces="team-a"), "namespaces", id="queue: namespaces must be a list"),
    pytest.param(VALID_QUEUE, spec_set(namespaces=["team-a", "team-a"]), "namespaces",
                 id="queue: a namespace listed twice is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["gpuModels"][0].pop("model"), "model",
                 id="queue: a gpuModels entry without a model is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["gpuModels"][0].update(limit=-4), "gpuModels",
                 id="queue: a negative per-model limit is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["spec"]["gpuModels"][1].update(model="NVIDIA-H100-80GB-HBM3"), "duplicate",
                 id="queue: two gpuModels entries for one model are rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["metadata"].update(name="x" * 64), "metadata.name",
                 id="queue: a name too long for the gpufleet.io/queue label is rejected"),
    pytest.param(VALID_QUEUE, lambda o: o["status"].update(pending=-1), "pending",
                 id="queue: a negative pending count is rejected"),
    pytest.param(VALID_PODGROUP, spec_set(minMember=0), "minMember", id="podgroup: minMember 0 is rejected"),
    pytest.param(VALID_PODGROUP, spec_set(minMember="4"), "minMember", id="podgroup: minMember as a string is rejected"),
    pytest.param(VALID_PODGROUP, spec_set(minMembers=4), "minMembers", id="podgroup: a misspelt field is rejected"),
    pytest.param(VALID_PODGROUP, spec_set(scheduleTimeoutSeconds=0), "scheduleTimeoutSeconds",
                 id="podgroup: a zero timeout is rejected"),
    pytest.param(VALID_PODGROUP, lambda o: o["spec"]["minResources"].update(memory="-1Gi"), "memory",
                 id="podgroup: a negative minResources quantity is rejected"),
    pytest.param(VALID_PODGROUP, lambda o: o["spec"]["minResources"].update(cpu="four"), "cpu",
                 id="podgroup: a malformed minResources quantity is rejected"),
    pytest.param(VALID_PODGROUP, lambda o: o["status"].update(running=-1), "running",
                 id="podgroup: a negative running count is rejected"),
]


@pytest.mark.parametrize(("base", "edit", "mentions"), MALFORMED)
def test_malformed_custom_resources_are_rejected_by_the_crd_schema(
        crds: list[Obj], base: Obj, edit: Callable[[Any], None], mentions: str) -> None:
    problems = manifests.validate_custom(with_(base, edit), crds)
    assert problems, "accepted"
    assert any(mentions in p for p in problems), problems
