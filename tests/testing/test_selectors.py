"""Label and field selectors, parsed as kube-apiserver parses them."""

from __future__ import annotations

import pytest

from gpufleet.testing.apiserver.errors import ApiError
from gpufleet.testing.apiserver.selectors import (fields_match, label_selector_matches, labels_match,
                                                  parse_field_selector, parse_label_selector)

from .conftest import Client, pod

OBJ = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "train", "tier": "gpu"}},
       "spec": {"schedulerName": "gpufleet", "nodeName": ""}, "status": {"phase": "Pending"}}

LABELS = [("equality matches", "app=train", True), ("double equals matches", "app==train", True),
          ("inequality excludes", "app!=train", False), ("inequality matches a missing key", "team!=x", True),
          ("in matches a listed value", "tier in (cpu, gpu)", True), ("notin excludes", "tier notin (gpu)", False),
          ("exists matches", "app", True), ("not exists excludes", "!app", False),
          ("not exists matches a missing key", "!team", True), ("all requirements must hold", "app=train,tier=cpu", False),
          ("the empty selector matches everything", "", True)]


@pytest.mark.parametrize("what, selector, expected", LABELS, ids=[c[0] for c in LABELS])
def test_label_selector(what: str, selector: str, expected: bool) -> None:
    assert labels_match(parse_label_selector(selector), OBJ) is expected


FIELDS = [("an unbound pod has an empty nodeName", "spec.nodeName=", True),
          ("schedulerName and phase", "spec.schedulerName=gpufleet,status.phase!=Running", True),
          ("metadata.name", "metadata.name==q", False), ("metadata.namespace", "metadata.namespace=ns", True)]


@pytest.mark.parametrize("what, selector, expected", FIELDS, ids=[c[0] for c in FIELDS])
def test_field_selector(what: str, selector: str, expected: bool) -> None:
    assert fields_match(parse_field_selector(selector, "pods"), OBJ) is expected


def test_an_unsupported_field_is_400() -> None:
    with pytest.raises(ApiError) as err:
        parse_field_selector("spec.hostname=x", "pods")
    assert err.value.code == 400 and "field label not supported: spec.hostname" in err.value.message


def test_event_selectors_accept_both_event_apis_field_names() -> None:
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}}
    assert fields_match(parse_field_selector("involvedObject.name=p,involvedObject.kind=Pod", "events"), event)
    assert fields_match(parse_field_selector("regarding.uid=u", "events"), event)


def test_a_label_selector_object_matches_labels_and_expressions() -> None:
    selector = {"matchLabels": {"app": "train"}, "matchExpressions": [{"key": "tier", "operator": "In",
                                                                         "values": ["gpu"]}]}
    assert label_selector_matches(selector, {"app": "train", "tier": "gpu"})
    assert not label_selector_matches(selector, {"app": "train"})
    assert label_selector_matches({}, {}) and not label_selector_matches(None, {"a": "b"})


def test_selectors_filter_lists_over_http(client: Client) -> None:
    client.ok("POST", "/api/v1/namespaces/default/pods", pod("a", labels={"q": "1"}))
    client.ok("POST", "/api/v1/namespaces/default/pods", pod("b", labels={"q": "2"}, scheduler="default-scheduler"))
    got = client.ok("GET", "/api/v1/pods?labelSelector=q+in+(1,2)&fieldSelector=spec.schedulerName%3Dgpufleet")
    assert [p["metadata"]["name"] for p in got["items"]] == ["a"]
    assert client.call("GET", "/api/v1/pods?labelSelector=q+in+(1")[0] == 400
