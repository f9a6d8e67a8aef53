"""The claim allocator's choices, case by case: when claims are placed as GPUs, which devices and
nodes win, constraints and backtracking, counters and shared capacity, claims allocated earlier,
and the reasons. The scheduling-level picture is in test_claims.py; these pin the rules it rests on."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpufleet.model import NodeName, Placement, PodGroup, PodSpec, PodUid
from gpufleet.model.dra import DeviceClass, ResourceSlice
from tests.core.dra_builders import claim, exactly, gpu_device, gpu_node, gpu_slice, node_slice, plain_node, uuid
from tests.core.test_claims import _allocated, _allocator, _devices, _pod, _run, _snap, _why

WANT_H200 = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"}}
WANT_H100 = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}


def _taken(result: Any, pod: str = "p") -> list[tuple[str, str]]:
    """(request, node/device) of what `pod` allocated."""
    return [(r, d) for _, r, d in _devices(result)[pod]]


def _shared(node: str, minor: int, caps: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A device that allows several allocations, with exactly the capacities `caps`."""
    device = gpu_device(node, minor, shared=True, **kw)
    device["capacity"] = caps
    return device


SHARE = {"value": "1"}
MEMORY = {"value": "80Gi"}
MEMORY_DEFAULT_0 = {"value": "80Gi", "requestPolicy": {"default": "0", "validRange": {"min": "0"}}}


# -- when a claim is placed as GPUs --------------------------------------------------------------

def _exclusive_with_share(node: str, minor: int) -> dict[str, Any]:
    device = gpu_device(node, minor)
    device["capacity"] = {"share": SHARE, "memory": MEMORY}
    return device


def _tainted_share(node: str, minor: int) -> dict[str, Any]:
    device = _shared(node, minor, {"share": SHARE, "memory": MEMORY})
    device["taints"] = [{"key": "gpufleet.io/unhealthy", "value": "true", "effect": "NoSchedule"}]
    return device


SHARE_ASK = [exactly(capacity={"requests": {"share": "500m"}})]


@pytest.mark.parametrize(("device", "linked", "requests", "expected"), [
    # A share of one GPU: shared devices, linked to GPUs, offering `share`.
    (lambda n, m: _shared(n, m, {"share": SHARE, "memory": MEMORY}), True,
     [exactly(capacity={"requests": {"gpu.nvidia.com/share": "500m", "gpu.nvidia.com/memory": "1Gi"}})],
     ("fraction", 500, 1024)),
    (lambda n, m: _shared(n, m, {"share": SHARE}), True, SHARE_ASK, ("fraction", 500, 0)),
    (lambda n, m: _shared(n, m, {"share": SHARE}), True, [exactly(capacity={"requests": {"share": "0"}})], None),
    (_exclusive_with_share, True, SHARE_ASK, None),  # an exclusive device is never shared
    (lambda n, m: _shared(n, m, {"memory": MEMORY}), True, SHARE_ASK, None),  # no share offered
    (lambda n, m: _shared(n, m, {"share": SHARE, "memory": MEMORY}), False, SHARE_ASK, None),  # not a GPU
    (_tainted_share, True, SHARE_ASK, None),
    # Whole GPUs: exclusive devices, or shared ones a request naming no amount takes all of.
    (lambda n, m: _shared(n, m, {"share": SHARE, "memory": MEMORY_DEFAULT_0}), True, [exactly()], ("whole", 1)),
    (lambda n, m: _shared(n, m, {"memory": MEMORY_DEFAULT_0}), True, [exactly()], None),  # takes none of it
    (lambda n, m: _shared(n, m, {"memory": MEMORY}), True, [exactly()], ("whole", 1)),  # takes all of it
    (gpu_device, True, [exactly("a"), exactly("b", count=2)], ("whole", 3)),
    (gpu_device, True, [exactly("a"), exactly("b", capacity={"requests": {"memory": "10Gi"}})], None),
], ids=["share-qualified", "share-only", "share-zero", "exclusive", "no-share", "unlinked", "tainted",
        "shared-share-all", "shared-default-0", "shared-all-by-default", "exclusive-two-requests",
        "capacity-asked"])
def test_a_claim_amounts_to_gpus_only_for_devices_that_are_them(device: Any, linked: bool,
                                                               requests: list[dict[str, Any]], expected: Any) -> None:
    """`as_gpus`: the claims a pod could as well have asked as `nvidia.com/gpu` (whole or a share),
    and nothing else: those are placed by the GPU filters and scorers, the rest by the allocator."""
    devices = node_slice("a", [device("a", m) for m in range(2)])
    node = gpu_node("a", gpus=2) if linked else plain_node("a")
    got = _allocator(_snap([node], [devices], [claim("c", requests)])).as_gpus(_pod("p", "c"))
    if got is None or expected is None:
        assert got is expected
    elif expected[0] == "whole":
        assert (got.kind.name, got.count) == ("WHOLE", expected[1])
    else:
        assert (got.kind.name, got.milli, got.mem_mib) == ("FRACTION", *expected[1:])


# -- selectors -----------------------------------------------------------------------------------

def _nine_nodes() -> tuple[list[Any], list[ResourceSlice]]:
    """72 GPUs: more distinct `uuid`s than a device shape keeps (`DeviceTable.identity`)."""
    nodes = [gpu_node(f"n{i}") for i in range(9)]
    return nodes, [gpu_slice(n.name) for n in nodes]


def test_every_selector_holds_when_some_are_evaluated_per_device_and_some_per_shape() -> None:
    nodes, slices = _nine_nodes()
    one = {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].uuid == '{uuid('n3', 5)}'"}}
    c = claim("c", [exactly(selectors=[one, WANT_H100])])
    assert _taken(_run(_snap(nodes, slices, [c]), [_pod("p", "c")])) == [("gpu", "n3/gpu-5")]


def test_a_selector_iterating_a_devices_attributes_sees_its_identity_attributes() -> None:
    nodes, slices = _nine_nodes()
    has_uuid = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].exists(n, n.startsWith('uu'))"}}
    c = claim("c", [exactly(selectors=[has_uuid])])
    assert _taken(_run(_snap(nodes, slices, [c]), [_pod("p", "c")])) == [("gpu", "n0/gpu-0")]


def test_an_invalid_selector_names_the_field_it_is_in() -> None:
    bad = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName =="}}
    c = claim("c", [exactly(selectors=[WANT_H100, bad])])
    why = _why(_run(_snap([gpu_node("a")], [gpu_slice("a")], [c]), [_pod("p", "c")]))["p"]
    assert "selectors[1].cel.expression" in why


# -- allocationMode All --------------------------------------------------------------------------

def _all(device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": device_class, "allocationMode": "All"}}


def test_all_mode_takes_a_nodes_single_device_and_never_a_node_without_any() -> None:
    held = claim("old", [exactly()], status=_allocated("old", "b", ["gpu-0"]))
    nodes = [gpu_node("a", gpus=1), gpu_node("b", gpus=2), plain_node("c")]
    snap = _snap(nodes, [gpu_slice("a", gpus=1), gpu_slice("b", gpus=2)], [held, claim("c", [_all()])])
    assert _taken(_run(snap, [_pod("p", "c")])) == [("gpu", "a/gpu-0")]
    # Without a: b has one of its two in use, c has none; the reason says so (c is no candidate).
    snap = _snap(nodes[1:], [gpu_slice("b", gpus=2)], [held, claim("c", [_all()])])
    assert "no node has all matching devices of one node" in _why(_run(snap, [_pod("p", "c")]))["p"]


def _fabric(nics: int) -> tuple[ResourceSlice, DeviceClass]:
    device = node_slice("x", [gpu_device("x", 0)], driver="net.example.com").devices[0]
    net = ResourceSlice("fabric", "net.example.com", "fabric", 1, 1, None,
                        tuple(replace(device, name=f"nic-{k}") for k in range(nics)))
    return net, DeviceClass("nic.example.com", ("device.driver == 'net.example.com'",))


def test_all_mode_over_devices_every_node_reaches_takes_all_of_them() -> None:
    net, nic = _fabric(2)
    snap = _snap([plain_node("a")], [net], [claim("c", [_all("nic.example.com")])], classes=[nic])
    assert _taken(_run(snap, [_pod("p", "c")])) == [("gpu", "fabric/nic-0"), ("gpu", "fabric/nic-1")]


def test_an_all_alternative_with_no_device_on_the_node_is_skipped_not_met_with_nothing() -> None:
    c = claim("c", [{"name": "gpu", "firstAvailable": [
        {"name": "all-mig", "deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1}]}])
    snap = _snap([gpu_node("a", gpus=1)], [gpu_slice("a", gpus=1)], [c])
    assert _taken(_run(snap, [_pod("p", "c")])) == [("gpu/one", "a/gpu-0")]


# -- firstAvailable -----------------------------------------------------------------------------

def _h100_and_h200() -> tuple[list[Any], list[ResourceSlice]]:
    """a: two H100s; b: eight H200s (a is the tighter node for any one GPU)."""
    h200 = node_slice("b", [gpu_device("b", m, product="NVIDIA H200") for m in range(8)])
    return [plain_node("a"), plain_node("b")], [gpu_slice("a", gpus=2), h200]


def _first(*alternatives: tuple[str, dict[str, Any] | None, int], name: str = "gpu") -> dict[str, Any]:
    """A request with `firstAvailable` entries (name, selector, count); an entry named `gone` asks a class that is not there."""
    return {"name": name, "firstAvailable": [
        {"name": n, "deviceClassName": "retired.example.com" if n == "gone" else "gpu.nvidia.com", "count": count,
         **({"selectors": [sel]} if sel else {})} for n, sel, count in alternatives]}


@pytest.mark.parametrize("requests", [
    [_first(("h200", WANT_H200, 1), ("any", None, 1))],
    [exactly("plain"), _first(("h200", WANT_H200, 1), ("any", None, 1))],
], ids=["two-entries", "after-a-plain-request"])
def test_the_node_where_an_earlier_first_available_entry_fits_wins_over_a_tighter_one(
        requests: list[dict[str, Any]]) -> None:
    nodes, slices = _h100_and_h200()
    result = _run(_snap(nodes, slices, [claim("c", requests)]), [_pod("p", "c")])
    assert {d.split("/")[0] for _, d in _taken(result)} == {"b"}


def test_first_available_entries_count_over_all_requests() -> None:
    """Each request's first fitting entry counts: on c both requests get their first entry."""
    mixed = node_slice("c", [gpu_device("c", m, product="NVIDIA H200" if m % 2 else "NVIDIA H100 80GB HBM3")
                             for m in range(8)])
    a, b = (node_slice("a", [gpu_device("a", m) for m in range(2)]),
            node_slice("b", [gpu_device("b", m, product="NVIDIA H200") for m in range(2)]))
    c = claim("c", [_first(("h200", WANT_H200, 1), ("h100", WANT_H100, 1), name="x"),
                    _first(("h100", WANT_H100, 1), ("h200", WANT_H200, 1), name="y")])
    result = _run(_snap([plain_node("a"), plain_node("b"), plain_node("c")], [a, b, mixed], [c]), [_pod("p", "c")])
    assert _taken(result) == [("x/h200", "c/gpu-1"), ("y/h100", "c/gpu-0")]


def test_the_tightest_node_counts_the_free_devices_of_every_request() -> None:
    """a keeps 1 + 4 free devices for the two requests, b 6 + 2: a is tighter (though b has fewer H200s)."""
    a = node_slice("a", [gpu_device("a", m, product="NVIDIA H200" if m else "NVIDIA H100 80GB HBM3") for m in range(5)])
    b = node_slice("b", [gpu_device("b", m, product="NVIDIA H200" if m > 5 else "NVIDIA H100 80GB HBM3")
                         for m in range(8)])
    c = claim("c", [exactly("h100", selectors=[WANT_H100]), exactly("h200", selectors=[WANT_H200])])
    result = _run(_snap([plain_node("a"), plain_node("b")], [a, b], [c]), [_pod("p", "c")])
    assert {d.split("/")[0] for _, d in _taken(result)} == {"a"}


def test_an_early_entry_is_taken_where_a_later_one_fits_nowhere() -> None:
    c = claim("c", [_first(("four", None, 4), ("sixteen", None, 16))])
    result = _run(_snap([gpu_node("a", gpus=4)], [gpu_slice("a", gpus=4)], [c]), [_pod("p", "c")])
    assert [r for r, _ in _taken(result)] == ["gpu/four"] * 4


# -- constraints ---------------------------------------------------------------------------------

def _domains(layout: str, node: str = "a") -> ResourceSlice:
    """One GPU per letter of `layout`, its NVLink domain that letter ('-': none)."""
    return node_slice(node, [gpu_device(node, m, domain=None if d == "-" else d) for m, d in enumerate(layout)])


MATCH_DOMAIN = {"matchAttribute": "gpu.gpufleet.io/nvlinkDomain"}


@pytest.mark.parametrize(("layout", "expected"), [
    ("xxxxyy", ["a/gpu-4", "a/gpu-5"]),  # the tightest group that fits
    ("xxyy", ["a/gpu-0", "a/gpu-1"]),  # equally tight: the lowest device name
    ("-yy", ["a/gpu-1", "a/gpu-2"]),  # a device without the attribute is left out, the rest still grouped
], ids=["tightest", "tie", "unset"])
def test_match_attribute_takes_the_tightest_group(layout: str, expected: list[str]) -> None:
    c = claim("c", [exactly(count=2)], constraints=[MATCH_DOMAIN])
    result = _run(_snap([plain_node("a")], [_domains(layout)], [c]), [_pod("p", "c")])
    assert [d for _, d in _taken(result)] == expected


def test_equally_tight_groups_tie_to_the_lowest_device_name_not_the_best_fitting_device() -> None:
    devices = [_shared("a", m, {"memory": MEMORY}, domain="x" if m < 2 else "y") for m in range(4)]
    status = _allocated("old", "a", ["gpu-3"])
    status["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"gpu.nvidia.com/memory": "40Gi"}
    held = claim("old", [exactly(**ask("40Gi"))], status=status)  # gpu-3, in y, is the best fit for one device
    c = claim("c", [exactly(count=2, **ask("10Gi"))], constraints=[MATCH_DOMAIN])
    result = _run(_snap([plain_node("a")], [node_slice("a", devices)], [held, c]), [_pod("p", "c")])
    assert [d for _, d in _taken(result)] == ["a/gpu-0", "a/gpu-1"]


def test_a_constraint_naming_a_first_available_entry_binds_that_request_only() -> None:
    """`gpu/pair` in a constraint's requests is the entry `pair` of request `gpu`; `free` is not named."""
    c = claim("c", [exactly("one"), _first(("pair", None, 2)), exactly("free")],
              constraints=[{"requests": ["one", "gpu/pair"], **MATCH_DOMAIN}])
    result = _run(_snap([plain_node("a")], [_domains("xxyyy")], [c]), [_pod("p", "c")])
    # x is tighter for `one`, but `pair` then finds one device there: both go to y; `free` takes what is left.
    assert _taken(result) == [("one", "a/gpu-2"), ("gpu/pair", "a/gpu-3"), ("gpu/pair", "a/gpu-4"),
                              ("free", "a/gpu-0")]


def _backtracking(devices: list[dict[str, Any]], last: dict[str, Any]) -> Any:
    """`one` and `two` must share a domain; x (gpu-0) is tried first for `one` and given back."""
    c = claim("c", [exactly("one", **ask("30Gi")), exactly("two", count=2, **ask("30Gi")), last],
              constraints=[{"requests": ["one", "two"], **MATCH_DOMAIN}])
    return _run(_snap([plain_node("a")], [node_slice("a", devices)], [c]), [_pod("p", "c")])


def ask(memory: str | None) -> dict[str, Any]:
    return {"capacity": {"requests": {"memory": memory}}} if memory else {}


def test_backtracking_gives_an_exclusive_device_back_for_a_later_request() -> None:
    devices = [gpu_device("a", m, domain="x" if m == 0 else "y") for m in range(4)]
    for d in devices:
        d["capacity"] = {"memory": MEMORY}
    result = _backtracking(devices, exactly("three"))
    assert _taken(result) == [("one", "a/gpu-1"), ("two", "a/gpu-2"), ("two", "a/gpu-3"), ("three", "a/gpu-0")]


def test_backtracking_gives_back_exactly_the_shared_capacity_it_took() -> None:
    devices = [_shared("a", m, {"memory": MEMORY}, domain="x" if m == 0 else "y") for m in range(3)]
    # gpu-0 had 30Gi taken and given back: 60Gi fit there again, 90Gi never does.
    assert _taken(_backtracking(devices, exactly("three", **ask("60Gi"))))[-1] == ("three", "a/gpu-0")
    assert "p" in _why(_backtracking(devices, exactly("three", **ask("90Gi"))))


# -- counters and shared capacity within one claim -----------------------------------------------

@pytest.mark.parametrize(("asks", "fits"), [(["40Gi", "40Gi"], True), (["30Gi", "30Gi", "30Gi"], False)])
def test_requests_of_one_claim_fill_a_shared_device_exactly_and_never_past_it(asks: list[str], fits: bool) -> None:
    c = claim("c", [exactly(f"r{k}", **ask(a)) for k, a in enumerate(asks)])
    result = _run(_snap([plain_node("a")], [node_slice("a", [_shared("a", 0, {"memory": MEMORY})])], [c]),
                  [_pod("p", "c")])
    assert (_taken(result) == [(f"r{k}", "a/gpu-0") for k in range(len(asks))]) if fits else ("p" in _why(result))


def _halves(node: str, devices: int) -> ResourceSlice:
    """Devices that each consume one of a counter set's two units (partitions of one GPU)."""
    parts = [{"name": f"part-{k}", "attributes": {"type": {"string": "gpu"}},
              "consumesCounters": [{"counterSet": "gpu-0", "counters": {"units": {"value": "1"}}}]}
             for k in range(devices)]
    return node_slice(node, parts, counters=[{"name": "gpu-0", "counters": {"units": {"value": "2"}}}])


@pytest.mark.parametrize(("requests", "fits"), [(2, True), (3, False)])
def test_requests_of_one_claim_share_a_counter_up_to_its_amount(requests: int, fits: bool) -> None:
    c = claim("c", [exactly(f"r{k}") for k in range(requests)])
    result = _run(_snap([plain_node("a")], [_halves("a", 3)], [c]), [_pod("p", "c")])
    assert (len(_taken(result)) == requests) if fits else ("p" in _why(result))


# -- which device --------------------------------------------------------------------------------

def _carvable(node: str, unit: str) -> ResourceSlice:
    """gpu-0 can be carved into 1g placements only, gpu-1 into 1g and 4g ones (counter `unit` per slice)."""
    counters = [{"name": f"gpu-{g}", "counters": {f"slice{s}": {"value": unit} for s in range(8)}} for g in range(2)]
    devices = []
    for g, sizes in ((0, (1,)), (1, (1, 4))):
        for size in sizes:
            for start in range(0, 8, size):
                devices.append({"name": f"gpu-{g}-mig-{size}g-{start}", "attributes": {
                    "type": {"string": "mig"}, "profile": {"string": f"{size}g.{size * 10}gb"}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {
                        f"slice{s}": {"value": unit} for s in range(start, start + size)}}]})
    return node_slice(node, devices, counters=counters)


def _mig(name: str, size: int) -> dict[str, Any]:
    return exactly(name, "mig.nvidia.com", selectors=[
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{size}g.{size * 10}gb'"}}])


@pytest.mark.parametrize("unit", ["1", "1m"])
def test_a_placement_packs_onto_the_gpu_this_claims_earlier_request_carved(unit: str) -> None:
    c = claim("c", [_mig("big", 4), _mig("small", 1)])
    result = _run(_snap([plain_node("a")], [_carvable("a", unit)], [c]), [_pod("p", "c")])
    assert _taken(result) == [("big", "a/gpu-1-mig-4g-0"), ("small", "a/gpu-1-mig-1g-4")]


@pytest.mark.parametrize("carvable", [0, 1])
def test_an_uncarved_partitionable_gpu_and_a_plain_one_tie_to_the_lowest_name(carvable: int) -> None:
    devices = [gpu_device("a", m) for m in range(2)]
    devices[carvable]["consumesCounters"] = [{"counterSet": "s", "counters": {"c": {"value": "1"}}}]
    slice_ = node_slice("a", devices, counters=[{"name": "s", "counters": {"c": {"value": "1"}}}])
    result = _run(_snap([plain_node("a")], [slice_], [claim("c", [exactly()])]), [_pod("p", "c")])
    assert _taken(result) == [("gpu", "a/gpu-0")]


def test_best_fit_counts_what_each_devices_policy_makes_the_request_take() -> None:
    """gpu-0 (50Gi) keeps 40Gi after a 10Gi request; gpu-1 (80Gi, 60Gi or all) keeps 20Gi: gpu-1 fits best."""
    steps = {"value": "80Gi", "requestPolicy": {"validValues": ["60Gi", "80Gi"]}}
    devices = [_shared("a", 0, {"memory": {"value": "50Gi"}}), _shared("a", 1, {"memory": steps})]
    c = claim("c", [exactly(**ask("10Gi"))])
    result = _run(_snap([plain_node("a")], [node_slice("a", devices)], [c]), [_pod("p", "c")])
    assert _taken(result) == [("gpu", "a/gpu-1")]
    (bind,) = result.binds
    assert bind.claims[0].devices[0].consumed == {"gpu.nvidia.com/memory": 60 * 2**30}


# -- claims allocated before, in the snapshot or earlier in the cycle ------------------------------

def test_a_pod_whose_claim_is_allocated_runs_though_its_class_is_gone() -> None:
    c = claim("c", [exactly(device_class="retired.example.com")], status=_allocated("p", "a", ["gpu-0"]))
    (bind,) = _run(_snap([gpu_node("a")], [gpu_slice("a")], [c]), [_pod("p", "c")]).binds
    assert bind.node == "a"


def test_a_pod_with_an_allocated_claim_gets_its_new_claims_devices_on_that_node() -> None:
    old = claim("old", [exactly()], status=_allocated("p", "b", ["gpu-0"]))
    elsewhere = claim("elsewhere", [exactly()], status=_allocated("p", "a", ["gpu-0"]))
    snap = _snap([plain_node("a"), plain_node("b")], [gpu_slice("a", gpus=2), gpu_slice("b", gpus=4)],
                 [old, elsewhere, claim("new", [exactly()])])  # a would be the tighter node for `new` alone
    assert _taken(_run(snap, [_pod("p", "old", "new")])) == [("gpu", "b/gpu-1")]
    assert "p" in _why(_run(snap, [_pod("p", "old", "elsewhere")]))  # pinned to two nodes: none


def _pods_on(snap: Any, *pods: PodSpec, **queueing: Any) -> dict[str, str]:
    return {p.pod.split("/")[1]: p.node for p in _run(snap, list(pods), **queueing).binds}


def test_a_claim_allocated_earlier_in_the_cycle_pins_the_next_pod_and_fails_apart_from_claims_alike() -> None:
    """p takes the shared claim on b (the tighter node); q must follow it there, but b has no CPU
    left; r's claim asks the same as the shared one did, unallocated: it is not q's failure."""
    held = claim("old", [exactly(count=3)], status=_allocated("old", "b", ["gpu-0", "gpu-1", "gpu-2"]))
    b = plain_node("b", cpu=1500)
    snap = _snap([plain_node("a"), b], [gpu_slice("a", gpus=4), gpu_slice("b", gpus=4)],
                 [held, claim("shared", [exactly()]), claim("other", [exactly()])])
    pods = [_pod("p", "shared", created=1), _pod("q", "shared", created=2), _pod("r", "other", created=3)]
    assert _pods_on(snap, *pods) == {"p": "b", "r": "a"}


def test_pods_with_claims_allocated_on_different_nodes_do_not_share_a_failure() -> None:
    x = claim("x", [exactly()], status=_allocated("p", "a", ["gpu-0"]))
    y = claim("y", [exactly()], status=_allocated("q", "b", ["gpu-0"]))
    snap = _snap([plain_node("a", cpu=500), plain_node("b")], [gpu_slice("a", gpus=1), gpu_slice("b", gpus=1)], [x, y])
    assert _pods_on(snap, _pod("p", "x", created=1), _pod("q", "y", created=2)) == {"q": "b"}


def test_pods_whose_claims_ask_differently_never_share_a_failure() -> None:
    """Devices not linked to GPUs: the pods differ only in their claims."""
    claims = [claim("nine", [exactly(count=9)]), claim("one", [exactly()])]
    snap = _snap([plain_node("a")], [gpu_slice("a")], claims)
    assert _pods_on(snap, _pod("p", "nine", created=1), _pod("q", "one", created=2)) == {"q": "a"}


def test_a_claim_a_rolled_back_gang_member_allocated_is_allocated_afresh() -> None:
    claims = [claim("c1", [exactly()]), claim("c2", [exactly(count=9)])]
    snap = _snap([plain_node("a")], [gpu_slice("a", gpus=2)], claims, groups=[PodGroup("g", 2)])
    pods = [_pod("g1", "c1", group="default/g", created=1), _pod("g2", "c2", group="default/g", created=2),
            _pod("q", "c1", created=3)]
    result = _run(snap, pods)
    assert _devices(result) == {"q": [("c1", "gpu", "a/gpu-0")]}


@pytest.mark.parametrize(("claims", "why"), [
    ([], "resourceclaim default/c not found"),
    ([replace(claim("c", [exactly()]), deleting=True)], "resourceclaim default/c is being deleted"),
    ([claim("c", [exactly(device_class="retired.example.com")])], "resourceclaim default/c: request gpu: device class"),
    ([claim("c", [_first(("gone", None, 1), ("one", None, 1))])], "resourceclaim default/c: request gpu/gone: device"),
], ids=["missing", "deleting", "class-gone", "an-entrys-class-gone"])
def test_preemption_evicts_nothing_for_a_pod_whose_claim_cannot_be_allocated(claims: Any, why: str) -> None:
    running = [Placement(PodUid("default/low"), NodeName("a"), 64_000, 1024, priority=0, started_s=0.0)]
    snap = _snap([gpu_node("a")], [gpu_slice("a")], claims, running=running)
    result = _run(snap, [_pod("p", "c", priority=10)], preemption=True)
    assert result.evictions == () and _why(result)["p"].startswith(why)


# -- reasons -------------------------------------------------------------------------------------

def test_the_reason_counts_no_free_device_as_zero() -> None:
    held = claim("old", [exactly()], status=_allocated("old", "a", ["gpu-0"]))
    snap = _snap([plain_node("a")], [gpu_slice("a", gpus=1)], [held, claim("c", [exactly()])])
    assert "(at most 0 free on a node; 1 match in the cluster)" in _why(_run(snap, [_pod("p", "c")]))["p"]


def test_a_claim_pod_in_a_cluster_without_nodes_gets_a_reason() -> None:
    net, nic = _fabric(1)
    snap = _snap([], [net], [claim("c", [exactly(device_class="nic.example.com", count=2)])], classes=[nic])
    assert "no node has 2 device(s) of class nic.example.com (at most 0 free" in _why(_run(snap, [_pod("p", "c")]))["p"]

