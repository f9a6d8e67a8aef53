"""Topology for gangs (issue 22): required levels, preferred levels and the default.

Cases read as sentences; a Hypothesis property checks that a gang with a required level never
runs in two domains of it, whatever the cluster, the gang (elastic ones too), the members
already running, the scorer and whether preemption is on.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.context import QueueContext
from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.topology_levels import CLIQUE, HOSTNAME, RACK, TopologyConfig
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod


def _node(name: str, gpus: int = 8, rack: str | None = None, clique: str | None = None) -> NodeInfo:
    b = make_node(name).cpu(64_000).mem_gib(512).gpus(gpus)
    if rack is not None:
        b = b.label(RACK, rack)
    if clique is not None:
        b = b.label(CLIQUE, clique)
    return b.build()


def _gang(group: str, size: int, gpus: int) -> list[PodSpec]:
    return [make_pod(f"{group}-{i}").gpus(gpus).gang(group).build() for i in range(size)]


def _hold(pod: str, node: str, gpus: Sequence[int], group: str | None = None) -> Placement:
    return Placement(PodUid(f"default/{pod}"), NodeName(node), 1000, 1024, tuple(gpus), 1000, 0, pod_group=group)


def _run(nodes: list[NodeInfo], pods: list[PodSpec], groups: list[PodGroup], running: Sequence[Placement] = (),
         profile: str = "bestfit", topology: TopologyConfig | None = None) -> CycleResult:
    settings = builtin(profile)
    if topology is not None:
        settings = dataclasses.replace(settings, topology=topology)
    snap = ClusterSnapshot.build(nodes, running, pod_groups=groups)
    return schedule(snap, pods, build_profile(settings), now=0.0, rng=random.Random(0))


def _nodes_of(result: CycleResult) -> list[str]:
    return sorted(b.node for b in result.binds)


# -- the default: a gang that fits one node goes on one node ---------------------------------

SAMPLE_NODES = [_node(f"h100-{i}") for i in range(4)]
PARTLY_USED = [_hold("other", "h100-0", range(6))]


@pytest.mark.parametrize("profile", ["default", "bestfit"])
def test_the_samples_four_by_two_gang_goes_on_one_empty_node_not_three_plus_one(profile: str) -> None:
    """deploy/samples/04-gang.yaml: 4 pods x 2 GPUs, three empty 8-GPU nodes and one with 2 free."""
    result = _run(SAMPLE_NODES, _gang("trainer", 4, 2), [PodGroup("trainer", 4)], PARTLY_USED, profile)
    assert _nodes_of(result) == ["h100-1"] * 4


def test_without_a_default_level_the_packing_scorers_split_the_sample_gang_three_plus_one() -> None:
    """What a new user saw before: BestFit fills the partly used node's two free GPUs first."""
    result = _run(SAMPLE_NODES, _gang("trainer", 4, 2), [PodGroup("trainer", 4)], PARTLY_USED,
                  topology=TopologyConfig(gang_default=""))
    assert _nodes_of(result) == ["h100-0", "h100-1", "h100-1", "h100-1"]


def test_a_gang_too_big_for_any_node_still_runs_across_nodes_by_default() -> None:
    result = _run(SAMPLE_NODES, _gang("big", 3, 8), [PodGroup("big", 3)])
    assert len(result.binds) == 3 and len(set(_nodes_of(result))) == 3


def test_the_default_takes_the_node_that_fits_the_gang_most_tightly() -> None:
    """Best fit among nodes: a 4-GPU gang goes to the node with 4 free, keeping an empty node whole."""
    running = [_hold("a", "h100-0", range(4))]
    result = _run(SAMPLE_NODES[:2], _gang("g", 2, 2), [PodGroup("g", 2)], running)
    assert _nodes_of(result) == ["h100-0", "h100-0"]


def test_the_default_does_not_cut_an_elastic_gang_down_to_what_one_node_holds() -> None:
    result = _run(SAMPLE_NODES[1:3], _gang("e", 3, 4), [PodGroup("e", 1)])
    assert len(result.binds) == 3


# -- required --------------------------------------------------------------------------------

RACKED = [_node("a", rack="r1"), _node("b", rack="r2"), _node("c", rack="r1"), _node("d", rack="r2")]


def test_a_required_rack_keeps_every_member_in_one_rack() -> None:
    running = [_hold("x", "a", range(6)), _hold("y", "b", range(2))]
    group = PodGroup("g", 3, required_topology=RACK)
    result = _run(RACKED, _gang("g", 3, 4), [group], running, topology=TopologyConfig(gang_default=""))
    racks = {n.name: n.labels[RACK] for n in RACKED}
    assert len(result.binds) == 3 and len({racks[b.node] for b in result.binds}) == 1


def test_a_required_rack_without_room_waits_and_says_which_level() -> None:
    running = [_hold("x", "a", range(6)), _hold("y", "d", range(6))]  # r1 and r2 each have 10 free
    group = PodGroup("g", 3, required_topology=RACK)
    result = _run(RACKED, _gang("g", 3, 4), [group], running)
    assert result.binds == ()
    (why,) = {s.reasons for s in result.unschedulable.values()}
    assert why == ("pod group default/g: no domain of topology.gpufleet.io/rack has room for its 3 pods together "
                   "(topology level topology.gpufleet.io/rack)",)


def test_a_node_without_the_required_label_is_never_used() -> None:
    nodes = [_node("a", rack="r1"), _node("b")]
    result = _run(nodes, _gang("g", 2, 8), [PodGroup("g", 2, required_topology=RACK)])
    assert result.binds == ()


def test_a_required_level_joins_the_domain_its_running_members_are_in() -> None:
    running = [_hold("g-old", "a", range(2), group="default/g"), _hold("y", "b", range(4))]
    group = PodGroup("g", 1, required_topology=RACK)  # elastic: one runs, two more may join
    result = _run(RACKED, _gang("g", 2, 8), [group], running)
    assert _nodes_of(result) == ["c"]  # r1's other node, though r2 (12 free) fits tighter than r1 (14)


def test_an_unknown_level_makes_the_gang_wait_naming_the_podgroup_and_the_annotation() -> None:
    group = PodGroup("g", 2, required_topology="example.com/pod")
    result = _run(RACKED, _gang("g", 2, 1), [group])
    assert result.binds == ()
    status = result.unschedulable[PodUid("default/g-0")]
    assert status.plugin == "Topology"
    assert status.reasons == ("podgroup default/g: annotation kai.scheduler/topology-required-placement: "
                              "'example.com/pod' is not a topology level of the profile (kubernetes.io/hostname, "
                              "nvidia.com/gpu.clique, topology.gpufleet.io/rack, topology.gpufleet.io/block, "
                              "topology.kubernetes.io/zone)",)


# -- preferred -------------------------------------------------------------------------------

CLIQUES = [_node("a", rack="r1", clique="c1"), _node("b", rack="r1", clique="c2"),
           _node("c", rack="r1", clique="c2"), _node("d", rack="r2", clique="c3")]


def test_preferred_clique_packs_a_gang_into_one_nvlink_domain_when_no_node_holds_it() -> None:
    running = [_hold("x", "a", range(2))]
    group = PodGroup("g", 2, preferred_topology=CLIQUE)
    result = _run(CLIQUES, _gang("g", 2, 8), [group], running, topology=TopologyConfig(gang_default=""))
    assert _nodes_of(result) == ["b", "c"]


def test_preferred_goes_up_a_level_when_no_domain_of_its_own_holds_the_gang() -> None:
    running = [_hold("x", "b", range(4)), _hold("y", "d", range(4))]  # c1: 8, c2: 12, c3: 4 free
    group = PodGroup("g", 4, preferred_topology=CLIQUE)
    result = _run(CLIQUES, _gang("g", 4, 4), [group], running, topology=TopologyConfig(gang_default=""))
    assert len(result.binds) == 4 and not {b.node for b in result.binds} & {"d"}  # all in rack r1


def test_preferred_falls_back_to_anywhere_rather_than_wait() -> None:
    running = [_hold("x", "a", range(6)), _hold("y", "d", range(6))]
    result = _run(RACKED, _gang("g", 3, 4), [PodGroup("g", 3, preferred_topology=RACK)], running)
    assert len(result.binds) == 3


def test_preferred_host_level_is_what_the_default_does() -> None:
    result = _run(SAMPLE_NODES, _gang("trainer", 4, 2), [PodGroup("trainer", 4, preferred_topology=HOSTNAME)],
                  PARTLY_USED, topology=TopologyConfig(gang_default=""))
    assert _nodes_of(result) == ["h100-1"] * 4


# -- the property ----------------------------------------------------------------------------

@st.composite
def clusters(draw: st.DrawFn) -> list[NodeInfo]:
    nodes = []
    for i in range(draw(st.integers(2, 8))):
        b = make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(draw(st.sampled_from([2, 4, 8])))
        rack = draw(st.sampled_from([None, "r0", "r1", "r2"]))
        if rack is not None:
            b = b.label(RACK, rack)
        clique = draw(st.sampled_from([None, "c0", "c1", "c2", "c3"]))
        if clique is not None:
            b = b.label(CLIQUE, clique)
        nodes.append(b.build())
    return nodes


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[NodeInfo], list[Placement], list[PodSpec], list[PodGroup], bool]:
    nodes = draw(clusters())
    groups, pods, running = [], [], []
    for g in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 5))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        level = draw(st.sampled_from([HOSTNAME, CLIQUE, RACK]))
        groups.append(PodGroup(f"g{g}", draw(st.integers(1, size)), required_topology=level))
        members = [make_pod(f"g{g}-{i}").gpus(gpus).priority(draw(st.sampled_from([0, 100]))).gang(f"g{g}").build()
                   for i in range(size)]
        pods.extend(members)
    taken: set[str] = set()
    for g in range(len(groups)):  # a member already running (an elastic gang growing), on a node of its own
        free: list[str] = [n.name for n in nodes if n.name not in taken]
        has_one: bool = draw(st.booleans())
        if free and has_one:
            node_name = draw(st.sampled_from(free))
            taken.add(node_name)
            running.append(Placement(PodUid(f"default/g{g}-old"), NodeName(node_name), 1000, 1024, (0,), 1000, 0,
                                     pod_group=f"default/g{g}"))
    for k, node in enumerate(nodes):  # lower-priority pods running, as victims for preemption
        if node.name not in taken and draw(st.booleans()):
            used = draw(st.integers(1, len(node.gpus)))
            running.append(Placement(PodUid(f"default/r{k}"), node.name, 1000, 1024, tuple(range(used)), 1000, 0,
                                     priority=-10))
    return nodes, running, pods, groups, draw(st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), scorer=st.sampled_from(["BestFit", "LeastAllocated", "Topology", "Random"]))
def test_a_gang_with_a_required_level_never_spans_two_domains(
        scenario: tuple[list[NodeInfo], list[Placement], list[PodSpec], list[PodGroup], bool], scorer: str) -> None:
    nodes, running, pods, groups, preempt = scenario
    settings_ = ProfileSettings(scores=(ScoreRef(scorer),), queueing=QueueingConfig(preemption=preempt))
    snap = ClusterSnapshot.build(nodes, running, pod_groups=groups)
    result = schedule(snap, pods, build_profile(settings_), now=0.0, rng=random.Random(0))
    labels = {n.name: n.labels for n in nodes}
    for group in groups:
        where = [p.node for p in [*result.binds, *result.nominated] if p.pod_group == group.key]
        if not where:
            continue
        evicted = {e.pod for e in result.evictions}
        where += [p.node for p in running if p.pod_group == group.key and p.pod not in evicted]
        level = group.required_topology
        assert level is not None
        domains = {n if level == HOSTNAME else labels[n].get(level) for n in where}
        assert None not in domains, f"{group.key} placed on a node without {level}"
        assert len(domains) == 1, f"{group.key} spans {sorted(map(str, domains))} of {level}"


def test_another_queues_model_limit_does_not_hide_domains_from_a_required_gang() -> None:
    """The queue layer's node mask is set per pod; the one left by queue a's last pod (no more
    H100s for a) must not keep queue b's gang, which only fits an H100 node, from finding it."""
    nodes = [make_node("h").cpu(64_000).mem_gib(512).gpus(8).build(),
             make_node("t").cpu(64_000).mem_gib(512).gpus(4, model="T4").build()]
    a = [make_pod(f"a{i}").gpus(1).queue("a").created(0.0).build() for i in range(2)]
    gang = [make_pod(f"g-{i}").gpus(2).queue("b").gang("g").created(1.0).build() for i in range(3)]
    snap = ClusterSnapshot.build(nodes, pod_groups=[PodGroup("g", 3, required_topology=HOSTNAME)])
    queues = QueueTree.build([Queue("a", limit={"gpu/H100-80GB": 1000}), Queue("b")])
    profile = build_profile(ProfileSettings(queueing=QueueingConfig(order="fifo")))
    result = schedule(snap, [*a, *gang], profile, now=2.0, rng=random.Random(0), queues=QueueContext(queues))
    assert sorted(b.node for b in result.binds if b.pod_group) == ["h", "h", "h"]
