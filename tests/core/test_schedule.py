"""schedule(): scenarios with concrete devices, kube-style reasons, gangs, priority and purity."""

from __future__ import annotations

import random
from typing import Iterable, Sequence

import numpy as np
import pytest

from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.status import Code, Status
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid
from gpufleet.model.cluster import Usage
from gpufleet.testing import make_node, make_pod

GIB = 1024


def _run(snap: ClusterSnapshot, pods: Sequence[PodSpec], *scorers: str, seed: int = 0) -> CycleResult:
    profile = build_profile(ProfileSettings(scores=tuple(ScoreRef(s) for s in scorers)))
    return schedule(snap, pods, profile, now=0.0, rng=random.Random(seed))


def _snap(nodes: Sequence[NodeInfo], running: Iterable[Placement] = (),
          groups: Iterable[PodGroup] = ()) -> ClusterSnapshot:
    return ClusterSnapshot.build(nodes, running, groups)


def _hold(pod: str, node: str, gpus: tuple[int, ...] = (), milli: int = 1000, group: str | None = None,
          cpu: int = 0) -> Placement:
    return Placement(PodUid(f"default/{pod}"), NodeName(node), cpu, 0, gpus, milli if gpus else 0, 0, (), group)


def _where(result: CycleResult) -> dict[str, str]:
    return {p.pod.split("/")[1]: p.node for p in result.binds}


def _why(result: CycleResult) -> dict[str, tuple[str, ...]]:
    return {uid.split("/")[1]: s.reasons for uid, s in result.unschedulable.items()}


# -- binds ----------------------------------------------------------------------------------

def test_binds_name_the_node_and_the_concrete_devices() -> None:
    nodes = [make_node("a").gpus(4).build(),
             make_node("b").gpus(2, model="T4", mem_gib=16).build(),
             make_node("c").gpus(1).mig(0, "3g.40gb", "1g.10gb", "1g.10gb").build(),
             make_node("d").label("kubernetes.io/hostname", "d").build()]
    pods = [make_pod("whole").cpu(4000).mem_mib(8192).gpus(2).models("H100-80GB").build(),
            make_pod("frac").cpu(500).mem_mib(512).fraction(300, mem_mib=2 * GIB).models("T4").build(),
            make_pod("slice").cpu(100).mem_mib(100).mig("1g.10gb").build(),
            make_pod("cpu").cpu(2000).mem_mib(2048).selector("kubernetes.io/hostname", "d").build()]
    result = _run(_snap(nodes, [_hold("r", "b", (0,), milli=900)]), pods, "MostAllocated")
    assert dict(result.unschedulable) == {}
    assert result.evictions == ()
    assert sorted(result.binds, key=lambda p: p.pod) == [
        Placement(PodUid("default/cpu"), NodeName("d"), 2000, 2048),
        Placement(PodUid("default/frac"), NodeName("b"), 500, 512, (1,), 300, 2 * GIB),
        Placement(PodUid("default/slice"), NodeName("c"), 100, 100, mig_slices=(1,)),
        Placement(PodUid("default/whole"), NodeName("a"), 4000, 8192, (0, 1), 1000, 80 * GIB),
    ]


def test_successive_pods_see_each_others_placements() -> None:
    snap = _snap([make_node("a").gpus(2).build()])
    pods = [make_pod(f"p{i}").gpus(1).build() for i in range(3)]
    result = _run(snap, pods, "MostAllocated")
    assert [(p.pod, p.gpus) for p in result.binds] == [("default/p0", (0,)), ("default/p1", (1,))]
    assert _why(result) == {"p2": ("0/1 nodes are available: 1 Insufficient GPU.",)}
    assert result.unschedulable[PodUid("default/p2")].code is Code.UNSCHEDULABLE


def test_fractions_share_a_device_until_it_is_full() -> None:
    snap = _snap([make_node("a").gpus(1).build()])
    result = _run(snap, [make_pod(f"f{i}").fraction(400).build() for i in range(3)])
    assert [(p.pod, p.gpus, p.milli) for p in result.binds] == [("default/f0", (0,), 400), ("default/f1", (0,), 400)]
    assert _why(result) == {"f2": ("0/1 nodes are available: 1 Insufficient GPU.",)}


# -- kube-style reasons -----------------------------------------------------------------------

MESSAGES: list[tuple[str, list[NodeInfo], list[Placement], PodSpec, str]] = [
    ("wrong models and a full node are counted separately",
     [make_node(n).gpus(1, model="T4").build() for n in "abc"] + [make_node("d").gpus(1, model="A100-80GB").build()],
     [_hold("r", "d", (0,))], make_pod("p").gpus(1).models("A100-80GB").build(),
     "0/4 nodes are available: 3 node(s) didn't match GPU model, 1 Insufficient GPU."),
    ("each node is counted once, under the first filter it fails",
     [make_node("a").gpus(1).taint("gpu", "true").build(), make_node("b").build(),
      make_node("c").gpus(1).build(), make_node("d").cpu(500).gpus(1).build()],
     [_hold("r", "c", (0,))], make_pod("p").cpu(1000).gpus(1).build(),
     "0/4 nodes are available: 1 Insufficient GPU, 1 Insufficient cpu, 1 node(s) had no GPU, "
     "1 node(s) had untolerated taint {gpu: true}."),
    ("counts are listed largest first",
     [make_node(n).build() for n in "abc"] + [make_node("d").label("zone", "z1").build()], [],
     make_pod("p").affinity("zone", "In", "z2").gpus(1).build(),
     "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."),
    ("a fraction without room for its GPU memory says so",
     [make_node("a").gpus(1, model="T4", mem_gib=16).build()],
     [Placement(PodUid("default/r"), NodeName("a"), 0, 0, (0,), 100, 15 * GIB)],
     make_pod("p").fraction(100, mem_mib=2 * GIB).build(),
     "0/1 nodes are available: 1 Insufficient GPU memory."),
    ("a MIG profile nobody has is Insufficient MIG",
     [make_node("a").gpus(1).build(), make_node("b").gpus(1).mig(0, "7g.80gb").build()], [],
     make_pod("p").mig("3g.40gb").build(), "0/2 nodes are available: 2 Insufficient MIG 3g.40gb."),
    ("an empty cluster has no nodes to list",
     [], [], make_pod("p").gpus(1).build(), "0/0 nodes are available."),
]


@pytest.mark.parametrize(("nodes", "running", "pod", "message"), [c[1:] for c in MESSAGES],
                         ids=[c[0] for c in MESSAGES])
def test_unschedulable_pods_get_kube_style_messages(nodes: list[NodeInfo], running: list[Placement], pod: PodSpec,
                                                   message: str) -> None:
    result = _run(_snap(nodes, running), [pod], "MostAllocated")
    assert result.binds == ()
    assert result.unschedulable == {pod.uid: Status(Code.UNSCHEDULABLE, (message,), "")}


def test_without_explanations_the_binds_are_the_same_and_the_reason_is_bare() -> None:
    snap = _snap([make_node("a").gpus(1).build(), make_node("b").build()])
    pods = [make_pod(f"p{i}").gpus(1).build() for i in range(2)]
    profile = build_profile(ProfileSettings(scores=(ScoreRef("MostAllocated"),)))
    full = schedule(snap, pods, profile, now=0.0, rng=random.Random(0))
    bare = schedule(snap, pods, profile, now=0.0, rng=random.Random(0), explain=False)
    assert bare.binds == full.binds and len(bare.binds) == 1
    assert _why(full) == {"p1": ("0/2 nodes are available: 1 Insufficient GPU, 1 node(s) had no GPU.",)}
    assert _why(bare) == {"p1": ("0/2 nodes are available.",)}


def test_pods_with_the_same_constraints_fail_the_same_way() -> None:
    snap = _snap([make_node("a").gpus(1, model="T4").build()])
    pods = [make_pod(f"p{i}").gpus(1).models("A100-80GB").build() for i in range(3)]
    result = _run(snap, pods)
    assert set(_why(result).values()) == {("0/1 nodes are available: 1 node(s) didn't match GPU model.",)}
    assert len(result.unschedulable) == 3


# -- gangs ------------------------------------------------------------------------------------

def _gang(n: int, gpus: int = 1, name: str = "g", priority: int = 0) -> list[PodSpec]:
    return [make_pod(f"{name}{i}").gpus(gpus).gang(name).priority(priority).build() for i in range(n)]


def test_a_gang_that_cannot_reach_min_member_places_nothing_and_every_member_says_why() -> None:
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 3)])
    result = _run(snap, _gang(3), "MostAllocated")
    assert result.binds == ()
    why = "pod group default/g: only 2 of minMember 3 pods could be placed together"
    assert _why(result) == {"g0": (why,), "g1": (why,), "g2": (why, "0/1 nodes are available: 1 Insufficient GPU.")}
    assert {s.plugin for s in result.unschedulable.values()} == {"Gang"}


def test_a_gang_at_min_member_binds_the_members_that_fit() -> None:
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 2)])
    result = _run(snap, _gang(3), "MostAllocated")
    assert _where(result) == {"g0": "a", "g1": "a"}
    assert _why(result) == {"g2": ("0/1 nodes are available: 1 Insufficient GPU.",)}


def test_running_members_count_toward_min_member() -> None:
    running = [_hold("old0", "a", (0,), group="default/g"), _hold("old1", "a", (1,), group="default/g"),
               _hold("other", "a", (2,), group="default/h")]
    snap = _snap([make_node("a").gpus(4).build()], running, [PodGroup("g", 3)])
    assert _where(_run(snap, _gang(1))) == {"g0": "a"}
    alone = _snap([make_node("a").gpus(4).build()], running[2:], [PodGroup("g", 3)])
    result = _run(alone, _gang(1))
    assert result.binds == ()
    assert _why(result) == {"g0": ("pod group default/g: only 1 of minMember 3 pods could be placed together",)}


def test_a_failed_gang_counts_its_running_members_in_what_it_says() -> None:
    running = [_hold("old0", "a", (0,), group="default/g")]
    snap = _snap([make_node("a").gpus(2).build()], running, [PodGroup("g", 4)])
    result = _run(snap, _gang(3), "MostAllocated")
    assert result.binds == ()
    assert _why(result)["g0"] == ("pod group default/g: only 2 of minMember 4 pods could be placed together",)


@pytest.mark.parametrize(("running_members", "placed"), [(0, 3), (2, 1), (3, 0)])
def test_a_gang_places_members_only_up_to_max_member_counting_those_running(running_members: int,
                                                                           placed: int) -> None:
    """maxMember 3 on an 8-GPU node: room for 3 - running; every member past it says why (plugin Gang)."""
    running = [_hold(f"old{i}", "a", (i,), group="default/g") for i in range(running_members)]
    snap = _snap([make_node("a").gpus(8).build()], running, [PodGroup("g", 1, max_member=3)])
    result = _run(snap, _gang(4), "MostAllocated")
    assert sorted(_where(result)) == [f"g{i}" for i in range(placed)]
    over = Status(Code.UNSCHEDULABLE, ("pod group default/g already has maxMember 3 pods running or placed",), "Gang")
    assert dict(result.unschedulable) == {PodUid(f"default/g{i}"): over for i in range(placed, 4)}


def test_a_gang_without_a_pod_group_needs_all_its_pending_members() -> None:
    snap = _snap([make_node("a").gpus(2).build()])
    result = _run(snap, _gang(3))
    assert result.binds == ()
    assert _why(result)["g0"] == ("pod group default/g: only 2 of minMember 3 pods could be placed together",)


def test_a_gang_without_a_pod_group_still_needs_all_pending_members_when_some_run() -> None:
    snap = _snap([make_node("a").gpus(2).build()], [_hold("old", "a", (0,), group="default/g")])
    result = _run(snap, _gang(2))
    assert result.binds == ()


def test_capacity_of_a_rolled_back_gang_goes_to_later_pods() -> None:
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 3)])
    later = make_pod("later").gpus(2).build()
    result = _run(snap, _gang(3, priority=10) + [later], "MostAllocated")
    assert [(p.pod, p.gpus) for p in result.binds] == [("default/later", (0, 1))]


def test_a_failure_remembered_inside_a_rolled_back_gang_is_retried_afterwards() -> None:
    """g2 fails while g0 and g1 hold the GPUs; `p` has g2's exact constraints and must not reuse that failure."""
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 3)])
    p = make_pod("p").gpus(1).build()
    result = _run(snap, _gang(3, priority=10) + [p], "MostAllocated")
    assert _where(result) == {"p": "a"}
    assert set(_why(result)) == {"g0", "g1", "g2"}


def test_a_later_gang_retries_a_spec_that_failed_inside_a_rolled_back_gang() -> None:
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 3), PodGroup("h", 2)])
    result = _run(snap, _gang(3, priority=10) + _gang(2, name="h"), "MostAllocated")
    assert _where(result) == {"h0": "a", "h1": "a"}
    assert set(_why(result)) == {"g0", "g1", "g2"}


def test_gang_members_are_placed_as_one_unit_at_their_first_members_rank() -> None:
    snap = _snap([make_node("a").gpus(2).build()], groups=[PodGroup("g", 2)])
    pods = [make_pod("g0").gpus(1).gang("g").priority(5).build(), make_pod("mid").gpus(1).priority(3).build(),
            make_pod("g1").gpus(1).gang("g").priority(0).build()]
    assert _where(_run(snap, pods)) == {"g0": "a", "g1": "a"}


# -- order ------------------------------------------------------------------------------------

ORDER: list[tuple[str, list[PodSpec], str]] = [
    ("a higher priority pod goes first even if it arrived later",
     [make_pod("low").gpus(1).created(0).build(), make_pod("high").gpus(1).priority(5).created(10).build()], "high"),
    ("among equal priorities the older pod goes first",
     [make_pod("new").gpus(1).created(5).build(), make_pod("old").gpus(1).created(1).build()], "old"),
    ("among equal priority and age the lower uid goes first",
     [make_pod("b").gpus(1).build(), make_pod("a").gpus(1).build()], "a"),
    ("a negative priority goes after the default",
     [make_pod("neg").gpus(1).priority(-1).build(), make_pod("zero").gpus(1).created(9).build()], "zero"),
]


@pytest.mark.parametrize(("pods", "winner"), [c[1:] for c in ORDER], ids=[c[0] for c in ORDER])
def test_priority_then_age_then_uid_decide_who_gets_the_last_gpu(pods: list[PodSpec], winner: str) -> None:
    result = _run(_snap([make_node("a").gpus(1).build()]), pods, "MostAllocated")
    assert list(_where(result)) == [winner]
    assert len(result.unschedulable) == len(pods) - 1


# -- purity -----------------------------------------------------------------------------------

def _state(snap: ClusterSnapshot) -> tuple[object, ...]:
    arrays = tuple(np.asarray(getattr(snap.usage, n)).tolist() for n in Usage.__slots__[1:])
    return arrays, dict(snap.placements), dict(snap.pod_groups)


def test_schedule_never_mutates_the_snapshot_and_repeats_exactly() -> None:
    nodes = [make_node(n).gpus(4, nvlink_domains=2).build() for n in "abc"]
    snap = _snap(nodes, [_hold("r", "a", (0,), cpu=1000)], [PodGroup("g", 3), PodGroup("h", 5)])
    pods = _gang(3, gpus=2) + _gang(5, name="h") + [make_pod(f"f{i}").fraction(300).build() for i in range(4)]
    before = _state(snap)
    first = _run(snap, pods, "MostAllocated", "Topology")
    assert _state(snap) == before
    assert _run(snap, pods, "MostAllocated", "Topology") == first
    assert len(first.binds) + len(first.unschedulable) == len(pods)



# -- score weights -------------------------------------------------------------------------------

def _weighted(snap: ClusterSnapshot, pods: Sequence[PodSpec], *scores: tuple[str, float]) -> CycleResult:
    profile = build_profile(ProfileSettings(scores=tuple(ScoreRef(name, weight) for name, weight in scores)))
    return schedule(snap, pods, profile, now=0.0, rng=random.Random(0))


def _busy_and_empty() -> ClusterSnapshot:
    """Node a has 3 of its 4 GPUs in use, node b none."""
    nodes = [make_node("a").gpus(4).build(), make_node("b").gpus(4).build()]
    return _snap(nodes, [_hold(f"r{i}", "a", (i,)) for i in range(3)])


def test_score_weights_decide_between_scorers_that_disagree() -> None:
    pod = make_pod("p").gpus(1).build()
    assert _where(_weighted(_busy_and_empty(), [pod], ("MostAllocated", 3), ("LeastAllocated", 1))) == {"p": "a"}
    assert _where(_weighted(_busy_and_empty(), [pod], ("MostAllocated", 1), ("LeastAllocated", 2))) == {"p": "b"}


def test_a_scorer_of_weight_zero_has_no_say() -> None:
    pod = make_pod("p").gpus(1).build()
    assert _where(_weighted(_busy_and_empty(), [pod], ("LeastAllocated", 0))) == {"p": "a"}  # the first node
    assert _where(_weighted(_busy_and_empty(), [pod], ("LeastAllocated", 1))) == {"p": "b"}


# -- filters and the failure cache -----------------------------------------------------------------

def test_a_failure_is_not_reused_for_a_pod_that_differs_only_in_its_node_selector() -> None:
    snap = _snap([make_node("a").gpus(1).label("zone", "x").build()])
    nowhere = make_pod("nowhere").gpus(1).selector("zone", "y").created(0.0).build()
    here = make_pod("here").gpus(1).selector("zone", "x").created(1.0).build()
    result = _run(snap, [nowhere, here])
    assert _where(result) == {"here": "a"} and list(_why(result)) == ["nowhere"]


@pytest.mark.parametrize("filters", [
    ("NodeResourcesFit", "TaintToleration", "NodeAffinity", "GpuFit"),
    ("NodeAffinity", "NodeResourcesFit", "GpuFit"),  # first, the mask NodeAffinity keeps per selector
])
def test_one_pods_filters_do_not_narrow_the_next_pods_nodes(filters: tuple[str, ...]) -> None:
    """Pod `big` fits only on b; `small`, with the same selector, must still see a (the busier node):
    the cycle never changes a mask a plugin returned (a plugin may keep it for the next pod)."""
    nodes = [make_node(n).gpus(4).label("zone", "x").build() for n in ("a", "b")]
    snap = _snap(nodes, [_hold(f"r{i}", "a", (i,)) for i in range(3)])
    big = make_pod("big").gpus(2).selector("zone", "x").created(0.0).build()
    small = make_pod("small").gpus(1).selector("zone", "x").created(1.0).build()
    profile = build_profile(ProfileSettings(filters=filters, scores=(ScoreRef("MostAllocated"),)))
    result = schedule(snap, [big, small], profile, now=0.0, rng=random.Random(0))
    assert _where(result) == {"big": "b", "small": "a"}


def test_without_filters_every_node_is_feasible_and_gpus_are_still_given_out() -> None:
    profile = build_profile(ProfileSettings(filters=()))
    assert profile.device_picker is None
    snap = _snap([make_node("a").gpus(2).build(), make_node("b").gpus(2).build()])
    result = schedule(snap, [make_pod("p").gpus(1).build()], profile, now=0.0, rng=random.Random(0))
    assert [(b.node, b.gpus) for b in result.binds] == [("a", (0,))]
