"""Profiles shipped with gpufleet: `default` (the fragmentation-aware look-ahead), `bestfit`
(the cheaper former default), `fgd`, `gpufleet` and `gpufleet-lookahead` (docs/concepts.md)."""

from __future__ import annotations

from importlib import resources

from gpufleet.framework.profile import ProfileSettings, load_profiles

BUILTIN = ("default", "bestfit", "fgd", "gpufleet", "gpufleet-lookahead")


def builtin(name: str = "default") -> ProfileSettings:
    """A shipped profile by name (first profile of its YAML file)."""
    if name not in BUILTIN:
        raise ValueError(f"unknown built-in profile {name!r}; known: {', '.join(BUILTIN)}")
    text = resources.files(__package__).joinpath(f"{name}.yaml").read_text()
    return load_profiles(text, f"{name}.yaml")[0]
