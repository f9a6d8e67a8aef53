"""Fuzz the scheduler profile loader (`framework.profile.load_profiles`, then `build_profile`)."""

from __future__ import annotations

from hypothesis import given

from tests.fuzz import seeds, targets
from tests.fuzz.strategies import fuzz_settings, yaml_texts


@fuzz_settings(150)
@given(yaml_texts(seeds.profiles))
def test_profiles_load_or_fail_naming_the_key_path(text: str) -> None:
    targets.check_profile(text)
