"""Fuzz the Philly-derived trace readers (`sim.traces.philly`): trace rows and Gavel's JSON files."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import csv_texts, fuzz_settings, json_texts


@fuzz_settings(150)
@given(csv_texts(seeds.philly_trace, delimiter="\t"))
def test_trace_rows_are_read_or_rejected_naming_line_and_field(data: bytes) -> None:
    targets.check_philly_trace(data)


@fuzz_settings(100)
@given(st.one_of(json_texts([json.loads(s) for s in seeds.philly_json()]).map(str.encode), st.binary(max_size=200)))
def test_throughputs_and_cluster_specs_are_read_or_rejected_naming_the_key(data: bytes) -> None:
    targets.check_philly_json(data)
