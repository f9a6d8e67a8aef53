"""A PodGroup's KAI-Scheduler topology annotations reach the model (kube/translate.py)."""

from __future__ import annotations

from gpufleet.kube import translate
from gpufleet.model import pod as pod_model


def test_a_podgroup_carries_its_required_and_preferred_levels() -> None:
    obj = {"metadata": {"name": "trainer", "namespace": "ml", "annotations": {
        pod_model.TOPOLOGY_ANNOTATION: "cluster-topology",
        pod_model.REQUIRED_TOPOLOGY_ANNOTATION: "topology.gpufleet.io/rack",
        pod_model.PREFERRED_TOPOLOGY_ANNOTATION: "nvidia.com/gpu.clique"}}, "spec": {"minMember": 4}}
    group = translate.pod_group(obj)
    assert (group.key, group.min_member) == ("ml/trainer", 4)
    assert (group.required_topology, group.preferred_topology) == ("topology.gpufleet.io/rack", "nvidia.com/gpu.clique")


def test_without_annotations_or_with_empty_ones_a_podgroup_declares_no_level() -> None:
    for notes in ({}, {pod_model.REQUIRED_TOPOLOGY_ANNOTATION: ""}):
        group = translate.pod_group({"metadata": {"name": "g", "annotations": notes}, "spec": {"minMember": 2}})
        assert (group.required_topology, group.preferred_topology) == (None, None)
