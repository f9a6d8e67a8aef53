"""The pre-filter extension point: a plugin may reject a pod before any node is looked at, and
may leave what it worked out in the cycle state for its later extension points."""

from __future__ import annotations

import random

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import IntArray, View
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.registry import Entry, default_registry
from gpufleet.framework.status import OK, Status, unschedulable
from gpufleet.model import ClusterSnapshot, NodeName, PodSpec
from gpufleet.testing import make_node, make_pod


class QueueHome:
    """Out-of-tree plugin: each queue has a home node. `pre_filter` rejects a pod of a queue
    without one and records the home's index in the cycle state; `score` prefers that node."""

    name = "QueueHome"

    def __init__(self, homes: dict[str, str]) -> None:
        self.homes = homes

    def pre_filter(self, state: CycleState, pod: PodSpec, view: View) -> Status:
        home = self.homes.get(pod.queue)
        if home is None:
            return unschedulable(self.name, f"queue {pod.queue} has no home among {view.cluster.n_nodes} nodes")
        state.data[(self.name, pod.uid)] = view.cluster.index[NodeName(home)]
        return OK

    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> np.ndarray:
        return np.where(nodes == state.data[(self.name, pod.uid)], 100.0, 0.0)


def test_a_pre_filter_rejects_a_pod_and_what_it_records_guides_the_pods_it_lets_through() -> None:
    plugin = QueueHome({"a": "n2", "b": "n0"})
    registry = dict(default_registry())
    registry[plugin.name] = Entry(lambda _args, _ctx: plugin)
    profile = build_profile(ProfileSettings(scores=(ScoreRef(plugin.name),)), registry=registry)
    assert profile.pre_filters == (plugin,)
    # equal requests: a pre-filter sees the whole pod, so its rejection of one pod is not reused
    # for others with the same constraints (as a filter's failure is)
    snap = ClusterSnapshot.build([make_node(f"n{i}").gpus(2).build() for i in range(3)])
    homeless = make_pod("z").gpus(1).queue("z").created(0.0).build()
    a = make_pod("a").gpus(1).queue("a").created(1.0).build()
    b = make_pod("b").gpus(1).queue("b").created(2.0).build()
    result = schedule(snap, [homeless, a, b], profile, now=0.0, rng=random.Random(0))
    assert sorted((p.pod, p.node) for p in result.binds) == [(a.uid, "n2"), (b.uid, "n0")]
    assert list(result.unschedulable) == [homeless.uid]
    status = result.unschedulable[homeless.uid]
    assert (status.reasons, status.plugin) == (("queue z has no home among 3 nodes",), "QueueHome")
