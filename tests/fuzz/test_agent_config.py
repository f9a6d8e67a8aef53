"""Fuzz the agent's config (NVIDIA's device-plugin config v1 plus `gpufleet:`), and the plan it gives."""

from __future__ import annotations

from hypothesis import given

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import fuzz_settings, yaml_texts


@fuzz_settings(150)
@given(yaml_texts(seeds.agent_configs))
def test_configs_load_or_fail_naming_the_key_path(text: str) -> None:
    targets.check_agent_config(text)
