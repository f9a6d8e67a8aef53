"""Fuzz the annotation contract (`model.annotations`) and the assignment signature check."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import WEIRD_TEXT, fuzz_settings, json_texts

DOCS = [json.loads(s.split(b"\x00")[0]) for s in seeds.annotation_texts()]


@fuzz_settings(200)
@given(json_texts(DOCS), st.one_of(st.sampled_from(["", "v1:k1:" + "0" * 64, "v1::", "v1:k1:" + "g" * 64]),
                                   st.sampled_from(WEIRD_TEXT), st.text(max_size=80)))
def test_annotations_decode_or_fail_naming_annotation_and_field(text: str, signature: str) -> None:
    targets.check_annotations(text, signature)
