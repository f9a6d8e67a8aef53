"""Discovery's pure half: MIG profile names, NVLink domains, families, the inventory annotation."""

from __future__ import annotations

import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent import fake, inventory
from gpufleet.model import ModelError, NodeInfo, NodeName, mig
from gpufleet.model import annotations as ann


def _inventory(name: str) -> inventory.NodeGpuInventory:
    backend = fake.load_fixture(name)
    return inventory.inventory(backend.system(), backend.devices())


@pytest.mark.parametrize("fixture", fake.fixture_names())
def test_possible_mig_profiles_carry_the_names_of_the_model_tables(fixture: str) -> None:
    for gpu in _inventory(fixture).gpus:
        names = [name for name, _ in gpu.mig_profiles]
        assert sorted(names) == sorted(mig.profiles_for(gpu.product)), gpu.product
        assert dict(gpu.mig_profiles) == {p.name: p.max_instances for p in mig.profiles_for(gpu.product).values()}


@pytest.mark.parametrize("slices, mem_mib, total_mib, index, expected", [
    (1, 4864, 40960, 0, "1g.5gb"),
    (3, 19968, 40960, 2, "3g.20gb"),
    (2, 22528, 95830, 1, "2g.24gb"),
    (3, 71680, 143771, 2, "3g.71gb"),
    (1, 9984, 81559, 7, "1g.10gb+me"),
], ids=["A100 1g rounds up to an eighth", "A100 3g", "H100 NVL 2g rounds 23.5 half up to 24",
        "H200 3g rounds 70.5 half up to 71", "the rev-1 one-slice profile carries media extensions"])
def test_mig_profile_names_follow_the_go_nvlib_rule(slices: int, mem_mib: int, total_mib: int, index: int,
                                                    expected: str) -> None:
    profile = dev.MigProfileInfo(index, slices, 1, 14, mem_mib)
    assert inventory.mig_profile_name(profile, slices, total_mib) == expected


def test_a_compute_instance_smaller_than_its_gpu_instance_is_named_with_its_c_count() -> None:
    profile = dev.MigProfileInfo(2, 3, 2, 42, 19968)
    assert inventory.mig_profile_name(profile, 1, 40960) == "1c.3g.20gb"


def test_carved_mig_devices_are_named_in_discovery_order() -> None:
    gpus = _inventory("a100-mig").gpus
    assert [s.profile for s in gpus[0].mig_slices] == ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    assert [s.profile for s in gpus[2].mig_slices] == ["7g.40gb"]
    assert not gpus[3].mig_enabled and not gpus[3].mig_slices


@pytest.mark.parametrize("fixture, domains", [
    ("h100-sxm-8", ["nvl0"] * 8),
    ("h100-nvl-pairs", ["nvl0", "nvl0", "nvl1", "nvl1"]),
], ids=["an NVSwitch board is one NVLink domain", "bridged PCIe pairs are one domain each"])
def test_nvlink_domains_are_connected_components(fixture: str, domains: list[str]) -> None:
    assert [g.nvlink_domain for g in _inventory(fixture).gpus] == domains


def test_a_gpu_without_nvlink_peers_has_no_domain_and_a_one_sided_link_counts() -> None:
    def gpu(i: int, peers: tuple[str, ...] = ()) -> dev.DeviceInfo:
        return dev.DeviceInfo(f"GPU-{i}", i, i, "NVIDIA L4", 22491, f"0:{i}", 0x27B810DE, (8, 9), nvlink_peers=peers)
    inv = inventory.inventory(dev.SystemInfo("550.1", 12040), (gpu(0, ("GPU-1",)), gpu(1), gpu(2)))
    assert [g.nvlink_domain for g in inv.gpus] == ["nvl0", "nvl0", None]


@pytest.mark.parametrize("compute, family", [
    ((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"), ((8, 9), "ampere"), ((9, 0), "hopper"),
    ((10, 0), "blackwell"), ((4, 0), "undefined"),
], ids=["7.0 is volta", "7.5 is turing", "8.0 is ampere", "8.9 is ampere as GFD reports it", "9.0 is hopper",
        "10.0 is blackwell", "an unknown major is undefined"])
def test_family_follows_gfd(compute: tuple[int, int], family: str) -> None:
    assert inventory.family(compute) == family


def test_cuda_version_and_product_come_from_nvml_values() -> None:
    inv = _inventory("h200-sxm-8")
    assert inv.cuda_version == (12, 6)
    assert inv.gpus[0].product == "NVIDIA-H200" and inv.gpus[0].mode == "compute"


@pytest.mark.parametrize("fixture", fake.fixture_names())
def test_inventory_annotation_builds_a_node_the_scheduler_accepts(fixture: str) -> None:
    inv = _inventory(fixture)
    text = ann.encode_inventory(inventory.to_annotation(inv, frozenset({inv.gpus[0].uuid})))
    gpus = ann.inventory_to_gpus(ann.decode_inventory(text))
    node = NodeInfo(NodeName("n"), 1000, 1024, gpus=gpus)
    assert [g.healthy for g in node.gpus] == [False] + [True] * (len(gpus) - 1)
    assert [g.mig_slices for g in node.gpus] == [tuple(s.profile for s in g.mig_slices) for g in inv.gpus]


def test_inventory_json_lists_what_discovery_saw() -> None:
    data = inventory.to_json(_inventory("a100-mig"))
    assert data["cudaVersion"] == "12.2"
    first = data["gpus"][0]
    assert first["pciDeviceId"] == "0x20B010DE" and first["migEnabled"] is True
    assert [m["profile"] for m in first["mig"]] == ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]


def test_a_mig_device_with_an_unlisted_profile_is_a_clear_error() -> None:
    device = dev.DeviceInfo("GPU-0", 0, 0, "NVIDIA A100-SXM4-40GB", 40960, "0:0", 0x20B010DE, (8, 0),
                            mig_capable=True, mig_enabled=True,
                            mig_devices=(dev.MigDeviceInfo("MIG-0", 1, 0, 4, 7, 98),))
    with pytest.raises(ModelError, match="profile index 4, which the GPU does not list"):
        inventory.inventory(dev.SystemInfo("535.1", 12020), (device,))
