"""Fuzz what the scheduler reads from the API server (`kube.translate`): Pods, Nodes, Queues, PodGroups.

The API server checks the types of built-in objects, and the CRD schemas those of Queue and
PodGroup; the values are what users and components write. So the strategy keeps the shape
of each object and changes one value within its JSON type: any string (unknown enum values,
quantity text, odd Unicode, JSON for the annotations), any integer of int64 and beyond, a
quantity written as a number or as text, an entry removed, added or repeated. Object names
stay DNS names, as the API server requires (they appear in every error message).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import WEIRD_TEXT, _get, _paths, fuzz_settings, json_texts

OBJECTS = seeds.api_objects_data()
ANNOTATIONS = [json.loads(s.split(b"\x00")[0]) for s in seeds.annotation_texts()]
QUANTITY_PARENTS = {"requests", "limits", "allocatable", "capacity", "guaranteed", "limit"}
NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
integers = st.one_of(st.integers(min_value=-2**64, max_value=2**64),
                     st.sampled_from([0, -1, 1, 999, 1000, 1001, 4096, 4097, 2**31, 2**63 - 1, 10**30]))
strings = st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=16), json_texts(ANNOTATIONS))


def _value_like(draw: st.DrawFn, old: Any, path: tuple[Any, ...]) -> Any:
    if path[-1:] in (("name",), ("namespace",)) and "metadata" in path:
        return draw(NAMES)
    if path[-2:-1] and path[-2] in QUANTITY_PARENTS or path[-1] in ("guaranteed", "limit") and path[-2] != "spec":
        return draw(st.one_of(integers, strings))  # int-or-string
    if isinstance(old, bool):
        return draw(st.booleans())
    if isinstance(old, (int, float)):
        return draw(st.one_of(integers, st.floats(allow_nan=False, allow_infinity=False)))
    if isinstance(old, str):
        return draw(strings)
    if isinstance(old, list):
        return draw(st.sampled_from([[], old + old[:1], old[1:]]))
    return {}  # a mapping emptied


@st.composite
def same_shape(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(OBJECTS)))
    path = draw(st.sampled_from([p for p in _paths(obj) if p and p[0] != "kind"]))
    parent, last = _get(obj, path[:-1]), path[-1]
    if draw(st.integers(min_value=0, max_value=4)) == 0 and isinstance(parent, dict):
        if draw(st.booleans()):
            del parent[last]
        else:
            parent[draw(st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=10)))] = draw(strings)
    else:
        parent[last] = _value_like(draw, parent[last], path)
    return obj


@fuzz_settings(300)
@given(same_shape())
def test_api_objects_translate_or_fail_naming_object_and_field(obj: dict[str, Any]) -> None:
    targets.check_api_object(obj)
