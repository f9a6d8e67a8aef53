"""Allocate's container answer, as pure values, for each device-list strategy and sharing mode."""

from __future__ import annotations

import pytest

from gpufleet.agent import allocate as alloc
from gpufleet.agent import configsource, fake, inventory
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.plan import ResourcePlan, plan_resources

H100 = [f"GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d0{i}" for i in range(1, 9)]


def _setup(config_text: str = "", fixture: str = "h100-sxm-8") -> tuple[dict[str, ResourcePlan], AgentConfig]:
    backend = fake.load_fixture(fixture)
    config = configsource.load_text(config_text, "c")
    plans = plan_resources(inventory.inventory(backend.system(), backend.devices()), config)
    return {p.resource: p for p in plans}, config


def test_volume_mounts_strategy_mounts_dev_null_per_device() -> None:
    plans, config = _setup("flags: {plugin: {deviceListStrategy: volume-mounts}}")
    a = alloc.allocate(plans["nvidia.com/gpu"], [H100[0], H100[1]], config)
    assert a.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert [(m.container_path, m.host_path, m.read_only) for m in a.mounts] == [
        (f"/var/run/nvidia-container-devices/{H100[0]}", "/dev/null", True),
        (f"/var/run/nvidia-container-devices/{H100[1]}", "/dev/null", True)]


def test_cdi_only_keeps_the_runtime_hook_from_adding_devices() -> None:
    plans, config = _setup("flags: {plugin: {deviceListStrategy: cdi-cri}}")
    a = alloc.allocate(plans["nvidia.com/gpu"], [H100[2]], config)
    assert a.cdi_devices == (f"nvidia.com/gpu={H100[2]}",)
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_index_strategy_puts_indices_in_visible_devices() -> None:
    plans, config = _setup("flags: {plugin: {deviceIDStrategy: index}}")
    assert alloc.allocate(plans["nvidia.com/gpu"], ["3", "1"], config).envs["NVIDIA_VISIBLE_DEVICES"] == "3,1"


def test_device_specs_list_present_control_nodes_and_each_gpu_once() -> None:
    plans, config = _setup("flags: {nvidiaDevRoot: /host, plugin: {passDeviceSpecs: true}}")
    plan = plans["nvidia.com/gpu"]
    a = alloc.allocate(plan, [H100[4]], config, dev_exists=lambda p: p == "/host/dev/nvidiactl")
    assert [(d.container_path, d.host_path) for d in a.devices] == [
        ("/dev/nvidiactl", "/host/dev/nvidiactl"), ("/dev/nvidia4", "/host/dev/nvidia4")]


def test_unknown_device_ids_are_refused() -> None:
    plans, config = _setup()
    with pytest.raises(alloc.AllocationError, match="unknown device IDs"):
        alloc.allocate(plans["nvidia.com/gpu"], ["GPU-nope"], config)


def test_time_slicing_may_allow_several_replicas_when_not_failing_them() -> None:
    plans, config = _setup("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    a = alloc.allocate(plans["nvidia.com/gpu"], [f"{H100[0]}::0", f"{H100[0]}::1"], config)
    assert a.envs == {"NVIDIA_VISIBLE_DEVICES": H100[0]}


def test_mps_limits_cover_every_visible_device_by_ordinal() -> None:
    plans, config = _setup("sharing: {mps: {failRequestsGreaterThanOne: false, "
                           "resources: [{name: nvidia.com/gpu, replicas: 4}]}}")
    a = alloc.allocate(plans["nvidia.com/gpu"], [f"{H100[0]}::0", f"{H100[5]}::2"], config)
    assert a.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={81559 // 4}M,1={81559 // 4}M"
    assert a.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"


@pytest.mark.parametrize("milli, mem_mib, threads, limit", [
    (1, 0, "1", None), (250, 4096, "25", "0=4096M"), (999, 0, "100", None),
], ids=["the smallest fraction still gets one percent", "a quarter with a memory cap",
        "without a memory request there is no memory cap"])
def test_fraction_under_mps_gets_its_share_of_threads_and_its_memory_cap(
        milli: int, mem_mib: int, threads: str, limit: str | None) -> None:
    plans, config = _setup("sharing: {mps: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
                           "gpufleet: {fractions: true}")
    plan = plans["gpufleet.io/gpu-milli"]
    grant = alloc.FractionGrant(plan.by_id[f"{H100[6]}::0"], milli, mem_mib)
    a = alloc.allocate(plan, [f"{H100[0]}::{k}" for k in range(milli)], config, grant=grant)
    assert a.envs["NVIDIA_VISIBLE_DEVICES"] == H100[6]
    assert a.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == threads
    assert a.envs.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == limit
    assert a.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu.shared/pipe", "the renamed resource's daemon"


def test_a_fraction_without_a_grant_is_refused() -> None:
    plans, config = _setup("gpufleet: {fractions: true}")
    with pytest.raises(alloc.AllocationError, match="no scheduler assignment"):
        alloc.allocate(plans["gpufleet.io/gpu-milli"], [f"{H100[0]}::0"], config)
