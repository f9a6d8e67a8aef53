"""DRA in the cache: pods' claims, pools of gpufleet's drivers only, bad objects left out with
one log line, what bound and assumed pods hold, and the claims a pod must wait for."""

from __future__ import annotations

import logging

import pytest

from gpufleet.kube import translate
from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.claims import allocation_status
from gpufleet.model import ModelError, NodeName, Placement, PodUid
from gpufleet.model.dra import AllocatedDevice, ClaimAllocation

from .claim_fakes import DRIVER, GPU_CLASS, claim, claim_pod, gpu_slice

NODE = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def cache_with(*claims: dict[str, object], drivers: tuple[str, ...] = (DRIVER,), gpus: int = 4) -> SchedulerCache:
    cache = SchedulerCache(dra_drivers=drivers)
    cache.upsert_node(NODE)
    cache.upsert_slice(gpu_slice("n1", gpus))
    cache.upsert_class(GPU_CLASS)
    for c in claims:
        cache.upsert_claim(c)
    return cache


def alloc(key: str, *devices: str) -> ClaimAllocation:
    return ClaimAllocation(key, tuple(AllocatedDevice("gpu", DRIVER, "n1", d) for d in devices), "n1")


def free(cache: SchedulerCache) -> int:
    return int(cache.snapshot().usage.dev_free.sum())


# -- pods' claims ------------------------------------------------------------------------------

def test_a_pods_claims_direct_and_from_templates() -> None:
    pod = claim_pod("p", "shared", templated={"gpu": "p-gpu-x7", "later": None})
    claims = translate.pod_claims(pod)
    assert claims.keys == ("ns/shared", "ns/p-gpu-x7") and claims.templated == ("ns/p-gpu-x7",)
    assert claims.missing == ("later (template tmpl)",)
    assert translate.pod_spec(pod).claims == ("ns/shared", "ns/p-gpu-x7")


def test_a_template_entry_the_controller_says_needs_no_claim_is_left_out() -> None:
    pod = claim_pod("p", templated={"gpu": None})
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpu"}]}
    assert translate.pod_claims(pod) == translate.PodClaims()


def test_an_entry_naming_neither_a_claim_nor_a_template_is_an_invalid_request() -> None:
    pod = claim_pod("p")
    pod["spec"]["resourceClaims"] = [{"name": "gpu"}]
    with pytest.raises(ModelError, match=r"pod ns/p: spec.resourceClaims\[0\]: exactly one of"):
        translate.pod_spec(pod)


def test_a_pod_waits_for_its_template_claim_and_for_one_made_for_it() -> None:
    cache = cache_with()
    cache.upsert_pod(claim_pod("p", templated={"gpu": None}))
    (waiting,) = cache.pending()
    assert "waiting for the ResourceClaim of gpu (template tmpl) to be created" in (cache.claims_unready(waiting) or "")
    cache.upsert_pod(claim_pod("p", templated={"gpu": "p-gpu"}))
    made = claim("p-gpu")
    made["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "q", "uid": "uid-q",
                                            "controller": True}]
    cache.upsert_claim(made)
    (pending,) = cache.pending()
    assert cache.claims_unready(pending) == "resourceclaim ns/p-gpu was not created for pod ns/p (its owner is another object)"
    made["metadata"]["ownerReferences"][0]["uid"] = "uid-p"
    made["metadata"]["resourceVersion"] = "2"
    cache.upsert_claim(made)
    assert cache.claims_unready(pending) is None


# -- pools and bad objects -----------------------------------------------------------------------

def test_only_the_pools_of_gpufleets_drivers_join_the_snapshot() -> None:
    assert cache_with().snapshot().cluster.devices.n_devices == 4
    assert cache_with(drivers=()).snapshot().cluster.devices.n_devices == 0
    assert cache_with(drivers=("*",)).snapshot().cluster.devices.n_devices == 4
    other = cache_with(drivers=("gpu.gpufleet.io",))
    assert other.snapshot().cluster.devices.n_devices == 0 and other.foreign_drivers() == [DRIVER]


def test_a_new_slice_generation_rebuilds_the_cluster() -> None:
    cache = cache_with(gpus=4)
    assert cache.snapshot().cluster.devices.n_devices == 4
    cache.upsert_slice(gpu_slice("n1", 8, generation=2))
    assert cache.snapshot().cluster.devices.n_devices == 8


def test_a_malformed_slice_class_or_claim_is_logged_once_naming_object_and_field_and_left_out(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = cache_with()
    bad = gpu_slice("n2", 1)
    bad["spec"]["pool"]["resourceSliceCount"] = 0
    bad_claim = claim("c9", count=0)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            cache.upsert_slice(bad)
            cache.upsert_class({"metadata": {"name": "broken"}, "spec": {"selectors": [{"cel": {}}]}})
            cache.upsert_claim(bad_claim)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ignoring ResourceSlice n2-gpu.nvidia.com: spec.pool.resourceSliceCount: must be at least 1, got 0",
        "ignoring DeviceClass broken: spec.selectors[0].cel.expression: is required",
        "ignoring ResourceClaim ns/c9: spec.devices.requests[0].exactly.count: must be between 1 and 128, got 0"]
    snap = cache.snapshot()
    assert snap.cluster.devices.n_devices == 4 and "broken" not in snap.dra.classes and "ns/c9" not in snap.dra.claims
    cache.upsert_pod(claim_pod("p", "c9"))
    (pending,) = cache.pending()
    assert "exactly.count: must be between 1 and 128, got 0 (the claim cannot be read by gpufleet)" in (
        cache.claims_unready(pending) or "")


def test_a_claim_that_cannot_be_read_still_holds_the_devices_it_is_allocated() -> None:
    bad = claim("c9", count=0, allocation=allocation_status(alloc("ns/c9", "gpu-0"), 0.0))
    assert free(cache_with(bad)) == 3


def test_an_incomplete_pool_is_left_out_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    cache = cache_with()
    half = gpu_slice("n1", 4, generation=2)
    half["spec"]["pool"]["resourceSliceCount"] = 2
    with caplog.at_level(logging.WARNING):
        cache.upsert_slice(half)
        cache.snapshot()
        cache.snapshot()
    assert [r.getMessage() for r in caplog.records] == [
        f"pool {DRIVER}/n1 generation 2: 1 of 2 slices seen; not used until all are"]
    assert cache.snapshot().dra.problems


# -- who holds what ----------------------------------------------------------------------------

def test_allocated_claims_hold_their_devices_and_a_bound_pod_carries_those_reserved_for_it_alone() -> None:
    mine = claim("c1", allocation=allocation_status(alloc("ns/c1", "gpu-0"), 0.0),
                 reservedFor=[{"resource": "pods", "name": "p", "uid": "uid-p"}])
    shared = claim("c2", allocation=allocation_status(alloc("ns/c2", "gpu-1"), 0.0),
                   reservedFor=[{"resource": "pods", "name": "p", "uid": "uid-p"},
                                {"resource": "pods", "name": "q", "uid": "uid-q"}])
    cache = cache_with(mine, shared)
    pod = claim_pod("p", "c1", "c2")
    pod["spec"]["nodeName"] = "n1"
    cache.upsert_pod(pod)
    snap = cache.snapshot()
    assert snap.placements[PodUid("uid-p")].claims == (alloc("ns/c1", "gpu-0"),)
    assert int(snap.usage.dev_free.sum()) == 2
    evicted = snap.apply(releases=[PodUid("uid-p")])
    assert int(evicted.usage.dev_free.sum()) == 3, "evicting the pod frees its own claim, not the shared one"


def test_an_assumed_allocation_shows_as_allocated_until_the_write_echoes() -> None:
    cache = cache_with(claim("c1"))
    cache.upsert_pod(claim_pod("p", "c1"))
    decided = Placement(PodUid("uid-p"), NodeName("n1"), claims=(alloc("ns/c1", "gpu-2"),))
    cache.assume("ns/p", decided)
    snap = cache.snapshot()
    assert snap.dra.claims["ns/c1"].allocation == decided.claims[0].devices and free(cache) == 3
    written = claim("c1", version=2, allocation=allocation_status(decided.claims[0], 0.0),
                    reservedFor=[{"resource": "pods", "name": "p", "uid": "uid-p"}])
    cache.upsert_claim(written)
    assert free(cache) == 3, "counted once: the assumed placement carries it"
    cache.upsert_claim(claim("c1", version=1))  # an older watch event arriving late changes nothing
    assert cache.snapshot().dra.claims["ns/c1"].allocation is not None
    cache.forget("ns/p")
    assert free(cache) == 3, "the written allocation still holds the device"


def test_a_writes_reply_handled_after_the_claims_deletion_does_not_bring_it_back() -> None:
    cache = cache_with(claim("c1", version=5))
    cache.delete_claim(claim("c1", version=7))
    cache.upsert_claim(claim("c1", version=6))  # the reply to a write, handled late
    assert "ns/c1" not in cache.snapshot().dra.claims
    cache.upsert_claim(claim("c1", version=9))  # made again under the same name
    assert "ns/c1" in cache.snapshot().dra.claims
