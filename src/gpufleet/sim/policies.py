"""Named scheduling policies for experiments: gpufleet's default profile, the FGD paper's
baselines and gpufleet's scorers.

`default` is the built-in default profile exactly as the live scheduler runs it (its filters,
scorers, arguments and queueing); each other name maps to a profile of the default filters and
one scorer (or two), so the simulator runs what the live scheduler would run with it.
"""

from __future__ import annotations

from gpufleet.framework.plugins.frag_aware import FragAwareArgs
from gpufleet.framework.plugins.fragmentation import TypicalTask
from pathlib import Path

from dataclasses import replace

from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile, load_profiles
from gpufleet.framework.profiles import builtin
from gpufleet.framework.registry import BuildContext
from gpufleet.model import ModelError, read_text

POLICIES: dict[str, tuple[ScoreRef, ...]] = {
    "random": (ScoreRef("Random"),),
    "dotprod": (ScoreRef("DotProduct"),),
    "clustering": (ScoreRef("GpuClustering"),),
    "packing": (ScoreRef("GpuPacking"),),
    "bestfit": (ScoreRef("BestFit"),),
    "fgd": (ScoreRef("FGD"),),
    "gpufleet": (ScoreRef("FragAware"), ScoreRef("PreferUsedNodes", 0.001)),
    "gpufleet-lookahead": (ScoreRef("FragAware"), ScoreRef("PreferUsedNodes", 1.0)),
}
DEFAULT = "default"
"""The built-in default profile (framework/profiles/default.yaml), under its own name in tables."""
POLICY_NAMES = (DEFAULT, *POLICIES)
POLICY_ARGS: dict[str, dict[str, object]] = {
    "gpufleet-lookahead": {"FragAware": FragAwareArgs(lookahead=True)},
}
"""Plugin arguments of the policies that do not use their plugins' defaults."""
PAPER_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd")
"""The FGD paper's policies. `gpufleet` is FragAware with PreferUsedNodes as a tie-breaker;
`gpufleet-lookahead` adds FragAware's one-step look-ahead and weighs PreferUsedNodes at 1,
a consistent fill order that keeps empty nodes for multi-GPU tasks (docs/results.md)."""


def profile_for(policy: str, tasks: tuple[TypicalTask, ...]) -> Profile:
    """A named policy, or `file:PATH` for the first profile of a KubeSchedulerConfiguration-like YAML."""
    if policy.startswith("file:"):
        path = Path(policy.removeprefix("file:"))
        return build_profile(load_profiles(read_text(path), str(path))[0], BuildContext(tasks))
    if policy == DEFAULT:
        return build_profile(replace(builtin(DEFAULT), name=DEFAULT), BuildContext(tasks))
    if policy not in POLICIES:
        raise ModelError("--policies", f"unknown policy {policy!r}; known: {', '.join(POLICY_NAMES)}")
    settings = ProfileSettings(name=policy, scores=POLICIES[policy], plugin_args=POLICY_ARGS.get(policy, {}))
    return build_profile(settings, BuildContext(tasks))
