"""`sim.policies`: the default profile is a policy called `default`, and it is the built-in one."""

from __future__ import annotations

import random

import pytest

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import build_for
from gpufleet.framework.profiles import builtin
from gpufleet.model import ClusterSnapshot, ModelError
from gpufleet.sim.default_workload import default_workload
from gpufleet.sim.policies import POLICY_NAMES, profile_for
from gpufleet.framework.plugins.fragmentation import typical_tasks


def test_default_is_the_built_in_profile_under_its_own_name() -> None:
    w = default_workload(scale=0.02, seed=3)
    pods = [p for j in w.jobs for p in j.pods]
    tasks = typical_tasks(pods)
    ours = profile_for("default", tasks)
    assert ours.name == "default" and POLICY_NAMES[0] == "default"
    shipped = build_for(builtin("default"), pods)
    assert ([type(p).__name__ for p in ours.filters], [(type(p).__name__, w_) for p, w_ in ours.scores]) == \
        ([type(p).__name__ for p in shipped.filters], [(type(p).__name__, w_) for p, w_ in shipped.scores])
    assert ours.queueing == shipped.queueing
    snap = ClusterSnapshot.build(w.nodes)
    a = schedule(snap, pods, ours, now=0.0, rng=random.Random(0))
    b = schedule(snap, pods, shipped, now=0.0, rng=random.Random(0))
    assert a.binds == b.binds and a.binds


def test_an_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ModelError, match="known: default, random"):
        profile_for("nope", ())
