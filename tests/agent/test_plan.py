"""Which resources a node advertises under each MIG strategy, sharing mode and fractions."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.agent import configsource, fake, inventory
from gpufleet.agent.plan import Kind, PlanError, ResourcePlan, plan_resources
from gpufleet.model import ModelError


def _plans(fixture: str, config: str = "") -> dict[str, ResourcePlan]:
    backend = fake.load_fixture(fixture)
    inv = inventory.inventory(backend.system(), backend.devices())
    return {p.resource: p for p in plan_resources(inv, configsource.load_text(config, "test.yaml"))}


@pytest.mark.parametrize("fixture, config, expected", [
    ("h100-sxm-8", "", {"nvidia.com/gpu": 8}),
    ("a100-mig", "", {"nvidia.com/gpu": 4}),
    ("a100-mig", "flags: {migStrategy: mixed}",
     {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 1,
      "nvidia.com/mig-1g.5gb": 9, "nvidia.com/mig-7g.40gb": 1}),
    ("h100-sxm-8", "flags: {migStrategy: single}", {"nvidia.com/gpu": 8}),
    ("h100-sxm-8", "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}", {"nvidia.com/gpu": 24}),
    ("h100-sxm-8", "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 3}]}}",
     {"nvidia.com/gpu.shared": 24}),
    ("a100-mig", "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {resources: [{name: nvidia.com/mig-1g.5gb, replicas: 2}]}}",
     {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 1,
      "nvidia.com/mig-1g.5gb": 18, "nvidia.com/mig-7g.40gb": 1}),
    ("h100-nvl-pairs", "gpufleet: {fractions: true}", {"nvidia.com/gpu": 4, "gpufleet.io/gpu-milli": 4000}),
    ("a100-mig", "flags: {migStrategy: mixed}\ngpufleet: {fractions: true}",
     {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 1, "nvidia.com/mig-2g.10gb": 1,
      "nvidia.com/mig-1g.5gb": 9, "nvidia.com/mig-7g.40gb": 1, "gpufleet.io/gpu-milli": 1000}),
], ids=["whole GPUs", "MIG strategy none advertises MIG-mode GPUs whole, as NVIDIA does",
        "mixed advertises one resource per profile plus the GPUs without MIG",
        "single without MIG-mode GPUs falls back to whole GPUs",
        "time slicing multiplies IDs", "renameByDefault advertises .shared",
        "time slicing applies to a MIG resource", "fractions advertise 1000 IDs per GPU",
        "fractions use only the GPUs without MIG"])
def test_resources_and_device_counts(fixture: str, config: str, expected: dict[str, int]) -> None:
    plans = _plans(fixture, config)
    assert {name: len(p.units) for name, p in plans.items()} == expected


def test_replica_ids_name_the_device_and_the_replica() -> None:
    plan = _plans("h100-sxm-8", "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")["nvidia.com/gpu"]
    first = plan.units[:2]
    assert [u.id for u in first] == [f"{first[0].gpu}::0", f"{first[0].gpu}::1"]
    assert {u.target for u in first} == {first[0].gpu}


def test_index_strategy_names_gpus_and_mig_devices_by_index() -> None:
    plans = _plans("a100-mig", "flags: {migStrategy: mixed, plugin: {deviceIDStrategy: index}}")
    assert [u.id for u in plans["nvidia.com/mig-1g.5gb"].units][:3] == ["0:2", "0:3", "1:0"]
    assert [u.id for u in plans["nvidia.com/gpu"].units] == ["3"]


def test_plans_know_their_socket_and_kind() -> None:
    plans = _plans("a100-mig", "flags: {migStrategy: mixed}\ngpufleet: {fractions: true}")
    assert plans["nvidia.com/mig-1g.5gb"].socket_name == "gpufleet-mig-1g.5gb.sock"
    assert plans["gpufleet.io/gpu-milli"].kind is Kind.MILLI


def _uniform_a100() -> inventory.NodeGpuInventory:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    return dataclasses.replace(inv, gpus=(inv.gpus[1],))


def test_single_strategy_serves_uniform_mig_devices_as_gpus() -> None:
    plans = plan_resources(_uniform_a100(), configsource.load_text("flags: {migStrategy: single}", "c"))
    assert [(p.resource, p.kind, len(p.units)) for p in plans] == [("nvidia.com/gpu", Kind.MIG, 7)]


@pytest.mark.parametrize("config, problem", [
    ("flags: {migStrategy: single}", "needs every GPU in MIG mode"),
    ("sharing: {mps: {resources: [{name: nvidia.com/mig-1g.5gb, replicas: 2}]}}", "is not advertised on this node"),
    ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu.shared, replicas: 2}]}}", "is not advertised"),
], ids=["single with a GPU outside MIG mode", "sharing a resource the node does not have",
        "sharing names the resource before renaming"])
def test_configs_the_node_cannot_serve_are_plan_errors(config: str, problem: str) -> None:
    with pytest.raises(PlanError, match=problem):
        _plans("a100-mig", config)


def test_single_strategy_with_two_profiles_is_a_plan_error() -> None:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    inv = dataclasses.replace(inv, gpus=inv.gpus[:3])
    with pytest.raises(ModelError, match="needs one MIG profile on every GPU"):
        plan_resources(inv, configsource.load_text("flags: {migStrategy: single}", "c"))


def test_mps_on_mig_devices_under_single_is_refused() -> None:
    config = configsource.load_text(
        "flags: {migStrategy: single}\nsharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}", "c")
    with pytest.raises(PlanError, match="MPS sharing is not supported for MIG devices"):
        plan_resources(_uniform_a100(), config)
