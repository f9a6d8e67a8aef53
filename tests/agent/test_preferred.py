"""GetPreferredAllocation without a scheduler choice: NVLink, NUMA, replica spreading, fraction packing."""

from __future__ import annotations

import pytest

from gpufleet.agent import configsource, fake, inventory
from gpufleet.agent.plan import ResourcePlan, plan_resources
from gpufleet.agent.preferred import preferred

NVL = [f"GPU-9c41d7e2-0b6a-4f3e-a8d5-7e2c1b0f4a0{i}" for i in range(1, 5)]
H100 = [f"GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d0{i}" for i in range(1, 9)]


def _plan(fixture: str, config: str = "", resource: str = "nvidia.com/gpu") -> tuple[ResourcePlan, inventory.NodeGpuInventory]:
    backend = fake.load_fixture(fixture)
    inv = inventory.inventory(backend.system(), backend.devices())
    plans = {p.resource: p for p in plan_resources(inv, configsource.load_text(config, "c"))}
    return plans[resource], inv


def _pick(fixture: str, available: list[str], size: int, must: tuple[str, ...] = (), config: str = "",
          resource: str = "nvidia.com/gpu", packed: bool = False) -> list[str]:
    plan, inv = _plan(fixture, config, resource)
    def domain(uuid: str) -> str | None:
        gpu = inv.gpu(uuid)
        return gpu.nvlink_domain if gpu else None
    return preferred(plan, available, list(must), size, domain, packed)


@pytest.mark.parametrize("available, size, must, expected", [
    ([NVL[0], NVL[2], NVL[3]], 2, (), {NVL[2], NVL[3]}),
    (NVL, 2, (NVL[3],), {NVL[2], NVL[3]}),
    (NVL, 1, (), {NVL[0]}),
    ([NVL[0], NVL[1], NVL[2]], 1, (), {NVL[2]}),
    ([NVL[0], NVL[2]], 2, (), {NVL[0], NVL[2]}),
], ids=["the only complete NVLink pair wins", "a must-include device pulls in its NVLink partner",
        "one GPU comes from the first pair", "one GPU comes from a broken pair to keep a whole pair free",
        "without a connected pair any two will do"])
def test_whole_gpus_follow_nvlink(available: list[str], size: int, must: tuple[str, ...], expected: set[str]) -> None:
    assert set(_pick("h100-nvl-pairs", available, size, must)) == expected


def test_within_one_nvswitch_domain_a_request_stays_on_one_numa_node() -> None:
    available = [H100[0], H100[4], H100[5], H100[6], H100[1]]
    assert set(_pick("h100-sxm-8", available, 3)) == {H100[4], H100[5], H100[6]}


def test_the_answer_has_exactly_the_asked_size_and_keeps_must_include_first() -> None:
    picked = _pick("h100-sxm-8", H100, 4, must=(H100[7],))
    assert len(picked) == 4 and picked[0] == H100[7]


SHARED = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"


def test_distributed_replicas_come_from_the_least_used_gpus_one_per_gpu() -> None:
    available = [f"{NVL[0]}::{k}" for k in (2, 3)] + [f"{g}::{k}" for g in NVL[1:] for k in range(4)]
    picked = _pick("h100-nvl-pairs", available, 3, config=SHARED)
    assert sorted(p.split("::")[0] for p in picked) == sorted(NVL[1:])


def test_packed_replicas_fill_the_most_used_gpu_first() -> None:
    available = [f"{NVL[0]}::3"] + [f"{NVL[1]}::{k}" for k in range(4)]
    picked = _pick("h100-nvl-pairs", available, 1, config=SHARED, packed=True)
    assert picked == [f"{NVL[0]}::3"]


def test_fraction_ids_all_come_from_the_fullest_gpu_that_still_fits() -> None:
    available = [f"{NVL[0]}::{k}" for k in range(1000)] + [f"{NVL[1]}::{k}" for k in range(300)]
    picked = _pick("h100-nvl-pairs", available, 200, config="gpufleet: {fractions: true}",
                   resource="gpufleet.io/gpu-milli")
    assert len(picked) == 200 and {p.split("::")[0] for p in picked} == {NVL[1]}
