"""deploy/samples/: every object validates (built-in kinds against the Kubernetes schemas, Queue
and PodGroup against our CRDs), every pod is gpufleet's, and the samples fit together."""

from __future__ import annotations

from collections import Counter

import pytest

from gpufleet.kube import translate
from gpufleet.model import annotations as ann
from gpufleet.model import queue as queues
from tests.deploy import manifests
from tests.deploy.manifests import Obj

CUSTOM = {("gpufleet.io/v1alpha1", "Queue"), ("scheduling.x-k8s.io/v1alpha1", "PodGroup")}
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
FILES = ["01-whole-gpu.yaml", "02-fraction.yaml", "03-mig.yaml", "04-gang.yaml", "05-queues.yaml",
         "06-queued-pods.yaml"]


def test_the_samples_are_the_documented_set(samples: dict[str, list[Obj]]) -> None:
    assert sorted(samples) == FILES


@pytest.mark.parametrize("name", FILES)
def test_every_sample_object_validates(samples: dict[str, list[Obj]], crds: list[Obj], name: str) -> None:
    for obj in samples[name]:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM:
            assert manifests.validate_custom(obj, crds) == [], manifests.key(obj)
        else:
            assert manifests.validate_builtin(obj) == "1.34", manifests.key(obj)


def pods(samples: dict[str, list[Obj]], name: str | None = None) -> list[Obj]:
    files = [name] if name else FILES
    return [o for f in files for o in samples[f] if o["kind"] == "Pod"]


def limits(pod: Obj) -> dict[str, object]:
    (c,) = pod["spec"]["containers"]
    out: dict[str, object] = c["resources"]["limits"]
    return out


def test_every_sample_pod_is_scheduled_by_gpufleet(samples: dict[str, list[Obj]]) -> None:
    assert pods(samples)
    for pod in pods(samples):
        assert pod["spec"]["schedulerName"] == ann.SCHEDULER_NAME, manifests.key(pod)


def test_the_samples_ask_for_gpus_by_the_documented_resource_names(samples: dict[str, list[Obj]]) -> None:
    (whole,) = pods(samples, "01-whole-gpu.yaml")
    assert limits(whole) == {ann.GPU_RESOURCE: 1}
    (fraction,) = pods(samples, "02-fraction.yaml")
    assert limits(fraction)[ann.GPU_MILLI_RESOURCE] == 500
    assert set(limits(fraction)) == {ann.GPU_MILLI_RESOURCE, ann.GPU_MEMORY_RESOURCE}
    (mig,) = pods(samples, "03-mig.yaml")
    assert limits(mig) == {ann.mig_resource("1g.10gb"): 1}


def test_the_gang_has_min_member_pods_in_its_namespace(samples: dict[str, list[Obj]]) -> None:
    (group,) = [o for o in samples["04-gang.yaml"] if o["kind"] == "PodGroup"]
    members = [p for p in pods(samples, "04-gang.yaml")
               if p["metadata"]["labels"].get(POD_GROUP_LABEL) == group["metadata"]["name"]
               and p["metadata"]["namespace"] == group["metadata"]["namespace"]]
    assert len(members) == group["spec"]["minMember"] == 4


def test_queued_pods_name_a_sample_queue_whose_parent_exists(samples: dict[str, list[Obj]]) -> None:
    defined = {q["metadata"]["name"]: q for q in samples["05-queues.yaml"]}
    assert len(defined) == 2
    for q in defined.values():
        parent = q["spec"].get("parent")
        assert parent is None or parent in defined
    assert any(q["spec"].get("parent") for q in defined.values())
    named = Counter(p["metadata"]["labels"][queues.QUEUE_LABEL] for p in pods(samples, "06-queued-pods.yaml"))
    assert named and set(named) <= set(defined)


def test_sample_queues_translate_into_a_valid_queue_tree(samples: dict[str, list[Obj]]) -> None:
    """The scheduler's CR -> model mapping (gpufleet.kube.translate) accepts them."""
    tree = queues.QueueTree.build(translate.queue(q) for q in samples["05-queues.yaml"])
    assert tree.path("research-nlp") == ("research", "research-nlp")
    assert tree.queues["research"].guaranteed[queues.GPU] == 16_000
    assert tree.queues["research"].guaranteed[queues.gpu_model_dim("NVIDIA-H100-80GB-HBM3")] == 8_000
