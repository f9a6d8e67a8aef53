"""Named scheduling policies for experiments: the FGD paper's baselines and gpufleet's own.

Each maps to a profile (default filters + one scorer), so the simulator runs exactly what
the live scheduler would run with that profile.
"""

from __future__ import annotations

from gpufleet.framework.plugins.fragmentation import TypicalTask
from pathlib import Path

from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile, load_profiles
from gpufleet.framework.registry import BuildContext
from gpufleet.model import ModelError

POLICIES: dict[str, tuple[ScoreRef, ...]] = {
    "random": (ScoreRef("Random"),),
    "dotprod": (ScoreRef("DotProduct"),),
    "clustering": (ScoreRef("GpuClustering"),),
    "packing": (ScoreRef("GpuPacking"),),
    "bestfit": (ScoreRef("BestFit"),),
    "fgd": (ScoreRef("FGD"),),
    "gpufleet": (ScoreRef("FragAware"), ScoreRef("PreferUsedNodes", 0.001)),
}
PAPER_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd")
"""The FGD paper's policies; `gpufleet` is FragAware with PreferUsedNodes as tie-breaker."""


def profile_for(policy: str, tasks: tuple[TypicalTask, ...]) -> Profile:
    """A named policy, or `file:PATH` for the first profile of a KubeSchedulerConfiguration-like YAML."""
    if policy.startswith("file:"):
        path = Path(policy.removeprefix("file:"))
        return build_profile(load_profiles(path.read_text(), str(path))[0], BuildContext(tasks))
    if policy not in POLICIES:
        raise ModelError("--policies", f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return build_profile(ProfileSettings(name=policy, scores=POLICIES[policy]), BuildContext(tasks))
