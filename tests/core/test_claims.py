"""schedule() allocating DRA ResourceClaims: scored, gang-atomic, preemptible, partitionable, with reasons."""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal
from typing import Any, Iterable, Sequence

import numpy as np
import pytest

from gpufleet.core.context import QueueContext
from gpufleet.core.cycle import schedule
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import NO_GPU, ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid
from gpufleet.model.dra import ClaimAllocation, DeviceClass, ResourceClaim, ResourceSlice
from gpufleet.model.errors import ModelError as Error
from tests.core.dra_builders import (NV, claim, exactly, gpu_device, gpu_node, gpu_slice, node_slice, nvidia_classes,
                                     plain_node, uuid)


def _pod(name: str, *claims: str, group: str | None = None, priority: int = 0, created: float = 0.0) -> PodSpec:
    return PodSpec(PodUid(f"default/{name}"), name, cpu_milli=1000, mem_mib=1024, pod_group=group,
                   priority=priority, created_s=created, claims=tuple(f"default/{c}" for c in claims))


def _snap(nodes: Sequence[NodeInfo], slices: Sequence[ResourceSlice], claims: Iterable[ResourceClaim],
          classes: Iterable[DeviceClass] | None = None, running: Iterable[Placement] = (),
          groups: Iterable[PodGroup] = ()) -> ClusterSnapshot:
    return ClusterSnapshot.build(nodes, running, groups, device_classes=nvidia_classes() if classes is None else classes,
                                 slices=slices, claims=claims)


def _run(snap: ClusterSnapshot, pods: Sequence[PodSpec], *scorers: str, **queueing: Any) -> CycleResult:
    settings = ProfileSettings(scores=tuple(ScoreRef(s) for s in scorers))
    if queueing:
        settings = replace(settings, queueing=QueueingConfig(**queueing))
    profile = build_profile(settings)
    return schedule(snap, pods, profile, now=10_000.0, rng=random.Random(0),
                    queues=QueueContext() if queueing else None)


def _devices(result: CycleResult) -> dict[str, list[tuple[str, str, str]]]:
    """Per bound pod: (claim, request, node/device) of what it allocated."""
    return {p.pod.split("/")[1]: [(a.claim.split("/")[1], d.request, f"{d.pool}/{d.device}")
                                  for a in p.claims for d in a.devices] for p in (*result.binds, *result.nominated)}


def _why(result: CycleResult) -> dict[str, str]:
    return {uid.split("/")[1]: " | ".join(s.reasons) for uid, s in result.unschedulable.items()}


def _allocated(name: str, node: str, devices: Sequence[str], request: str = "gpu") -> dict[str, Any]:
    return {"allocation": {
        "devices": {"results": [{"request": request, "driver": NV, "pool": node, "device": d} for d in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}]}


# -- whole GPUs, scored ------------------------------------------------------------------------

def test_a_claim_for_two_gpus_gets_two_devices_of_one_node_and_holds_their_gpus() -> None:
    snap = _snap([gpu_node("a"), gpu_node("b")], [gpu_slice("a"), gpu_slice("b")],
                 [claim("c", [exactly(count=2)])])
    result = _run(snap, [_pod("p", "c")])
    assert _devices(result) == {"p": [("c", "gpu", "a/gpu-0"), ("c", "gpu", "a/gpu-1")]}
    (bind,) = result.binds
    assert bind.claims[0].node == "a"
    after = snap.apply(result.binds)
    assert after.usage.gpu_used_milli[0, :3].tolist() == [1000, 1000, 0]  # the devices' GPUs are held
    assert after.usage.dev_used[:3].tolist() == [True, True, False]
    assert after.usage.free_whole.tolist() == [6, 8]


@pytest.mark.parametrize(("nodes", "scorers"), [
    ([plain_node("a"), plain_node("b")], ()),  # devices not linked to GPUs: the allocator's own best fit
    ([gpu_node("a"), gpu_node("b")], ("GpuPacking",)),  # claims placed as GPUs: the profile's scorers
], ids=["devices", "gpus"])
def test_the_node_left_with_fewest_free_devices_wins_not_the_first_name(nodes: list[NodeInfo],
                                                                         scorers: tuple[str, ...]) -> None:
    # b already has six GPUs allocated: a two-GPU claim fills it instead of breaking into empty a.
    held = claim("old", [exactly(count=6)], status=_allocated("old", "b", [f"gpu-{m}" for m in range(6)]))
    snap = _snap(nodes, [gpu_slice("a"), gpu_slice("b")], [held, claim("c", [exactly(count=2)])])
    result = _run(snap, [_pod("p", "c")], *scorers)
    assert _devices(result) == {"p": [("c", "gpu", "b/gpu-6"), ("c", "gpu", "b/gpu-7")]}


def test_claims_for_linked_gpus_are_placed_exactly_as_extended_resource_pods() -> None:
    """The same pods once as `nvidia.com/gpu` requests and once as claims for that many devices of
    NVIDIA's class: the same nodes and GPUs, pod by pod, under a fragmentation-aware profile."""
    from gpufleet.framework.profiles import builtin
    from gpufleet.model import whole_gpus
    nodes = [gpu_node(n, gpus=g) for n, g in (("a", 8), ("b", 4), ("c", 8), ("d", 2))]
    counts = [1, 2, 4, 1, 8, 2, 1, 4, 3, 1, 2, 1]
    running = [Placement(PodUid("default/r1"), NodeName("a"), 0, 0, (0, 1, 2), 1000, 80 * 1024),
               Placement(PodUid("default/r2"), NodeName("c"), 0, 0, (5,), 1000, 80 * 1024)]
    extended = [PodSpec(PodUid(f"default/p{k}"), f"p{k}", cpu_milli=1000, mem_mib=1024, gpu=whole_gpus(n),
                        created_s=float(k)) for k, n in enumerate(counts)]
    as_claims = [replace(p, gpu=NO_GPU, claims=(f"default/c{k}",)) for k, p in enumerate(extended)]
    claims = [claim(f"c{k}", [exactly(count=n)]) for k, n in enumerate(counts)]
    profile = build_profile(builtin("default"))
    plain = schedule(ClusterSnapshot.build(nodes, running), extended, profile, now=0.0, rng=random.Random(0))
    dra_snap = _snap(nodes, [gpu_slice(n.name, gpus=len(n.gpus)) for n in nodes], claims, running=running)
    with_claims = schedule(dra_snap, as_claims, profile, now=0.0, rng=random.Random(0))
    assert 0 < len(plain.binds) < len(counts)  # some fit, some do not
    assert [(b.pod, b.node, b.gpus) for b in with_claims.binds] == [(b.pod, b.node, b.gpus) for b in plain.binds]
    assert set(with_claims.unschedulable) == set(plain.unschedulable)
    for b in with_claims.binds:
        assert [d.device for a in b.claims for d in a.devices] == [f"gpu-{j}" for j in b.gpus]


def test_an_extended_resource_pod_on_a_gpu_keeps_its_device_from_claims() -> None:
    running = Placement(PodUid("default/ext"), NodeName("a"), 0, 0, (0,), 1000, 80 * 1024)
    snap = _snap([gpu_node("a", gpus=2)], [gpu_slice("a", gpus=2)], [claim("c", [exactly(count=2)]),
                                                                      claim("d", [exactly()])], running=[running])
    result = _run(snap, [_pod("p", "c"), _pod("q", "d")])
    assert _devices(result) == {"q": [("d", "gpu", "a/gpu-1")]}
    assert "request gpu: no node has 1 device(s)" not in _why(result)["p"]
    assert "resourceclaim default/c: request gpu: no node has 2 device(s) of class gpu.nvidia.com" in _why(result)["p"]


# -- selectors, constraints, alternatives ------------------------------------------------------

def test_request_selectors_and_first_available_pick_the_first_alternative_that_fits() -> None:
    h200 = node_slice("b", [gpu_device("b", m, product="NVIDIA H200") for m in range(2)])
    want_h200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"
    c = claim("c", [{"name": "gpu", "firstAvailable": [
        {"name": "h200x4", "deviceClassName": "gpu.nvidia.com", "count": 4, "selectors": [{"cel": {"expression": want_h200}}]},
        {"name": "h200x2", "deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [{"cel": {"expression": want_h200}}]},
        {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 1}]}])
    snap = _snap([gpu_node("a"), plain_node("b")], [gpu_slice("a"), h200], [c])
    assert _devices(_run(snap, [_pod("p", "c")])) == {"p": [("c", "gpu/h200x2", "b/gpu-0"), ("c", "gpu/h200x2", "b/gpu-1")]}


def test_match_attribute_takes_four_gpus_of_one_nvlink_domain() -> None:
    devices = [gpu_device("a", m, domain="x" if m < 4 else "y") for m in range(8)]
    held = claim("old", [exactly(count=1)], status=_allocated("old", "a", ["gpu-0"]))
    c = claim("c", [exactly(count=4)], constraints=[{"matchAttribute": "gpu.gpufleet.io/nvlinkDomain"}])
    result = _run(_snap([gpu_node("a")], [node_slice("a", devices)], [held, c]), [_pod("p", "c")])
    assert [d for _, _, d in _devices(result)["p"]] == ["a/gpu-4", "a/gpu-5", "a/gpu-6", "a/gpu-7"]


def test_match_attribute_across_requests_and_distinct_attribute() -> None:
    devices = [gpu_device("a", m, domain="x" if m < 2 else "y") for m in range(4)]
    c = claim("c", [exactly("one", count=1), exactly("two", count=1)],
              constraints=[{"requests": ["one", "two"], "matchAttribute": "gpu.gpufleet.io/nvlinkDomain"},
                           {"distinctAttribute": "gpu.nvidia.com/uuid"}])
    held = claim("old", [exactly()], status=_allocated("old", "a", ["gpu-1"]))
    result = _run(_snap([gpu_node("a", gpus=4)], [node_slice("a", devices)], [held, c]), [_pod("p", "c")])
    # gpu-0 is alone in domain x now: both requests go to domain y.
    assert _devices(result) == {"p": [("c", "one", "a/gpu-2"), ("c", "two", "a/gpu-3")]}


def test_allocation_mode_all_takes_every_matching_device_of_the_node() -> None:
    c = claim("c", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}])
    held = claim("old", [exactly()], status=_allocated("old", "a", ["gpu-0"]))
    snap = _snap([gpu_node("a", gpus=2), gpu_node("b", gpus=3)], [gpu_slice("a", gpus=2), gpu_slice("b", gpus=3)],
                 [held, c])
    assert [d for _, _, d in _devices(_run(snap, [_pod("p", "c")]))["p"]] == ["b/gpu-0", "b/gpu-1", "b/gpu-2"]


# -- partitionable devices (MIG) and consumable capacity ---------------------------------------

def _partitioned(node: str, gpus: int) -> ResourceSlice:
    """Dynamic MIG as NVIDIA's driver models it: a counter set per GPU with one counter per memory
    slice; the whole GPU consumes all of them, a placement the slices it covers (1g: one, 4g: four)."""
    counters = [{"name": f"gpu-{g}-counters", "counters": {f"memorySlice{s}": {"value": "1"} for s in range(8)}}
                for g in range(gpus)]
    devices: list[dict[str, Any]] = []
    for g in range(gpus):
        whole = gpu_device(node, g)
        whole["consumesCounters"] = [{"counterSet": f"gpu-{g}-counters",
                                      "counters": {f"memorySlice{s}": {"value": "1"} for s in range(8)}}]
        devices.append(whole)
        for size, starts in ((1, range(8)), (4, (0, 4))):
            for start in starts:
                devices.append({"name": f"gpu-{g}-mig-{size}g-{start}", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": f"{size}g.{size * 10}gb"},
                    "parentUUID": {"string": uuid(node, g)}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}-counters", "counters": {
                        f"memorySlice{s}": {"value": "1"} for s in range(start, start + size)}}]})
    return node_slice(node, devices, counters=counters)


def _mig(size: int) -> dict[str, Any]:
    return exactly("mig", "mig.nvidia.com", selectors=[
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{size}g.{size * 10}gb'"}}])


def test_mig_placements_pack_onto_a_gpu_already_carved_and_whole_gpus_stay_whole() -> None:
    claims = [claim("m1", [_mig(1)]), claim("m2", [_mig(1)]), claim("m4", [_mig(4)]), claim("w", [exactly()])]
    snap = _snap([gpu_node("a", gpus=2)], [_partitioned("a", 2)], claims)
    result = _run(snap, [_pod("p1", "m1", created=1), _pod("p2", "m2", created=2), _pod("p4", "m4", created=3),
                         _pod("pw", "w", created=4)])
    got = {pod: [d for _, _, d in devs] for pod, devs in _devices(result).items()}
    assert got == {"p1": ["a/gpu-0-mig-1g-0"], "p2": ["a/gpu-0-mig-1g-1"], "p4": ["a/gpu-0-mig-4g-4"], "pw": ["a/gpu-1"]}
    after = snap.apply(result.binds)
    assert after.usage.devices_overcommitted() is None
    assert after.usage.counter_used.tolist() == [1000, 1000, 0, 0, 1000, 1000, 1000, 1000] + [1000] * 8


def test_counters_are_never_overcommitted() -> None:
    claims = [claim(f"m{k}", [_mig(4)]) for k in range(3)]
    result = _run(_snap([gpu_node("a", gpus=1)], [_partitioned("a", 1)], claims),
                  [_pod(f"p{k}", f"m{k}", created=k) for k in range(3)])
    assert sorted(_devices(result)) == ["p0", "p1"]
    assert "no node has 1 device(s) of class mig.nvidia.com matching its selectors" in _why(result)["p2"]


def test_shared_memory_is_consumed_best_fit_and_never_past_capacity() -> None:
    snap_slice = node_slice("a", [gpu_device("a", m, shared=True) for m in range(2)])
    claims = [claim(f"c{k}", [exactly(capacity={"requests": {"memory": mem}})]) for k, mem in
              enumerate(["40Gi", "30Gi", "20Gi", "60Gi"])]
    result = _run(_snap([gpu_node("a", gpus=2)], [snap_slice], claims),
                  [_pod(f"p{k}", f"c{k}", created=k) for k in range(4)])
    got = {pod: devs[0][2] for pod, devs in _devices(result).items()}
    # 40 then 30 fill gpu-0 to 70Gi; 20 no longer fits there and takes gpu-1; 60 fits on gpu-1 (20+60).
    assert got == {"p0": "a/gpu-0", "p1": "a/gpu-0", "p2": "a/gpu-1", "p3": "a/gpu-1"}
    consumed = {p.pod.split("/")[1]: p.claims[0].devices[0].consumed for p in result.binds}
    assert consumed["p0"] == {"gpu.nvidia.com/memory": 40 * 2**30}


# -- claims shared and already allocated -------------------------------------------------------

def test_a_claim_shared_by_two_pods_is_allocated_once_and_both_land_on_its_node() -> None:
    snap = _snap([gpu_node("a"), gpu_node("b")], [gpu_slice("a"), gpu_slice("b")], [claim("shared", [exactly()])])
    result = _run(snap, [_pod("p", "shared", created=1), _pod("q", "shared", created=2)])
    assert {p.pod.split("/")[1]: p.node for p in result.binds} == {"p": "a", "q": "a"}
    assert _devices(result) == {"p": [("shared", "gpu", "a/gpu-0")], "q": []}


def test_an_allocated_claim_pins_its_pod_to_the_claims_node() -> None:
    c = claim("c", [exactly()], status=_allocated("other", "b", ["gpu-3"]))
    result = _run(_snap([gpu_node("a"), gpu_node("b")], [gpu_slice("a"), gpu_slice("b")], [c]), [_pod("p", "c")])
    (bind,) = result.binds
    assert (bind.node, bind.claims) == ("b", ())


# -- gangs and preemption ----------------------------------------------------------------------

def test_a_gang_allocates_all_its_claims_or_none() -> None:
    claims = [claim(f"c{k}", [exactly(count=4)]) for k in range(3)]
    group = PodGroup("g", 3)
    pods = [_pod(f"p{k}", f"c{k}", group="default/g", created=k) for k in range(3)]
    snap = _snap([gpu_node("a"), gpu_node("b", gpus=2)], [gpu_slice("a"), gpu_slice("b", gpus=2)], claims, groups=[group])
    result = _run(snap, pods)
    assert result.binds == ()
    assert all("pod group default/g: only 2 of minMember 3" in why for why in _why(result).values())
    two = _run(_snap([gpu_node("a"), gpu_node("b", gpus=4)], [gpu_slice("a"), gpu_slice("b", gpus=4)], claims,
                     groups=[group]), pods)
    assert sorted(p.node for p in two.binds) == ["a", "a", "b"]


def test_preemption_frees_the_victims_claims() -> None:
    held = claim("low", [exactly(count=8)], status=_allocated("low", "a", [f"gpu-{m}" for m in range(8)]))
    running = Placement(PodUid("default/low"), NodeName("a"), 1000, 1024, priority=0, started_s=0.0,
                        claims=(_as_allocation(held),))
    snap = _snap([gpu_node("a")], [gpu_slice("a")], [held, claim("high", [exactly(count=2)])], running=[running])
    result = _run(snap, [_pod("p", "high", priority=10)], preemption=True)
    assert [e.pod for e in result.evictions] == ["default/low"]
    assert _devices(result) == {"p": [("high", "gpu", "a/gpu-0"), ("high", "gpu", "a/gpu-1")]}
    no_room = _run(snap, [_pod("p", "high", priority=10)])
    assert no_room.evictions == () and "p" in _why(no_room)


def _as_allocation(c: ResourceClaim) -> ClaimAllocation:
    assert c.allocation is not None
    return ClaimAllocation(c.key, c.allocation, c.allocated_node)


# -- bad input: clear reasons, never a crash ---------------------------------------------------

@pytest.mark.parametrize(("request_spec", "expected"), [
    (exactly(device_class="no-such-class"), "resourceclaim default/c: request gpu: device class no-such-class not found"),
    (exactly(selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName =="}}]),
     "resourceclaim default/c: request gpu: invalid CEL"),
    (exactly(selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].noSuchAttribute == 'x'"}}]),
     "resourceclaim default/c: request gpu: CEL evaluation failed"),
])
def test_a_claim_that_cannot_be_satisfied_says_which_request_and_what(request_spec: dict[str, Any],
                                                                      expected: str) -> None:
    result = _run(_snap([gpu_node("a")], [gpu_slice("a")], [claim("c", [request_spec])]), [_pod("p", "c")])
    assert result.binds == ()
    assert _why(result)["p"].startswith(expected), _why(result)["p"]


def test_a_missing_claim_leaves_the_pod_pending_with_its_name() -> None:
    result = _run(_snap([gpu_node("a")], [gpu_slice("a")], []), [_pod("p", "from-template")])
    assert _why(result) == {"p": "resourceclaim default/from-template not found (a template's claim may not be "
                                 "created yet)"}


@pytest.mark.parametrize(("spec", "where"), [
    (exactly(count=0), "ResourceClaim default/c: spec.devices.requests[0].exactly.count"),
    ({"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "Some"}},
     "ResourceClaim default/c: spec.devices.requests[0].exactly.allocationMode"),
    ({"name": "gpu"}, "ResourceClaim default/c: spec.devices.requests[0]"),
])
def test_a_malformed_claim_is_an_error_naming_the_field(spec: dict[str, Any], where: str) -> None:
    with pytest.raises(Error) as caught:
        claim("c", [spec])
    assert caught.value.where == where


def test_an_incomplete_pool_is_not_used_and_says_so() -> None:
    first = node_slice("a", [gpu_device("a", 0)], count=2, index=0)
    result_snap = _snap([gpu_node("a")], [first], [claim("c", [exactly()])])
    assert result_snap.dra.problems == ("pool gpu.nvidia.com/a generation 1: 1 of 2 slices seen; not used until all are",)
    assert result_snap.cluster.devices.n_devices == 0
    second = node_slice("a", [gpu_device("a", 1)], count=2, index=1)
    assert _snap([gpu_node("a")], [first, second], []).cluster.devices.n_devices == 2


def test_an_older_generation_is_ignored_and_contradicting_slices_drop_their_pool() -> None:
    old = node_slice("a", [gpu_device("a", m) for m in range(8)], generation=1)
    new = node_slice("a", [gpu_device("a", 0)], generation=2, index=1)
    snap = _snap([gpu_node("a")], [old, new], [])
    assert snap.dra.problems == () and snap.cluster.devices.n_devices == 1
    twice = [node_slice("a", [gpu_device("a", 0)], count=2, index=0), node_slice("a", [gpu_device("a", 0)], count=2, index=1)]
    assert _snap([gpu_node("a")], twice, []).dra.problems == (
        "pool gpu.nvidia.com/a generation 1: device gpu-0 appears in slices a-gpu.nvidia.com-0 and "
        "a-gpu.nvidia.com-1; not used",)


def test_a_pod_asking_gpus_and_a_claim_gets_other_gpus_for_the_claim() -> None:
    from gpufleet.model import whole_gpus
    c = claim("c", [exactly(count=2, selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}])],
              constraints=[{"distinctAttribute": "gpu.nvidia.com/uuid"}])  # not placed as GPUs: the allocator chooses
    pod = replace(_pod("p", "c"), gpu=whole_gpus(2))
    result = _run(_snap([gpu_node("a", gpus=4)], [gpu_slice("a", gpus=4)], [c]), [pod])
    (bind,) = result.binds
    claimed = {int(d.device.split("-")[1]) for a in bind.claims for d in a.devices}
    assert len(set(bind.gpus)) == 2 and len(claimed) == 2 and not claimed & set(bind.gpus)
    assert _run(_snap([gpu_node("a", gpus=3)], [gpu_slice("a", gpus=3)], [c]), [pod]).binds == ()


# -- the allocator's parts, directly -----------------------------------------------------------

def _allocator(snap: ClusterSnapshot) -> Any:
    from gpufleet.core.claims import ClaimAllocator
    return ClaimAllocator(snap)


def test_free_device_counts_follow_any_usage_they_are_asked_about() -> None:
    """The counts are kept per request shape across a cycle and brought up to date from the node
    stamps: after a few nodes changed, after most of them changed, and back."""
    nodes = [gpu_node(f"n{i:03d}", gpus=2) for i in range(100)]
    c = claim("c", [exactly()])
    snap = _snap(nodes, [gpu_slice(n.name, gpus=2) for n in nodes], [c])
    alloc = _allocator(snap)
    matching = alloc.matching(c, c.requests[0].alternatives[0])

    def brute(usage: Any) -> list[int]:
        t = snap.cluster.devices
        return np.bincount(t.node[matching & usage.dev_free], minlength=100).tolist()  # type: ignore[no-any-return]

    def held(names: Sequence[str], k: int) -> list[Placement]:
        return [Placement(PodUid(f"default/h{k}-{n}"), NodeName(n), 0, 0, (0,), 1000, 80 * 1024) for n in names]
    few = snap.apply(held(["n003", "n050"], 1))
    most = few.apply(held([f"n{i:03d}" for i in range(10, 90)], 2))
    full = snap.apply([Placement(PodUid(f"default/all-{n.name}"), NodeName(n.name), 0, 0, (0, 1), 1000, 80 * 1024)
                       for n in nodes])
    for usage in (snap.usage, few.usage, most.usage, snap.usage, few.usage, full.usage):
        free, total = alloc._counts(matching, usage)
        assert free.tolist() == brute(usage)
        assert total.tolist() == [2] * 100


def test_a_device_every_node_reaches_is_counted_on_each_and_pins_no_node() -> None:
    net = ResourceSlice("fabric", "net.example.com", "fabric", 1, 1, None,
                        tuple(replace(d, name=f"nic-{k}") for k, d in enumerate(node_slice(
                            "x", [gpu_device("x", 0)], driver="net.example.com").devices * 2)))
    assert net.node is None
    nic = DeviceClass("nic.example.com", ("device.driver == 'net.example.com'",))
    claims = [claim("one", [exactly(device_class="nic.example.com")]),
              claim("three", [exactly(device_class="nic.example.com", count=3)])]
    snap = _snap([plain_node("a"), plain_node("b")], [net], claims, classes=[nic])
    result = _run(snap, [_pod("p", "one"), _pod("q", "three")])
    (bind,) = result.binds
    assert bind.claims[0].node is None and bind.claims[0].devices[0].pool == "fabric"
    assert "no node has 3 device(s) of class nic.example.com (at most 1 free on a node; 2 match in the cluster)" \
        in _why(result)["q"]


@pytest.mark.parametrize(("requests", "expected"), [
    ({"share": "650m"}, (650, 0)),
    ({"share": "500m", "memory": "1500Ki"}, (500, 2)),  # memory rounded up to whole MiB
    ({"share": "1"}, None),  # a whole GPU is not a share
    ({"share": "0.0005"}, None),  # not a whole number of GPU-milli
    ({"share": "250m", "decoders": "1"}, None),  # a capacity a GPU share does not model
    ({"memory": "10Gi"}, None),  # no share named
])
def test_a_share_claim_amounts_to_a_gpu_fraction_only_when_it_is_one(requests: dict[str, str],
                                                                    expected: tuple[int, int] | None) -> None:
    shared = node_slice("a", [gpu_device("a", m, shared=True) for m in range(2)])
    shared = replace(shared, devices=tuple(replace(d, capacity={**d.capacity, "gpu.nvidia.com/share": replace(
        d.capacity["gpu.nvidia.com/memory"], value=Decimal(1))}) for d in shared.devices))
    c = claim("c", [exactly(capacity={"requests": requests})])
    alloc = _allocator(_snap([gpu_node("a", gpus=2)], [shared], [c]))
    got = alloc.as_gpus(_pod("p", "c"))
    assert (None if got is None else (got.milli, got.mem_mib)) == expected
    two = claim("c", [exactly(count=2, capacity={"requests": {"share": "500m"}})])
    assert _allocator(_snap([gpu_node("a", gpus=2)], [shared], [two])).as_gpus(_pod("p", "c")) is None


def test_two_requests_of_one_claim_never_overcommit_a_shared_device_between_them() -> None:
    devices = [gpu_device("a", m, shared=True) for m in range(2)]
    c = claim("c", [exactly("x", capacity={"requests": {"memory": "50Gi"}}),
                    exactly("y", capacity={"requests": {"memory": "50Gi"}})])
    result = _run(_snap([gpu_node("a", gpus=2)], [node_slice("a", devices)], [c]), [_pod("p", "c")])
    assert sorted(d for _, _, d in _devices(result)["p"]) == ["a/gpu-0", "a/gpu-1"]
    one = node_slice("a", devices[:1])
    assert _run(_snap([gpu_node("a", gpus=1)], [one], [c]), [_pod("p", "c")]).binds == ()


def test_reasons_name_all_mode_and_selectors_and_a_node_gone() -> None:
    everything = claim("all", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}])
    picky = claim("picky", [exactly(count=9, selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}])])
    gone = claim("gone", [exactly()], status=_allocated("x", "elsewhere", ["gpu-0"]))
    held = claim("old", [exactly()], status=_allocated("old", "a", ["gpu-0"]))
    snap = _snap([gpu_node("a", gpus=2)], [gpu_slice("a", gpus=2)], [everything, picky, gone, held])
    why = _why(_run(snap, [_pod("p", "all"), _pod("q", "picky"), _pod("r", "gone")]))
    assert "request gpu: no node has all matching devices of one node of class gpu.nvidia.com (at most 1 free" in why["p"]
    assert "no node has 9 device(s) of class gpu.nvidia.com matching its selectors (at most 1 free" in why["q"]
    assert "resourceclaim default/gone is allocated on a node that is not in the cluster" in why["r"]


def test_pods_whose_claims_ask_alike_share_a_failure_and_others_do_not() -> None:
    claims = [claim(f"t{k}", [exactly(count=9)]) for k in range(2)] + [claim("small", [exactly()])]
    snap = _snap([gpu_node("a")], [gpu_slice("a")], claims)
    result = _run(snap, [_pod("p0", "t0", created=0), _pod("p1", "t1", created=1), _pod("s", "small", created=2)])
    s0, s1 = result.unschedulable[PodUid("default/p0")], result.unschedulable[PodUid("default/p1")]
    assert s0.reasons[0] is s1.reasons[0]  # the node reason remembered, not worked out again
    assert "resourceclaim default/t0:" in s0.message and "resourceclaim default/t1:" in s1.message
    assert [b.pod for b in result.binds] == ["default/s"]


def test_capacity_asked_of_an_exclusive_device_is_a_minimum_it_must_have() -> None:
    c_big, c_ok = (claim("big", [exactly(capacity={"requests": {"memory": "100Gi"}})]),
                   claim("ok", [exactly(capacity={"requests": {"memory": "80Gi"}})]))
    result = _run(_snap([gpu_node("a")], [gpu_slice("a")], [c_big, c_ok]), [_pod("p", "big"), _pod("q", "ok")])
    assert list(_devices(result)) == ["q"] and "p" in _why(result)


def test_a_constraint_across_requests_backtracks_from_the_tightest_group() -> None:
    """x alone fits best in domain x (two free), but then y's two devices cannot match it: x goes to y's domain."""
    devices = [gpu_device("a", m, domain="x" if m < 3 else "y") for m in range(6)]
    held = claim("old", [exactly()], status=_allocated("old", "a", ["gpu-0"]))
    c = claim("c", [exactly("one"), exactly("two", count=2)],
              constraints=[{"requests": ["one", "two"], "matchAttribute": "gpu.gpufleet.io/nvlinkDomain"}])
    result = _run(_snap([gpu_node("a", gpus=6)], [node_slice("a", devices)], [held, c]), [_pod("p", "c")])
    got = {(r, d) for _, r, d in _devices(result)["p"]}
    assert len(got) == 3
    assert {d for _, d in got} <= {"a/gpu-3", "a/gpu-4", "a/gpu-5"}


def test_distinct_attribute_holds_across_requests() -> None:
    devices = [gpu_device("a", m) for m in range(3)]
    for d, numa in zip(devices, (0, 0, 1)):
        d["attributes"]["resource.kubernetes.io/numaNode"] = {"int": numa}
    c = claim("c", [exactly("one"), exactly("two")],
              constraints=[{"requests": ["one", "two"], "distinctAttribute": "resource.kubernetes.io/numaNode"}])
    result = _run(_snap([gpu_node("a", gpus=3)], [node_slice("a", devices)], [c]), [_pod("p", "c")])
    assert _devices(result) == {"p": [("c", "one", "a/gpu-0"), ("c", "two", "a/gpu-2")]}


def test_an_allocation_with_a_node_local_device_pins_that_node() -> None:
    fabric = ResourceSlice("fabric", "net.example.com", "fabric", 1, 1, None, (
        replace(node_slice("x", [gpu_device("x", 0)], driver="net.example.com").devices[0], name="nic-0"),))
    nic = DeviceClass("nic.example.com", ("device.driver == 'net.example.com'",))
    c = claim("c", [exactly("gpu"), exactly("nic", device_class="nic.example.com")])
    snap = _snap([gpu_node("a", gpus=1)], [gpu_slice("a", gpus=1), fabric], [c], classes=[*nvidia_classes(), nic])
    (bind,) = _run(snap, [_pod("p", "c")]).binds
    assert bind.claims[0].node == "a"
    assert [f"{d.pool}/{d.device}" for d in bind.claims[0].devices] == ["a/gpu-0", "fabric/nic-0"]


def test_a_tainted_device_is_left_out_unless_the_request_tolerates_it() -> None:
    devices = [gpu_device("a", m) for m in range(2)]
    devices[0]["taints"] = [{"key": "gpufleet.io/unhealthy", "value": "true", "effect": "NoSchedule"}]
    devices[1]["taints"] = [{"key": "note", "value": "x", "effect": "None"}]  # informational: no effect
    plain = claim("plain", [exactly(count=2)])
    tolerant = claim("tolerant", [exactly(count=2, tolerations=[{"key": "gpufleet.io/unhealthy", "operator": "Exists"}])])
    snap = _snap([plain_node("a")], [node_slice("a", devices)], [plain, tolerant])
    assert _run(snap, [_pod("p", "plain")]).binds == ()
    assert [d for _, _, d in _devices(_run(snap, [_pod("q", "tolerant")]))["q"]] == ["a/gpu-0", "a/gpu-1"]


def test_two_requests_of_one_claim_never_take_overlapping_mig_placements() -> None:
    c = claim("c", [replace_name(_mig(4), "big"), replace_name(_mig(1), "small")])
    snap = _snap([gpu_node("a", gpus=1)], [_partitioned("a", 1)], [c])
    result = _run(snap, [_pod("p", "c")])
    assert [d for _, _, d in _devices(result)["p"]] == ["a/gpu-0-mig-4g-0", "a/gpu-0-mig-1g-4"]
    assert snap.apply(result.binds).usage.devices_overcommitted() is None


def replace_name(request: dict[str, Any], name: str) -> dict[str, Any]:
    return {**request, "name": name}


def test_a_selector_naming_an_identity_attribute_is_evaluated_per_device() -> None:
    """72 GPUs: `uuid` has more distinct values than a shape keeps, so a selector on it sees every device."""
    nodes = [gpu_node(f"n{i}") for i in range(9)]
    c = claim("c", [exactly(selectors=[{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].uuid == '{uuid('n3', 5)}'"}}])])
    snap = _snap(nodes, [gpu_slice(n.name) for n in nodes], [c])
    assert "uuid" in snap.cluster.devices.identity
    assert _devices(_run(snap, [_pod("p", "c")])) == {"p": [("c", "gpu", "n3/gpu-5")]}


def test_no_alternative_fitting_names_each_in_the_reason() -> None:
    c = claim("c", [{"name": "gpu", "firstAvailable": [
        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
        {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4}]}])
    why = _why(_run(_snap([gpu_node("a", gpus=2)], [gpu_slice("a", gpus=2)], [c]), [_pod("p", "c")]))["p"]
    assert ("resourceclaim default/c: request gpu: no node has 8 device(s) of class gpu.nvidia.com (at most 2 free "
            "on a node; 2 match in the cluster); or 4 device(s) of class gpu.nvidia.com") in why


def test_a_share_claim_records_the_capacity_it_consumes() -> None:
    devices = [gpu_device("a", 0, shared=True)]
    devices[0]["capacity"]["share"] = {"value": "1"}
    devices[0]["capacity"]["memory"]["requestPolicy"] = {"default": "0", "validRange": {"min": "0"}}
    c = claim("c", [exactly(capacity={"requests": {"share": "250m", "memory": "8Gi"}})])
    snap = _snap([gpu_node("a", gpus=1)], [node_slice("a", devices)], [c])
    (bind,) = _run(snap, [_pod("p", "c")]).binds
    assert (bind.gpus, bind.milli, bind.gpu_mem_mib) == ((0,), 250, 8 * 1024)
    assert bind.claims[0].devices[0].consumed == {"gpu.nvidia.com/share": Decimal("0.25"),
                                                  "gpu.nvidia.com/memory": Decimal(8 * 2**30)}
    after = snap.apply((bind,)).usage
    assert sorted(after.cap_used.tolist()) == [250, 8 * 2**30 * 1000]
