"""The agent's GPUs as DRA ResourceSlices: names and attributes as NVIDIA's driver publishes them,
the API's per-slice limits, and partitionable MIG whose counters allow exactly the layouts the
hardware allows. kube-apiserver's own validation of the same objects is in
tests/live/test_resourceslices_live.py."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.resourceslices import MigMode, SliceOptions
from gpufleet.model import ModelError
from gpufleet.model.mig import check_layout


def inv(name: str) -> inventory.NodeGpuInventory:
    backend = fake.load_fixture(name)
    return inventory.inventory(backend.system(), backend.devices())


def devices(slices: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def counter_sets(slices: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c["counters"] for s in slices for c in s["spec"].get("sharedCounters", [])}


def quantity(text: str) -> int:
    powers = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40}
    return int(text[:-2]) * 2**powers[text[-2:]] if text[-2:] in powers else int(text)


def test_whole_gpus_carry_nvidias_attribute_names_and_standard_ones() -> None:
    slices = rs.resource_slices(inv("h100-sxm-8"), "node-a", 3)
    assert len(slices) == 1
    spec = slices[0]["spec"]
    assert (slices[0]["metadata"]["name"], spec["driver"], spec["nodeName"], spec["pool"]) == (
        "node-a-gpu.gpufleet.io-0", "gpu.gpufleet.io", "node-a", {"name": "node-a", "generation": 3, "resourceSliceCount": 1})
    first = spec["devices"][0]
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert first["attributes"] == {
        "type": {"string": "gpu"}, "uuid": {"string": "GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"}, "driverVersion": {"version": "550.54.15"},
        "cudaDriverVersion": {"version": "12.4.0"}, "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
        "resource.kubernetes.io/numaNode": {"int": 0}, "nvlinkDomain": {"string": "nvl0"}}
    assert first["capacity"] == {"memory": {"value": "81559Mi"}}
    assert "allowMultipleAllocations" not in first


def test_static_mig_offers_the_carved_instances_named_by_profile_id_and_placement() -> None:
    a100 = inv("a100-mig")
    names = [d["name"] for d in devices(rs.resource_slices(a100, "n", 1))]
    assert names == ["gpu-0-mig-3g20gb-9-4", "gpu-0-mig-2g10gb-14-0", "gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-3",
                     *[f"gpu-1-mig-1g5gb-19-{i}" for i in range(7)], "gpu-2-mig-7g40gb-0-0", "gpu-3"]
    first = devices(rs.resource_slices(a100, "n", 1))[0]
    assert first["attributes"]["profile"] == {"string": "3g.20gb"}
    assert first["attributes"]["parentUUID"] == {"string": a100.gpus[0].uuid}
    assert first["attributes"]["uuid"] == {"string": a100.gpus[0].mig_slices[0].uuid}
    assert {k: v["value"] for k, v in first["capacity"].items()} == {
        "multiprocessors": "42", "copyEngines": "3", "decoders": "2", "encoders": "0", "jpegEngines": "0",
        "ofaEngines": "0", "memory": "19968Mi", "memorySlice4": "1", "memorySlice5": "1", "memorySlice6": "1",
        "memorySlice7": "1"}


def test_an_instance_whose_placement_is_unknown_is_named_by_its_instance_ids() -> None:
    a100 = inv("a100-mig")
    g = a100.gpus[2]
    unplaced = dataclasses.replace(g, mig_slices=tuple(dataclasses.replace(s, placement_start=None)
                                                       for s in g.mig_slices))
    d = devices(rs.resource_slices(dataclasses.replace(a100, gpus=(unplaced,)), "n", 1))[0]
    assert d["name"] == "gpu-2-mig-gi0-ci0"
    assert not any(k.startswith("memorySlice") for k in d["capacity"])


def test_memory_shares_make_whole_gpus_consumable_with_the_whole_memory_by_default() -> None:
    d = devices(rs.resource_slices(inv("h100-sxm-8"), "n", 1, SliceOptions(memory_shares=True)))[0]
    assert d["allowMultipleAllocations"] is True
    assert d["capacity"]["memory"] == {"value": "81559Mi", "requestPolicy": {
        "default": "81559Mi", "validRange": {"min": "1Mi", "max": "81559Mi", "step": "1Mi"}}}


def test_an_unhealthy_gpu_stays_published_with_a_noschedule_taint() -> None:
    h100 = inv("h100-sxm-8")
    ds = devices(rs.resource_slices(h100, "n", 1, unhealthy=frozenset({h100.gpus[2].uuid})))
    assert [d.get("taints") for d in ds].count(None) == 7
    assert ds[2]["taints"] == [{"key": "gpufleet.io/unhealthy", "value": "true", "effect": "NoSchedule"}]


def test_an_unhealthy_mig_instance_is_tainted_alone() -> None:
    a100 = inv("a100-mig")
    ds = devices(rs.resource_slices(a100, "n", 1, unhealthy=frozenset({a100.gpus[1].mig_slices[3].uuid})))
    assert [d["name"] for d in ds if "taints" in d] == ["gpu-1-mig-1g5gb-19-3"]


def test_the_node_owns_its_slices_when_its_uid_is_known() -> None:
    s = rs.resource_slices(inv("h100-sxm-8"), "n", 1, node_uid="u-1")[0]
    assert s["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u-1",
                                                 "controller": True}]


def test_a_node_without_gpus_publishes_one_empty_slice() -> None:
    h100 = inv("h100-sxm-8")
    slices = rs.resource_slices(dataclasses.replace(h100, gpus=()), "n", 1)
    assert [s["spec"]["devices"] for s in slices] == [[]]


def test_dynamic_mig_publishes_counter_sets_apart_from_devices_within_the_limits() -> None:
    h100 = inv("h100-sxm-8")
    sixteen = dataclasses.replace(h100, gpus=h100.gpus + tuple(dataclasses.replace(g, minor=g.minor + 8, uuid=g.uuid + "x")
                                                                for g in h100.gpus))
    slices = rs.resource_slices(sixteen, "n", 7, SliceOptions(mig=MigMode.DYNAMIC))
    assert all(("devices" in s["spec"]) != ("sharedCounters" in s["spec"]) for s in slices)
    assert all(len(s["spec"].get("sharedCounters", [])) <= rs.MAX_COUNTER_SETS for s in slices)
    assert all(len(s["spec"].get("devices", [])) <= rs.MAX_DEVICES_ADVANCED for s in slices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
    # 16 GPUs x (1 whole + 25 placements: 7 + 7 (+me) + 4 + 3 + 2 + 1 + 1)
    assert len(devices(slices)) == 16 * 26
    sets = counter_sets(slices)
    assert len(sets) == 16
    for d in devices(slices):  # every device consumes from one defined set, never more than it holds
        (use,) = d["consumesCounters"]
        held = sets[use["counterSet"]]
        assert all(quantity(c["value"]) <= quantity(held[name]["value"]) for name, c in use["counters"].items())
    for s in slices:  # one GPU's devices never span slices
        gpus = Counter(d["name"].split("-mig-")[0] for d in s["spec"].get("devices", []))
        assert all(n == 26 for n in gpus.values())


def fits(devs: tuple[dict[str, Any], ...], held: dict[str, Any]) -> bool:
    used: Counter[str] = Counter()
    for d in devs:
        for name, c in d["consumesCounters"][0]["counters"].items():
            used[name] += quantity(c["value"])
    return all(used[name] <= quantity(c["value"]) for name, c in held.items())


@pytest.mark.parametrize("fixture", ["h100-sxm-8", "a100-mig", "h200-sxm-8"])
def test_dynamic_mig_counters_allow_exactly_the_layouts_the_gpu_can_carve(fixture: str) -> None:
    """Every set of placement devices whose counters fit is a layout `check_layout` accepts with
    disjoint memory slices; every such layout placed on disjoint slices fits; the whole GPU fits
    alone and with nothing else."""
    base = inv(fixture)
    g = next(g for g in base.gpus if not g.mig_enabled)
    slices = rs.resource_slices(dataclasses.replace(base, gpus=(g,)), "n", 1, SliceOptions(mig=MigMode.DYNAMIC))
    (held,) = counter_sets(slices).values()
    whole, *placements = devices(slices)
    assert whole["name"] == f"gpu-{g.minor}" and fits((whole,), held)
    assert not any(fits((whole, p), held) for p in placements)

    def memory_slices(d: dict[str, Any]) -> set[str]:
        return {n for n in d["consumesCounters"][0]["counters"] if n.startswith("memory-slice-")}

    def carvable(combo: tuple[dict[str, Any], ...]) -> bool:
        profiles = tuple(d["attributes"]["profile"]["string"] for d in combo)
        disjoint = sum(len(memory_slices(d)) for d in combo) == len(set().union(*map(memory_slices, combo)))
        try:
            check_layout(profiles, g.name, "test")
        except ModelError:
            return False
        return disjoint

    # Both properties only get lost as placements are added, so a search that stops extending a set
    # once it no longer fits still meets every set that fits and each first one that does not.
    fitting = checked = 0
    stack: list[tuple[tuple[dict[str, Any], ...], int]] = [((), 0)]
    while stack:
        combo, start = stack.pop()
        for i in range(start, len(placements)):
            bigger = (*combo, placements[i])
            ok = fits(bigger, held)
            assert ok == carvable(bigger), [d["name"] for d in bigger]
            checked += 1
            if ok:
                fitting += 1
                stack.append((bigger, i + 1))
    assert fitting > 100 and checked > fitting


def test_quantities_take_the_canonical_form_the_server_stores() -> None:
    assert [rs.mebibytes(m) for m in (40960, 143360, 81559, 1024 * 1024, 0, 1)] == [
        "40Gi", "140Gi", "81559Mi", "1Ti", "0", "1Mi"]


def test_versions_and_bus_ids_take_the_forms_the_api_validates() -> None:
    assert rs.semver("580.159.04", "v") == "580.159.4"
    assert rs.semver("560.35", "v") == "560.35.0"
    with pytest.raises(ModelError, match="'550.54.15-beta' is not a dotted version"):
        rs.semver("550.54.15-beta", "driver version")
    assert rs.pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    with pytest.raises(ModelError, match="not domain:bus:device.function"):
        rs.pci_bus_id("3B:00.0")
    assert [rs.architecture(c) for c in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (7, 5), (7, 0), (2, 0)]] == [
        "Ampere", "Ampere", "Ada Lovelace", "Hopper", "Blackwell", "Turing", "Volta", "Unknown"]


def test_a_carved_instance_outside_its_profiles_placements_is_an_error_naming_it() -> None:
    backend = fake.load_fixture("a100-mig")
    devs = backend.devices()
    bad = dataclasses.replace(devs[0], mig_devices=(dataclasses.replace(devs[0].mig_devices[0], placement_start=2),))
    with pytest.raises(ModelError, match=r"MIG device MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a01: starts at memory "
                                         r"slice 2, which its profile does not allow \(allowed: \[0, 4\]\)"):
        inventory.inventory(backend.system(), (bad,))


@pytest.mark.parametrize("fixture", fake.fixture_names())
@pytest.mark.parametrize("options", [SliceOptions(), SliceOptions(mig=MigMode.DYNAMIC), SliceOptions(memory_shares=True)],
                         ids=["static", "dynamic", "shares"])
def test_the_prepare_targets_are_exactly_the_published_devices(fixture: str, options: SliceOptions) -> None:
    base = inv(fixture)
    targets = rs.device_targets(base, options)
    published = devices(rs.resource_slices(base, "n", 1, options))
    assert sorted(targets) == sorted(d["name"] for d in published)
    for d in published:
        t = targets[d["name"]]
        assert t.uuid == d["attributes"].get("uuid", d["attributes"].get("parentUUID"))["string"]
        assert t.shareable == d.get("allowMultipleAllocations", False)
        assert (t.carve is not None) == ("consumesCounters" in d and d["attributes"]["type"]["string"] == "mig")
