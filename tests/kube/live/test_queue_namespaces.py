"""A Queue's `spec.namespaces`: read from the custom resource, and applied to each pending pod
(`kube.queues.queue_refusal`). On the real API server, with the admission policy:
tests/live/test_queue_namespaces_live.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube import translate
from gpufleet.kube.queues import queue_refusal
from gpufleet.model import ModelError, Queue
from gpufleet.testing import make_pod


def cr(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"}, "spec": spec}


def test_the_namespaces_are_read_from_the_queue_and_absent_means_every_namespace() -> None:
    assert translate.queue(cr({"namespaces": ["team-a", "team-a-dev"]})).namespaces == {"team-a", "team-a-dev"}
    q = translate.queue(cr({}))
    assert q.namespaces is None and q.admits("anyone")


@pytest.mark.parametrize("bad", ["team-a", [1], {"team-a": True}], ids=["a string", "a number", "a map"])
def test_namespaces_that_are_not_a_list_of_names_are_one_error_naming_the_field(bad: Any) -> None:
    with pytest.raises(ModelError, match=r"queue team-a: spec.namespaces: must be a list of namespace names"):
        translate.queue(cr({"namespaces": bad}))


QUEUES = {"team-a": Queue("team-a", namespaces=frozenset({"team-a"})), "shared": Queue("shared")}


def test_a_pod_of_a_namespace_the_queue_lists_or_of_an_open_queue_is_admitted() -> None:
    assert queue_refusal(QUEUES, make_pod("p").namespace("team-a").queue("team-a").build()) is None
    assert queue_refusal(QUEUES, make_pod("p").namespace("team-b").queue("shared").build()) is None
    assert queue_refusal(QUEUES, make_pod("p").namespace("team-b").build()) is None  # `default`, not defined


def test_a_pod_of_another_namespace_is_refused_with_the_queue_and_what_it_admits() -> None:
    refusal = queue_refusal(QUEUES, make_pod("p").namespace("team-b").queue("team-a").build())
    assert refusal == ("queue team-a does not admit pods of namespace team-b; its spec.namespaces: team-a. "
                       "Label the pod with a queue of its namespace (gpufleet.io/queue)")


def test_a_pod_naming_an_undefined_queue_runs_in_default_under_defaults_rule() -> None:
    queues = {**QUEUES, "default": Queue("default", namespaces=frozenset({"ops", "team-a"}))}
    spec = make_pod("p").namespace("team-b").queue("typo").build()
    assert queue_refusal(queues, spec) == (
        "queue default (the pod names queue 'typo', which is not defined) does not admit pods of namespace team-b; "
        "its spec.namespaces: ops, team-a. Label the pod with a queue of its namespace (gpufleet.io/queue)")
    assert queue_refusal(queues, make_pod("p").namespace("ops").queue("typo").build()) is None
