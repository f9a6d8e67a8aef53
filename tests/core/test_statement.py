"""`Statement`, the core's one transactional type: place, evict, checkpoint, roll back."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from gpufleet.core.statement import DRA, Statement
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.status import Code, Status
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid
from gpufleet.testing import make_node, make_pod
from tests.core.dra_builders import claim, exactly, gpu_device, gpu_node, gpu_slice, node_slice, plain_node
from tests.core.test_claims import _pod, _snap


def _statement(snap: ClusterSnapshot) -> Statement:
    return Statement(snap, build_profile(ProfileSettings(scores=(ScoreRef("MostAllocated"),))), 0.0, random.Random(0))


def test_rollback_undoes_places_and_evictions_since_the_mark_newest_first() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 1000, 0, (0,), 1000, 0)
    snap = ClusterSnapshot.build([make_node("n1").gpus(2).build(), make_node("n2").gpus(2).build()], [running])
    st = _statement(snap)
    first = st.place(make_pod("a").gpus(1).build())
    assert isinstance(first, Placement) and (first.node, first.gpus) == ("n1", (1,))
    before = st.view.usage.copy()
    epoch = st.epoch
    mark = st.checkpoint()
    second = st.place(make_pod("b").gpus(2).build())
    assert isinstance(second, Placement) and second.node == "n2"
    st.evict(running)
    assert st.epoch == epoch + 1
    third = st.place(make_pod("c").gpus(1).build())
    assert isinstance(third, Placement) and (third.node, third.gpus) == ("n1", (0,))
    undone = st.rollback(mark)
    assert [(c.placement.pod, c.is_eviction) for c in undone] == [
        ("default/c", False), ("default/old", True), ("default/b", False)]
    assert st.epoch == epoch + 2  # capacity was given back: failures seen before may not hold
    for name in ("gpu_used_milli", "free_cpu", "free_whole", "free_pods"):
        assert np.array_equal(getattr(st.view.usage, name), getattr(before, name)), name
    assert st.rollback(st.checkpoint()) == []


def test_rolling_back_only_an_eviction_takes_capacity_and_keeps_the_epoch() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 0, 0, (0,), 1000, 0)
    snap = ClusterSnapshot.build([make_node("n1").gpus(1).build()], [running])
    st = _statement(snap)
    mark = st.checkpoint()
    st.evict(running)
    epoch = st.epoch
    assert int(st.view.usage.free_whole[0]) == 1
    st.rollback(mark)
    assert (int(st.view.usage.free_whole[0]), st.epoch) == (0, epoch)


def test_a_pod_that_fits_nowhere_fails_again_only_until_capacity_comes_back() -> None:
    running = Placement(PodUid("default/old"), NodeName("n1"), 0, 0, (0,), 1000, 0)
    st = _statement(ClusterSnapshot.build([make_node("n1").gpus(1).build()], [running]))
    why = st.place(make_pod("a").gpus(1).build())
    assert isinstance(why, Status)
    assert st.place(make_pod("b").gpus(1).build()) is why  # the same constraints: the cached failure
    st.evict(running)
    assert isinstance(st.place(make_pod("c").gpus(1).build()), Placement)


# -- pods with DRA claims ------------------------------------------------------------------------

def _claims_statement(snap: ClusterSnapshot, *scores: str, filters: bool = True) -> Statement:
    settings = ProfileSettings(scores=tuple(ScoreRef(s) for s in scores))
    return Statement(snap, build_profile(settings if filters else replace(settings, filters=())), 0.0, random.Random(0))


def test_a_pod_that_fits_nowhere_gets_the_count_per_filter_reason_by_default() -> None:
    st = _statement(ClusterSnapshot.build([make_node("n1").gpus(1).build()]))
    why = st.place(make_pod("a").gpus(2).build())
    assert isinstance(why, Status) and why.reasons == ("0/1 nodes are available: 1 Insufficient GPU.",)


def test_a_claim_pod_in_a_cluster_without_dra_is_unschedulable_naming_its_claim() -> None:
    st = _claims_statement(ClusterSnapshot.build([make_node("n1").build()]))
    why = st.place(_pod("p", "c"))
    assert why == Status(Code.UNSCHEDULABLE, ("resourceclaim default/c not found",), DRA)


def test_a_claim_pod_that_fits_nowhere_says_so_as_dynamic_resources() -> None:
    st = _claims_statement(_snap([plain_node("a")], [gpu_slice("a", gpus=1)], [claim("c", [exactly(count=2)])]))
    why = st.place(_pod("p", "c"))
    assert isinstance(why, Status) and (why.code, why.plugin) == (Code.UNSCHEDULABLE, DRA)
    assert "resourceclaim default/c: request gpu: no node has 2 device(s)" in why.reasons[-1]


def test_claims_that_fit_by_count_but_not_together_say_why_on_the_last_node_tried() -> None:
    devices = [gpu_device("a", m, domain=d) for m, d in enumerate("xy")]
    c = claim("c", [exactly(count=2)], constraints=[{"matchAttribute": "gpu.gpufleet.io/nvlinkDomain"}])
    st = _claims_statement(_snap([plain_node("a")], [node_slice("a", devices)], [c]))
    assert st.place(_pod("p", "c")) == Status(
        Code.UNSCHEDULABLE, ("resourceclaim default/c: request gpu: no fitting devices on node a",), DRA)


def test_a_claim_pod_is_placed_without_any_filter() -> None:
    st = _claims_statement(_snap([plain_node("a")], [gpu_slice("a", gpus=1)], [claim("c", [exactly()])]),
                           filters=False)
    placed = st.place(_pod("p", "c"))
    assert isinstance(placed, Placement) and placed.node == "a"


def test_claims_placed_as_gpus_whose_chosen_gpus_have_no_device_hold_only_their_devices() -> None:
    """a's GPUs 0 and 1 publish no device: the GPU chosen first has none, the allocator takes gpu-2."""
    snap = _snap([gpu_node("a", gpus=4)], [node_slice("a", [gpu_device("a", m) for m in (2, 3)])],
                 [claim("c", [exactly()])])
    st = _claims_statement(snap)
    placed = st.place(_pod("p", "c"))
    assert isinstance(placed, Placement)
    assert [d.device for a in placed.claims for d in a.devices] == ["gpu-2"]
    assert placed.gpus == () and int(st.view.usage.free_whole[0]) == 3


def test_the_profiles_scores_decide_between_nodes_the_claims_fit_alike() -> None:
    busy = Placement(PodUid("default/busy"), NodeName("b"), 32_000, 0)
    snap = _snap([plain_node("a"), plain_node("b")], [gpu_slice("a", gpus=1), gpu_slice("b", gpus=1)],
                 [claim("c", [exactly()])], running=[busy])
    placed = _claims_statement(snap, "MostAllocated").place(_pod("p", "c"))
    assert isinstance(placed, Placement) and placed.node == "b"
