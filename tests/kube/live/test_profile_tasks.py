"""Which built-in profiles need the typical-task mix (the live scheduler building them with the
mix of the pods it lists: tests/live/test_snapshot_live.py)."""

from __future__ import annotations

from gpufleet.framework.profiles import BUILTIN, builtin


def test_exactly_the_profiles_with_fgd_or_frag_aware_need_typical_tasks() -> None:
    needs = {name: builtin(name).needs_typical_tasks for name in BUILTIN}
    assert needs == {"default": True, "bestfit": False, "fgd": True, "gpufleet": True, "gpufleet-lookahead": True}
