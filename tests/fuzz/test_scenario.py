"""Fuzz the scenario loader (`sim.traces.scenario`): shipped scenarios with one place broken."""

from __future__ import annotations

from hypothesis import given

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import fuzz_settings, yaml_texts


@fuzz_settings(120)
@given(yaml_texts(seeds.scenarios))
def test_scenarios_load_or_fail_naming_line_and_key(text: str) -> None:
    targets.check_scenario(text.encode("utf-8", "surrogatepass"))
