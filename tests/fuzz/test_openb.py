"""Fuzz the openb trace readers (`sim.traces.openb`): rows with one cell, row or field changed."""

from __future__ import annotations

from hypothesis import given

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import csv_texts, fuzz_settings


@fuzz_settings(150)
@given(csv_texts(seeds.openb))
def test_openb_rows_are_read_or_rejected_naming_line_and_column(data: bytes) -> None:
    targets.check_openb(data)
