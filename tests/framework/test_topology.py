"""Topology: multi-GPU pods on one NVLink domain (else one NUMA node); gangs on few nodes, in one rack."""

from __future__ import annotations


import numpy as np
import pytest
from pluginkit import bound, holding, run, scores, snapshot, state

from gpufleet.framework.plugins.topology import Topology, TopologyArgs
from gpufleet.framework.topology_levels import TopologyConfig
from gpufleet.model import Cluster, PodGroup, PodSpec
from gpufleet.testing import make_node, make_pod

RACK = "topology.gpufleet.io/rack"
SCORER_ONLY = TopologyConfig(gang_default="")
"""These tests watch the scorer alone: no search for one domain per gang (tests/core/test_gang_topology.py)."""


def _busy(node: str, *gpus: int) -> list:  # type: ignore[type-arg]
    return [holding(f"{node}{j}", node, gpus=(j,)) for j in gpus]


# a: two NVLink domains with 3 free each (6 on its one NUMA node) | b: domain 1 wholly free
# c: no NVLink, two NUMA nodes with 3 free each | d: no NVLink, 8 free on one NUMA node
NODES = [make_node("a").gpus(8, nvlink_domains=2).build(), make_node("b").gpus(8, nvlink_domains=2).build(),
         make_node("c").gpus(8, nvlink_domains=0, numa_nodes=2).build(),
         make_node("d").gpus(8, nvlink_domains=0).build()]
RUNNING = _busy("a", 0, 4) + _busy("b", 0, 1, 2, 3) + _busy("c", 0, 4)

CASES: list[tuple[str, PodSpec, list[float]]] = [
    ("four GPUs score 100 inside one free NVLink domain, 50 on one NUMA node, else 0",
     make_pod("p").gpus(4).build(), [50.0, 100.0, 0.0, 50.0]),
    ("two GPUs fit a domain on a and b, only a NUMA node on c and d",
     make_pod("p").gpus(2).build(), [100.0, 100.0, 50.0, 50.0]),
    ("a one-GPU pod has no topology preference", make_pod("p").gpus(1).build(), [0.0] * 4),
    ("a fraction has no topology preference", make_pod("p").fraction(100).build(), [0.0] * 4),
    ("a CPU-only pod has no topology preference", make_pod("p").build(), [0.0] * 4),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_nvlink_and_numa_scores(pod: PodSpec, expected: list[float]) -> None:
    assert scores(Topology(TopologyArgs()), snapshot(NODES, RUNNING), pod) == expected


# a, b in rack r1 | c in r2 | d has no rack label | e is in zone r1 (the fallback label)
GANG_NODES = [make_node("a").gpus(8, nvlink_domains=2).label(RACK, "r1").build(),
              make_node("b").gpus(8).label(RACK, "r1").build(),
              make_node("c").gpus(8).label(RACK, "r2").build(), make_node("d").gpus(8).build(),
              make_node("e").gpus(8).label("topology.kubernetes.io/zone", "r1").build()]


def test_gang_members_score_100_on_chosen_nodes_and_50_in_the_same_rack() -> None:
    topo, st, snap = Topology(TopologyArgs()), state(), snapshot(GANG_NODES)
    first, second = make_pod("m0").gpus(1).gang("g").build(), make_pod("m1").gpus(1).gang("g").build()
    every = np.arange(5)
    assert topo.score(st, first, snap, every).tolist() == [0.0] * 5
    topo.reserve(st, first, snap, 0)
    assert topo.score(st, second, snap, every).tolist() == [100.0, 50.0, 0.0, 0.0, 50.0]
    # a multi-GPU member averages its NVLink part with its gang part
    big = make_pod("m2").gpus(4).gang("g").build()
    assert topo.score(st, big, snap, every).tolist() == [100.0, 75.0, 50.0, 50.0, 75.0]
    # another gang is not pulled anywhere
    assert topo.score(st, make_pod("o").gpus(1).gang("other").build(), snap, every).tolist() == [0.0] * 5
    topo.unreserve(st, first, snap, 0)
    assert topo.score(st, second, snap, every).tolist() == [0.0] * 5


def test_uniform_exactly_when_no_component_applies() -> None:
    """The core leaves a uniform scorer out of the sum: it may say so only when every node scores alike."""
    topo, st, snap = Topology(TopologyArgs()), state(), snapshot(GANG_NODES)
    every = np.arange(5)
    first, second = make_pod("m0").gpus(1).gang("g").build(), make_pod("m1").gpus(1).gang("g").build()
    single, big = make_pod("s").fraction(300).build(), make_pod("b").gpus(4).build()
    for pod in (single, first, second):
        assert topo.uniform(st, pod, snap), pod.uid
        assert len(set(topo.score(st, pod, snap, every).tolist())) == 1, pod.uid
    assert not topo.uniform(st, big, snap)
    topo.reserve(st, first, snap, 0)
    assert not topo.uniform(st, second, snap)
    assert len(set(topo.score(st, second, snap, every).tolist())) > 1
    assert topo.uniform(st, make_pod("o").gpus(1).gang("other").build(), snap)


def test_a_gang_without_a_rack_is_only_pulled_to_its_nodes() -> None:
    topo, st, snap = Topology(TopologyArgs()), state(), snapshot(GANG_NODES)
    topo.reserve(st, make_pod("m0").gpus(1).gang("g").build(), snap, 3)
    assert topo.score(st, make_pod("m1").gpus(1).gang("g").build(), snap, np.arange(5)).tolist() == \
        [0.0, 0.0, 0.0, 100.0, 0.0]


def test_rack_labels_are_configurable() -> None:
    topo = Topology(TopologyArgs(rack_labels=("topology.kubernetes.io/zone",)))
    st, snap = state(), snapshot(GANG_NODES)
    topo.reserve(st, make_pod("m0").gpus(1).gang("g").build(), snap, 4)
    assert topo.score(st, make_pod("m1").gpus(1).gang("g").build(), snap, np.arange(5)).tolist() == \
        [0.0, 0.0, 0.0, 0.0, 100.0]


def test_racks_are_recomputed_for_every_new_cluster() -> None:
    """A cluster's id() is reused once it is freed; Topology must not keep the old cluster's racks."""
    topo = Topology(TopologyArgs())
    old_nodes = [make_node("x").label(RACK, "r9").build()]
    new_nodes = [make_node("a").build(), make_node("b").label(RACK, "r1").build()]
    for _ in range(10):
        old = Cluster(old_nodes)
        topo.racks(old)
        del old  # freed at once (refcount); no gc.collect(), which would shuffle the free lists
        new = Cluster(new_nodes)  # usually at the freed cluster's address
        assert topo.racks(new).tolist() == [-1, 0]


def test_a_four_gpu_pod_prefers_a_free_nvlink_domain_over_a_less_loaded_node() -> None:
    nodes, running = NODES[:2], _busy("a", 0, 4) + _busy("b", 0, 1, 2, 3)
    pod = make_pod("p").gpus(4).build()
    assert bound(run(nodes, [pod], "LeastAllocated", running=running)) == {"p": ("a", (1, 2, 3, 5))}
    assert bound(run(nodes, [pod], "LeastAllocated", "Topology", running=running)) == {"p": ("b", (4, 5, 6, 7))}


def test_without_nvlink_a_four_gpu_pod_prefers_one_numa_node() -> None:
    nodes = [make_node(n).gpus(8, nvlink_domains=0, numa_nodes=2).build() for n in "ab"]
    running = _busy("a", 0, 4) + _busy("b", 0, 1, 2)
    pod = make_pod("p").gpus(4).build()
    assert bound(run(nodes, [pod], "LeastAllocated", running=running)) == {"p": ("a", (1, 2, 3, 5))}
    assert bound(run(nodes, [pod], "LeastAllocated", "Topology", running=running)) == {"p": ("b", (4, 5, 6, 7))}


def test_gang_members_are_pulled_onto_the_nodes_already_chosen() -> None:
    nodes = [make_node(n).gpus(4).label(RACK, n).build() for n in "abc"]
    gang = [make_pod(f"m{i}").gpus(1).gang("g").build() for i in range(4)]
    spread = run(nodes, gang, "LeastAllocated", groups=[PodGroup("g", 4)], topology=SCORER_ONLY)
    assert [bound(spread)[f"m{i}"][0] for i in range(4)] == ["a", "b", "c", "a"]
    packed = run(nodes, gang, "LeastAllocated", "Topology", groups=[PodGroup("g", 4)], topology=SCORER_ONLY)
    assert bound(packed) == {f"m{i}": ("a", (i,)) for i in range(4)}


def test_gang_members_that_overflow_a_node_stay_in_its_rack() -> None:
    nodes = [make_node("a").gpus(1).label(RACK, "r1").build(), make_node("b").gpus(4).label(RACK, "r2").build(),
             make_node("c").gpus(4).label(RACK, "r1").build()]
    gang = [make_pod(f"m{i}").gpus(1).gang("g").build() for i in range(3)]
    plain = run(nodes, gang, "MostAllocated", groups=[PodGroup("g", 3)], topology=SCORER_ONLY)
    assert [bound(plain)[f"m{i}"][0] for i in range(3)] == ["a", "b", "b"]
    racked = run(nodes, gang, "MostAllocated", "Topology", groups=[PodGroup("g", 3)], topology=SCORER_ONLY)
    assert [bound(racked)[f"m{i}"][0] for i in range(3)] == ["a", "c", "c"]
