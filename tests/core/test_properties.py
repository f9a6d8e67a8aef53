"""Hypothesis properties of schedule(), for every scorer in the registry.

Random small clusters (GPU models, MIG layouts, unhealthy GPUs, NVLink/NUMA, taints, labels)
and random pods (CPU-only, fractions with and without GPU memory, 1/2/4/8 GPUs, MIG, model
constraints, tolerations, selectors, affinity, gangs). A first batch is scheduled and applied
so that the second batch meets running pods, including running gang members. Then:

- after `apply(binds)` nothing is overcommitted: CPU, memory, pod count, GPU milli and GPU
  memory (`Usage.overcommitted`), no MIG slice twice, no unhealthy GPU, no MIG-mode GPU used
  by a whole-GPU or fractional pod; every bind holds exactly what its pod asked for on a node
  its constraints allow;
- gangs are all or nothing: a group binds no member, or enough to reach minMember together
  with its running members;
- the same snapshot and seed give the identical result;
- shuffling the node list given to `ClusterSnapshot.build` changes nothing (nodes are ordered
  by name, the documented tie-break).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.interfaces import ScorePlugin
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.framework.plugins.node_affinity import matches
from gpufleet.framework.plugins.taint_toleration import untolerated
from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.registry import BuildContext, default_registry
from gpufleet.model import ClusterSnapshot, GpuKind, NodeInfo, PodGroup, PodSpec
from gpufleet.testing import make_node, make_pod


def _scorers() -> list[str]:
    """Every registered plugin with a score extension point."""
    return [name for name, entry in sorted(default_registry().items())
            if isinstance(entry.factory(entry.args_type(), BuildContext()), ScorePlugin)]


SCORERS = _scorers()
GPU_MEM_GIB = {"T4": 16, "A100-80GB": 80, "H100-80GB": 80}
LAYOUTS = [("7g.80gb",), ("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7, ("3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"),
           ("4g.40gb", "2g.20gb", "1g.10gb"), ("1g.20gb",) * 4]
TAINTS = [None, ("dedicated", "gpu", "NoSchedule"), ("spot", "yes", "PreferNoSchedule"), ("maint", "now", "NoExecute")]
GANGS = ("g0", "g1")


@st.composite
def nodes_st(draw: st.DrawFn) -> list[NodeInfo]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        b = (make_node(f"n{i}").cpu(draw(st.sampled_from([4000, 16000, 64000])))
             .mem_gib(draw(st.sampled_from([8, 64, 256]))).max_pods(draw(st.sampled_from([2, 5, 110]))))
        model = draw(st.sampled_from([None, "T4", "A100-80GB", "H100-80GB"]))
        if model is not None:
            n = draw(st.sampled_from([1, 2, 4, 8]))
            b.gpus(n, model=model, mem_gib=GPU_MEM_GIB[model], nvlink_domains=draw(st.sampled_from([0, 1, 2])),
                   numa_nodes=draw(st.sampled_from([1, 2])))
            for j in range(n):
                if model != "T4" and draw(st.integers(0, 3)) == 0:
                    b.mig(j, *draw(st.sampled_from(LAYOUTS)))
                if draw(st.integers(0, 5)) == 0:
                    b.unhealthy(j)
        taint = draw(st.sampled_from(TAINTS))
        if taint is not None:
            b.taint(*taint)
        for key, values in (("zone", ["z1", "z2"]), ("gen", ["1", "2"])):
            value = draw(st.sampled_from([None, *values]))
            if value is not None:
                b.label(key, value)
        nodes.append(b.build())
    return nodes


@st.composite
def pods_st(draw: st.DrawFn, prefix: str, max_pods: int) -> list[PodSpec]:
    pods = []
    for i in range(draw(st.integers(0, max_pods))):
        b = (make_pod(f"{prefix}{i}").cpu(draw(st.sampled_from([0, 500, 2000, 8000])))
             .mem_mib(draw(st.sampled_from([0, 1024, 16384]))))
        kind = draw(st.sampled_from(["cpu", "fraction", "fraction", "whole", "whole", "mig"]))
        if kind == "fraction":
            b.fraction(draw(st.sampled_from([1, 100, 250, 500, 999])), draw(st.sampled_from([0, 0, 2048, 12000])))
        elif kind == "whole":
            b.gpus(draw(st.sampled_from([1, 2, 4, 8])))
        elif kind == "mig":
            b.mig(draw(st.sampled_from(["1g.10gb", "3g.40gb", "1g.20gb", "7g.80gb"])), draw(st.integers(1, 2)))
        if kind == "mig":
            models = draw(st.sampled_from([(), ("H100-80GB",), ("A100-80GB", "H100-80GB")]))
        else:
            models = draw(st.sampled_from([(), (), ("T4",), ("A100-80GB", "H100-80GB"), ("H100-80GB",)]))
        b.models(*models)
        if draw(st.booleans()):
            b.tolerate("dedicated", "gpu")
        if draw(st.integers(0, 3)) == 0:
            b.tolerate("maint", op="Exists", effect="NoExecute")
        if draw(st.integers(0, 4)) == 0:
            b.selector("zone", "z1")
        affinity = draw(st.sampled_from([None, None, None, ("zone", "NotIn", "z2"), ("gen", "Gt", "1"),
                                         ("zone", "Exists")]))
        if affinity is not None:
            b.affinity(*affinity)
        gang = draw(st.sampled_from([None, None, *GANGS]))
        if gang is not None:
            b.gang(gang)
        pods.append(b.priority(draw(st.integers(0, 2))).created(draw(st.sampled_from([0.0, 1.0]))).build())
    return pods


@st.composite
def scenario_st(draw: st.DrawFn) -> tuple[list[NodeInfo], list[PodGroup], list[PodSpec], list[PodSpec], int]:
    groups = [PodGroup(g, draw(st.integers(1, 4))) for g in GANGS]
    return (draw(nodes_st()), groups, draw(pods_st("r", 6)), draw(pods_st("p", 12)),
            draw(st.integers(0, 2**16)))


def _profile(scorer: str, pods: list[PodSpec]) -> Profile:
    return build_profile(ProfileSettings(scores=(ScoreRef(scorer),)), BuildContext(typical_tasks(pods)))


def _run(snap: ClusterSnapshot, pods: list[PodSpec], profile: Profile, seed: int) -> CycleResult:
    return schedule(snap, pods, profile, now=0.0, rng=random.Random(seed))


def check_invariants(snap: ClusterSnapshot, pending: list[PodSpec], result: CycleResult) -> ClusterSnapshot:
    """Assert every invariant of one cycle's result; return the snapshot with its binds applied."""
    pods = {p.uid: p for p in pending}
    bound = {p.pod for p in result.binds}
    assert len(bound) == len(result.binds)
    assert bound | set(result.unschedulable) == set(pods)
    assert not bound & set(result.unschedulable)

    after = snap.apply(result.binds)
    c, u = after.cluster, after.usage
    for i in range(c.n_nodes):
        assert u.overcommitted(i) is None, c.names[i]

    slices = Counter((p.node, s) for p in after.placements.values() for s in p.mig_slices)
    assert not [k for k, n in slices.items() if n > 1], "a MIG slice is used twice"

    for p in result.binds:
        pod, i = pods[p.pod], c.index[p.node]
        node = c.nodes[i]
        g = pod.gpu
        assert (p.cpu_milli, p.mem_mib, p.pod_group) == (pod.cpu_milli, pod.mem_mib, pod.pod_group)
        assert untolerated(node.taints, pod.tolerations) is None
        assert matches(pod, node)
        if g.kind is not GpuKind.NONE and pod.gpu_models:
            assert node.gpu_model in pod.gpu_models
        assert len(set(p.gpus)) == len(p.gpus)
        for j in p.gpus:
            assert snap.usage.gpu_healthy[i, j], "an unhealthy GPU was used"
            assert not node.gpus[j].mig_enabled, "a MIG-mode GPU was used by a whole or fractional pod"
        if g.kind is GpuKind.WHOLE:
            assert (len(p.gpus), p.milli, p.mig_slices) == (g.count, 1000, ())
            assert all(snap.usage.gpu_used_milli[i, j] == 0 for j in p.gpus), "a whole GPU was not free"
        elif g.kind is GpuKind.FRACTION:
            assert (len(p.gpus), p.milli, p.gpu_mem_mib, p.mig_slices) == (1, g.milli, g.mem_mib, ())
        elif g.kind is GpuKind.MIG:
            assert p.gpus == () and len(set(p.mig_slices)) == g.count
            start = int(c.slice_start[i])
            for s in p.mig_slices:
                assert c.mig_profiles[int(c.slice_prof[start + s])] == g.mig_profile
                assert snap.usage.gpu_healthy[i, int(c.slice_gpu[start + s])], "a MIG slice of an unhealthy GPU"
        else:
            assert (p.gpus, p.mig_slices) == ((), ())

    for key, group in snap.pod_groups.items():
        members = [uid for uid, pod in pods.items() if pod.pod_group == key]
        placed = sum(1 for uid in members if uid in bound)
        running = sum(1 for p in snap.placements.values() if p.pod_group == key)
        assert placed == 0 or placed + running >= group.min_member, key
    return after


@pytest.mark.parametrize("scorer", SCORERS)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenario_st(), shuffle_seed=st.integers(0, 1000))
def test_schedule_invariants(scorer: str, scenario: tuple[list[NodeInfo], list[PodGroup], list[PodSpec],
                                                          list[PodSpec], int], shuffle_seed: int) -> None:
    nodes, groups, first, second, seed = scenario
    profile = _profile(scorer, first + second)

    snap = ClusterSnapshot.build(nodes, (), groups)
    warm = _run(snap, first, profile, seed)
    snap = check_invariants(snap, first, warm)

    result = _run(snap, second, profile, seed)
    check_invariants(snap, second, result)

    assert _run(snap, second, profile, seed) == result, "same snapshot and seed, same profile object"
    assert _run(snap, second, _profile(scorer, first + second), seed) == result, "same snapshot and seed"

    shuffled = list(nodes)
    random.Random(shuffle_seed).shuffle(shuffled)
    again = ClusterSnapshot.build(shuffled, list(snap.placements.values()), groups)
    assert _run(again, second, profile, seed) == result, "shuffling the node list changed the outcome"


@st.composite
def sharing_st(draw: st.DrawFn) -> tuple[list[NodeInfo], list[PodSpec], int]:
    """Fraction-heavy workloads on small GPUs, where GPU memory runs out before GPU milli does."""
    nodes = []
    for i in range(draw(st.integers(2, 4))):
        b = make_node(f"n{i}").gpus(draw(st.sampled_from([1, 2, 4])), model=draw(st.sampled_from(["T4", "A100-80GB"])),
                                    mem_gib=16)
        if draw(st.integers(0, 4)) == 0:
            b.unhealthy(0)
        nodes.append(b.build())
    pods = []
    for i in range(draw(st.integers(1, 12))):
        b = make_pod(f"p{i}").cpu(0)
        if draw(st.integers(0, 5)) == 0:
            b.gpus(1)
        else:
            b.fraction(draw(st.sampled_from([100, 250, 500, 700])), draw(st.sampled_from([0, 2048, 6000, 12000])))
        pods.append(b.build())
    return nodes, pods, draw(st.integers(0, 2**16))


@pytest.mark.parametrize("scorer", SCORERS)
@settings(max_examples=30, deadline=None)
@given(scenario=sharing_st())
def test_shared_gpus_never_overcommit_gpu_memory(scorer: str, scenario: tuple[list[NodeInfo], list[PodSpec], int]
                                                 ) -> None:
    nodes, pods, seed = scenario
    snap = ClusterSnapshot.build(nodes)
    result = _run(snap, pods, _profile(scorer, pods), seed)
    check_invariants(snap, pods, result)


def test_the_registry_scorers_are_all_covered() -> None:
    assert {"MostAllocated", "LeastAllocated", "BestFit", "DotProduct", "GpuPacking", "GpuClustering", "FGD",
            "Random", "Topology"} <= set(SCORERS)
    assert not {"NodeResourcesFit", "TaintToleration", "NodeAffinity", "GpuFit"} & set(SCORERS)


LONE = [("BestFit", 1.0), ("BestFit", 0.5), ("BestFit", 3.0), ("BestFit", 0.0)]


@pytest.mark.parametrize(("scorer", "weight"), LONE)
@pytest.mark.parametrize("others", [(), ("Topology",), ("RecentFaults",)])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenario_st())
def test_a_lone_scorer_skips_normalising_without_changing_a_choice(
        scorer: str, weight: float, others: tuple[str, ...],
        scenario: tuple[list[NodeInfo], list[PodGroup], list[PodSpec], list[PodSpec], int]) -> None:
    """When one scorer is left with a preference and declares that its normalisation keeps
    its first highest score first, the core takes that node from the raw scores; forcing the
    full path (normalise, weight, sum) must bind exactly the same."""
    nodes, groups, first, second, seed = scenario
    refs = (ScoreRef(scorer, weight), *(ScoreRef(o) for o in others))
    profile = build_profile(ProfileSettings(scores=refs))
    assert profile.keeps_first_max[0]
    full = dataclasses.replace(profile, keeps_first_max=(False,) * len(refs))
    snap = ClusterSnapshot.build(nodes, (), groups)
    snap = snap.apply(_run(snap, first, full, seed).binds)
    assert _run(snap, second, profile, seed) == _run(snap, second, full, seed)


class _Reversed:
    """Raw score = node index; normalising reverses it, so the normalised best is the lowest index."""

    name = "Reversed"

    def score(self, state: object, pod: PodSpec, view: object, nodes: np.ndarray) -> np.ndarray:
        return nodes.astype(np.float64)

    def normalize_score(self, scores: np.ndarray) -> np.ndarray:
        return -scores


def test_a_normalising_scorer_that_does_not_keep_the_first_max_is_normalised() -> None:
    nodes = [make_node(f"n{i}").gpus(1).build() for i in range(3)]
    profile = dataclasses.replace(build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),))),
                                  scores=((_Reversed(), 1.0),), normalizing=(True,), uniform=(False,),
                                  keeps_first_max=(False,), device_picker=None)
    pod = make_pod("p").gpus(1).build()
    snap = ClusterSnapshot.build(nodes)
    assert [b.node for b in _run(snap, [pod], profile, 0).binds] == ["n0"]
    # Declared (wrongly) as keeping the first max, the raw scores decide: the check above has teeth.
    wrong = dataclasses.replace(profile, keeps_first_max=(True,))
    assert [b.node for b in _run(snap, [pod], wrong, 0).binds] == ["n2"]
