"""`translate`: errors for enum fields (an unknown value names the field and the values allowed;
a value of the wrong JSON type is the same error, not a TypeError), and the comparisons that let
the cache skip translating a bound pod's status updates."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.kube import translate
from gpufleet.model import ModelError, PodSpec
from gpufleet.model.node import TaintEffect
from gpufleet.model.pod import TolerationOperator
from tests.fuzz import seeds
from tests.fuzz.strategies import _get, _paths, fuzz_settings


def pod(toleration: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "k", "operator": "Exists"}, toleration]}}


def test_tolerations_translate_to_their_enums() -> None:
    spec = translate.pod_spec(pod({"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}))
    assert [(t.key, t.operator, t.value, t.effect) for t in spec.tolerations] == [
        ("k", TolerationOperator.EXISTS, "", None), ("gpu", TolerationOperator.EQUAL, "a100", TaintEffect.NO_SCHEDULE)]


@pytest.mark.parametrize("field,value", [("operator", "Maybe"), ("operator", ["Equal"]), ("effect", "NoRun"),
                                         ("effect", {"NoSchedule": True})])
def test_an_unknown_enum_value_names_the_field_and_the_values_allowed(field: str, value: Any) -> None:
    with pytest.raises(ModelError) as caught:
        translate.pod_spec(pod({"key": "gpu", field: value}))
    assert f"pod ns/p: tolerations[1].{field}" in str(caught.value)
    assert f"unknown value {value!r}; expected one of " in str(caught.value)


# -- same_pod_spec / same_placement: the cache skips translating a pod again when they hold ---------

def _with_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A seed pod as the API server shows it once running: everything the cache must not miss a change in."""
    pod = copy.deepcopy(pod)
    pod["metadata"].update({"resourceVersion": "41", "generation": 1, "managedFields": [
        {"manager": "kwok", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}}]})
    pod["status"] = {**pod.get("status", {}), "phase": "Running", "podIP": "10.0.0.7", "qosClass": "Burstable",
                     "conditions": [{"type": "Ready", "status": "True"}],
                     "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "infer-gpu"}]}
    pod["status"].setdefault("startTime", "2026-11-26T10:05:00Z")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return pod


SEEDS = seeds.api_objects_data()
NODE = translate.node_info(next(o for o in SEEDS if o["kind"] == "Node" and "annotations" in o["metadata"]))
PODS = [_with_status(o) for o in SEEDS if o["kind"] == "Pod"]
STRINGS = st.sampled_from(["", "x", "Exists", "NoSchedule", "1", "2026-11-26T11:00:00Z", "gpu-2", "team-c"])


@st.composite
def pod_and_changed(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod, and the same pod with one value anywhere in it changed within its JSON type (as the
    API server keeps them), a key removed or added, or a list entry dropped or repeated."""
    pod = draw(st.sampled_from(PODS))
    changed = copy.deepcopy(pod)
    where = draw(st.sampled_from([p for p in _paths(changed) if p and p[0] != "kind"]))
    parent, last = _get(changed, where[:-1]), where[-1]
    old = parent[last]
    if isinstance(parent, dict) and draw(st.booleans()):
        if draw(st.booleans()):
            del parent[last]
        else:
            parent[draw(st.sampled_from(["x", "qosClass", "uid", "startTime", "deletionTimestamp"]))] = draw(STRINGS)
    elif isinstance(old, bool):
        parent[last] = not old
    elif isinstance(old, int):
        parent[last] = old + draw(st.sampled_from([-1, 1]))
    elif isinstance(old, str):
        parent[last] = draw(STRINGS.filter(lambda v: v != old))
    elif isinstance(old, list):
        parent[last] = draw(st.sampled_from([old[1:], old + old[:1]]))
    else:
        old[draw(STRINGS)] = draw(STRINGS)
    return pod, changed


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except ModelError as exc:
        return str(exc)


def _bind(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """`pod` as the echo of gpufleet's Binding shows it."""
    bound = copy.deepcopy(pod)
    bound.setdefault("spec", {})["nodeName"] = node
    annotations = bound.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.update({a: f"written by the binding to {node}" for a in translate.BINDING_ANNOTATIONS})
    labels = bound["metadata"].setdefault("labels", {})  # PodTopologyLabels admission
    labels.update({f"{translate.TOPOLOGY_PREFIX}zone": f"zone-of-{node}", f"{translate.TOPOLOGY_PREFIX}region": "r"})
    return bound


@fuzz_settings(400)
@given(pod_and_changed(), st.sampled_from([None, "gpu-1", "gpu-2"]))
def test_pods_that_read_the_same_translate_the_same(pods: tuple[dict[str, Any], dict[str, Any]],
                                                    bound_to: str | None) -> None:
    """What `same_pod_spec` and `same_placement` leave out is never read by `pod_spec` or `placement`;
    nor what a Binding writes, for `same_pod_spec(..., bound_since=True)`."""
    pod, changed = pods
    if bound_to is not None:
        changed = _bind(changed, bound_to)
        if translate.same_pod_spec(pod, changed, bound_since=True):
            assert _outcome(lambda: translate.pod_spec(pod)) == _outcome(lambda: translate.pod_spec(changed))
        return
    if translate.same_pod_spec(pod, changed):
        before, after = _outcome(lambda: translate.pod_spec(pod)), _outcome(lambda: translate.pod_spec(changed))
        assert before == after
        if translate.same_placement(pod, changed) and isinstance(before, PodSpec):
            assert _outcome(lambda: translate.placement(pod, NODE, before)) == \
                _outcome(lambda: translate.placement(changed, NODE, before))


def test_a_status_update_reads_the_same_and_a_relabel_does_not() -> None:
    pod = PODS[1]
    running = copy.deepcopy(pod)
    running["metadata"]["resourceVersion"] = "42"
    running["status"]["conditions"].append({"type": "ContainersReady", "status": "True"})
    assert translate.same_placement(pod, running)
    started = copy.deepcopy(running)
    started["status"]["startTime"] = "2026-11-26T10:06:00Z"
    assert translate.same_pod_spec(pod, started) and not translate.same_placement(pod, started)
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"] = {"gpufleet.io/queue": "team-c"}
    assert not translate.same_pod_spec(pod, relabelled)


def test_the_echo_of_a_bind_reads_the_same_only_when_nothing_else_changed() -> None:
    pending = PODS[0]
    assert translate.same_pod_spec(pending, _bind(pending, "gpu-1"), bound_since=True)
    assert not translate.same_pod_spec(pending, _bind(pending, "gpu-1"))
    relabelled = _bind(pending, "gpu-1")
    relabelled["metadata"]["labels"]["gpufleet.io/queue"] = "team-c"
    assert not translate.same_pod_spec(pending, relabelled, bound_since=True)
