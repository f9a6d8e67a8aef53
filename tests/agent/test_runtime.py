"""Agent startup and failure handling outside the gRPC paths."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.agent import configsource, fake, mig_layout
from gpufleet.agent.backend import BackendUnavailableError, GpuBackend
from gpufleet.agent.config import ConfigError
from gpufleet.agent.kube import FakeNodeApi, KubeAccessError, NodePatch
from gpufleet.agent.runtime import Agent, AgentOptions

from .conftest import NODE, AgentFactory
from .drakubelet import register
from .kubelet import WAIT_S


def _no_driver() -> GpuBackend:
    raise BackendUnavailableError("no NVIDIA driver on this machine")


def _agent(tmp_path: Path, sock_dir: Path, config: str,
           open_backend: Callable[[], GpuBackend] = _no_driver) -> Agent:
    path = tmp_path / "c.yaml"
    path.write_text(config)
    return Agent(open_backend, FakeNodeApi(), configsource.ConfigSource(path),
                 AgentOptions("n1", sock_dir, metrics_port=0))


def test_without_a_driver_the_agent_fails_by_default(tmp_path: Path, sock_dir: Path) -> None:
    with pytest.raises(BackendUnavailableError):
        _agent(tmp_path, sock_dir, "").start()


def test_without_a_driver_and_fail_on_init_error_off_the_agent_idles(tmp_path: Path, sock_dir: Path) -> None:
    agent = _agent(tmp_path, sock_dir, "flags: {failOnInitError: false}")
    agent.start()
    try:
        assert agent.idle and agent.plugins == []
    finally:
        agent.stop()


def test_a_bad_config_at_startup_is_an_error(tmp_path: Path, sock_dir: Path) -> None:
    backend = fake.load_fixture("h100-sxm-8")
    with pytest.raises(ConfigError, match="flags.migStrategy"):
        _agent(tmp_path, sock_dir, "flags: {migStrategy: all}", lambda: backend).start()


def test_a_taken_metrics_port_fails_startup_before_serving(tmp_path: Path, sock_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        path = tmp_path / "c.yaml"
        path.write_text("")
        backend = fake.load_fixture("h100-sxm-8")
        agent = Agent(lambda: backend, FakeNodeApi(), configsource.ConfigSource(path),
                      AgentOptions("n1", sock_dir, metrics_port=taken.getsockname()[1]))
        with pytest.raises(OSError):
            agent.start()
    assert not list(sock_dir.iterdir()), "nothing was served"


def test_node_writes_are_retried_after_the_api_comes_back(make_agent: AgentFactory) -> None:
    agent, backend, api = make_agent()
    failed = threading.Event()
    original = api.patch_node

    def patch_node(patch: NodePatch) -> None:
        try:
            original(patch)
        except KubeAccessError:
            if any(c.type == "GpuUnhealthy" and c.status == "True" for c in patch.conditions):
                failed.set()  # the write of the fault itself failed: it must be retried
            raise

    api.patch_node = patch_node  # type: ignore[method-assign]
    api.fail = True
    backend.inject_xid("GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01", 79)
    assert failed.wait(WAIT_S), "the writer never tried to write the fault to the unreachable API"
    api.fail = False
    deadline = time.monotonic() + WAIT_S
    while (condition := api.node.conditions.get("GpuUnhealthy")) is None or condition.status != "True":
        assert time.monotonic() < deadline, "the node was not written after the API came back"
        time.sleep(0.02)


def test_stop_removes_the_sockets_and_releases_the_backend(tmp_path: Path, sock_dir: Path) -> None:
    backend = fake.load_fixture("h100-sxm-8")
    agent = _agent(tmp_path, sock_dir, "", lambda: backend)
    agent.start()
    assert (sock_dir / "gpufleet-gpu.sock").exists()
    agent.stop()
    assert backend.closed and not (sock_dir / "gpufleet-gpu.sock").exists()


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_dra_publishing_is_off_by_default(make_agent: AgentFactory) -> None:
    agent, _, api = make_agent()
    assert api.patches and api.slices == {} and agent.slice_generation == 0


def test_the_agent_publishes_its_pool_and_a_fault_taints_the_gpu_in_a_new_generation(make_agent: AgentFactory) -> None:
    agent, backend, api = make_agent(config="gpufleet: {dra: {publish: true, mig: dynamic}}")
    (pool,) = api.slices.values()
    assert list(api.slices) == ["gpu.gpufleet.io"] and len(pool) == 5 and agent.slice_generation == 1
    backend.inject_xid("GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01", 79)
    wait_until(lambda: agent.slice_generation == 2, "the fault was not published")
    tainted = {d["name"] for s in api.slices["gpu.gpufleet.io"] for d in s["spec"].get("devices", []) if "taints" in d}
    assert "gpu-0" in tainted and "gpu-0-mig-7g80gb-0-0" in tainted and not any(n.startswith("gpu-1") for n in tainted)


def test_time_slicing_publishes_memory_shares(make_agent: AgentFactory) -> None:
    config = ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
              "gpufleet: {dra: {publish: true}}")
    _, _, api = make_agent(config=config)
    (pool,) = api.slices.values()
    assert all(d["allowMultipleAllocations"] for d in pool[0]["spec"]["devices"])


def test_turning_publishing_off_or_renaming_the_driver_withdraws_the_old_pool(make_agent: AgentFactory,
                                                                             tmp_path: Path) -> None:
    agent, _, api = make_agent(config="gpufleet: {dra: {publish: true}}", config_poll_s=0.05)
    assert list(api.slices) == ["gpu.gpufleet.io"]
    (tmp_path / "config.yaml").write_text("gpufleet: {dra: {publish: true, driver: gpu.example.com}}")
    wait_until(lambda: list(api.slices) == ["gpu.example.com"], "the renamed driver's pool did not replace the old")
    (tmp_path / "config.yaml").write_text("gpufleet: {dra: {publish: false}}")
    wait_until(lambda: api.slices == {}, "the pool was not withdrawn")


def test_a_failed_publish_is_retried(make_agent: AgentFactory) -> None:
    agent, backend, api = make_agent(config="gpufleet: {dra: {publish: true}}")
    original = api.publish_resource_slices
    calls: list[int] = []

    def flaky(driver: str, slices: object) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise KubeAccessError("503 from the API server")
        return original(driver, slices)  # type: ignore[arg-type]

    api.publish_resource_slices = flaky  # type: ignore[method-assign]
    backend.inject_xid("GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01", 79)
    wait_until(lambda: agent.slice_generation == 2, "the fault was not published after a failed try")
    assert len(calls) >= 2


def test_a_publishing_agent_serves_the_kubelets_dra_api_until_the_config_stops_it(
        make_agent: AgentFactory, tmp_path: Path) -> None:
    dirs = {"dra_plugins_dir": tmp_path / "p", "dra_registry_dir": tmp_path / "r", "cdi_root": tmp_path / "cdi"}
    agent, _, api = make_agent(config="gpufleet: {dra: {publish: true}}", config_poll_s=0.05, **dirs)
    assert agent.dra is not None
    kubelet = register(agent.dra.registration_path)
    api.claims[("team", "c")] = {"metadata": {"namespace": "team", "name": "c", "uid": "u1"}, "status": {"allocation": {
        "devices": {"results": [{"request": "r", "driver": "gpu.gpufleet.io", "pool": NODE, "device": "gpu-4"}]}}}}
    answer = kubelet.prepare(("team", "c", "u1")).claims["u1"]
    kubelet.close()
    assert answer.error == "" and [d.device_name for d in answer.devices] == ["gpu-4"]
    (tmp_path / "config.yaml").write_text("gpufleet: {dra: {publish: false}}")
    wait_until(lambda: agent.dra is None and api.slices == {}, "the DRA plugin was not stopped")
    assert not (tmp_path / "r" / "gpu.gpufleet.io-reg.sock").exists()


def test_an_agent_restarted_with_a_carved_claim_keeps_its_pool_and_destroys_the_instance_at_unprepare(
        tmp_path: Path, sock_dir: Path) -> None:
    """Discovery after the restart sees the instance carved for the prepared claim and leaves it out
    (prepared.json says whose it is), so GPU 0 stays partitionable and no device plugin offers it."""
    backend = fake.load_fixture("h100-sxm-8")
    gpu0 = backend.devices()[0].uuid
    backend.set_mig_mode(gpu0, True)
    api = FakeNodeApi()
    (tmp_path / "c.yaml").write_text("gpufleet: {dra: {publish: true, mig: dynamic}}")
    options = AgentOptions(NODE, sock_dir, metrics_port=0, dra_plugins_dir=tmp_path / "p",
                           dra_registry_dir=tmp_path / "r", cdi_root=tmp_path / "cdi")

    def start() -> Agent:
        agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "c.yaml"), options,
                      dev_exists=lambda path: False)
        agent.start()
        assert agent.dra is not None
        return agent

    first = start()
    pool = api.slices["gpu.gpufleet.io"]
    api.claims[("team", "mig")] = {"metadata": {"namespace": "team", "name": "mig", "uid": "u1"}, "status": {
        "allocation": {"devices": {"results": [{"request": "r", "driver": "gpu.gpufleet.io", "pool": NODE,
                                                "device": "gpu-0-mig-3g40gb-9-4"}]}}}}
    assert first.dra is not None
    kubelet = register(first.dra.registration_path)
    assert kubelet.prepare(("team", "mig", "u1")).claims["u1"].error == ""
    kubelet.close()
    first.stop()
    assert [m.placement_start for m in backend.devices()[0].mig_devices] == [4]

    again = start()
    try:
        assert api.slices["gpu.gpufleet.io"] == pool and not again.inventory.gpus[0].mig_slices
        assert again.dra is not None
        kubelet = register(again.dra.registration_path)
        assert kubelet.unprepare(("team", "mig", "u1")).claims["u1"].error == ""
        kubelet.close()
        assert backend.devices()[0].mig_devices == ()
    finally:
        again.stop()


def test_a_mig_layout_never_destroys_an_instance_carved_for_a_prepared_claim(tmp_path: Path, sock_dir: Path) -> None:
    """Discovery leaves the claim's instance out, but the layout's own look at the GPU sees it:
    prepared.json says it is in use, so the change is refused and the instance stays."""
    backend = fake.load_fixture("h100-sxm-8")
    gpu0 = backend.devices()[0].uuid
    backend.set_mig_mode(gpu0, True)
    api = FakeNodeApi()
    (tmp_path / "c.yaml").write_text("gpufleet: {dra: {publish: true, mig: dynamic}}")
    agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "c.yaml"),
                  AgentOptions(NODE, sock_dir, metrics_port=0, dra_plugins_dir=tmp_path / "p",
                               dra_registry_dir=tmp_path / "r", cdi_root=tmp_path / "cdi"),
                  dev_exists=lambda path: False)
    agent.start()
    try:
        api.claims[("team", "mig")] = {"metadata": {"namespace": "team", "name": "mig", "uid": "u1"}, "status": {
            "allocation": {"devices": {"results": [{"request": "r", "driver": "gpu.gpufleet.io", "pool": NODE,
                                                    "device": "gpu-0-mig-3g40gb-9-4"}]}}}}
        assert agent.dra is not None
        kubelet = register(agent.dra.registration_path)
        assert kubelet.prepare(("team", "mig", "u1")).claims["u1"].error == ""
        kubelet.close()
        carved = [m.uuid for m in backend.devices()[0].mig_devices]
        api.node.annotations[mig_layout.LAYOUT_ANNOTATION] = json.dumps({"generation": 1, "gpus": {gpu0: ["7g.80gb@0"]}})
        assert not agent.sync_mig_layout()
        assert "in use by a pod or a prepared claim" in str(agent.layout_state)
        assert [m.uuid for m in backend.devices()[0].mig_devices] == carved
    finally:
        agent.stop()
