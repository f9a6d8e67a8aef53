"""Named scheduling policies for experiments: the FGD paper's baselines and gpufleet's own.

Each maps to a profile (default filters + one scorer), so the simulator runs exactly what
the live scheduler would run with that profile.
"""

from __future__ import annotations

from gpufleet.framework.plugins.frag_aware import FragAwareArgs
from gpufleet.framework.plugins.fragmentation import TypicalTask
from pathlib import Path

from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile, load_profiles
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
    if policy not in POLICIES:
        raise ModelError("--policies", f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    settings = ProfileSettings(name=policy, scores=POLICIES[policy], plugin_args=POLICY_ARGS.get(policy, {}))
    return build_profile(settings, BuildContext(tasks))
