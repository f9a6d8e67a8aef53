"""The agent against a kubelet-side peer over real unix sockets (see kubelet.py)."""

from __future__ import annotations

import dataclasses

import time
from pathlib import Path
from typing import Any, Callable

import grpc  # type: ignore[import-untyped]
import pytest
import yaml

from gpufleet.agent import fake
from gpufleet.agent.kube import PodView
from gpufleet.model import annotations as ann
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION, KeyRing, load_keyring, sign

from .conftest import NODE, AgentFactory, FakeClock
from .kubelet import WAIT_S, FakeKubelet

H100 = [f"GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d0{i}" for i in range(1, 9)]
NVL = [f"GPU-9c41d7e2-0b6a-4f3e-a8d5-7e2c1b0f4a0{i}" for i in range(1, 5)]
A100 = [f"GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a0{i}" for i in range(1, 5)]


def eventually(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Wait until `check()` holds; fail after `timeout_s` (generous: it bounds a failing test only)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.01)


def health(update: Any) -> dict[str, str]:
    return {d.ID: d.health for d in update.devices}


def envs(response: Any, container: int = 0) -> dict[str, str]:
    return dict(response.container_responses[container].envs)


def pod(name: str, assignment: ann.GpuAssignment, scheduler: str = ann.SCHEDULER_NAME,
        node: str = NODE, created: str = "2026-01-01T00:00:00Z") -> PodView:
    return PodView("ml", name, f"uid-{name}", node, scheduler, "Pending", created,
                   {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(assignment)})


# --- registration and ListAndWatch -------------------------------------------------------------

def test_plugin_registers_and_answers_the_options_call_made_inside_register(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent()
    ep = kubelet.endpoint("nvidia.com/gpu")
    assert ep.request.version == "v1beta1"
    assert ep.request.endpoint == "gpufleet-gpu.sock"
    assert ep.options_during_register
    assert ep.options.get_preferred_allocation_available and not ep.options.pre_start_required


def test_first_list_holds_every_gpu_healthy_with_its_numa_node(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent()
    first = kubelet.endpoint("nvidia.com/gpu").next_list()
    assert [d.ID for d in first.devices] == H100
    assert set(health(first).values()) == {"Healthy"}
    assert [d.topology.nodes[0].ID for d in first.devices] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_injected_critical_xid_makes_the_device_unhealthy(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    # How fast (the documented 1 s bound) is measured by bench/agent_latency.py, not here.
    _, backend, api = make_agent()
    ep = kubelet.endpoint("nvidia.com/gpu")
    ep.next_list()
    backend.inject_xid(H100[3], 79)
    update = ep.wait_list(lambda u: health(u)[H100[3]] == "Unhealthy")
    assert len(update.devices) == 8, "every message is the full list"
    assert [i for i, h in health(update).items() if h == "Unhealthy"] == [H100[3]]
    eventually(lambda: api.node.conditions["GpuUnhealthy"].status == "True")
    assert H100[3] in api.node.conditions["GpuUnhealthy"].message
    assert [(t.key, t.value) for t in api.node.taints] == [(f"unhealthy.gpufleet.io/{H100[3]}", "xid-79")]


def test_recoverable_fault_comes_back_after_the_quiet_period_on_a_virtual_clock(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    clock = FakeClock()
    agent, backend, api = make_agent(config="gpufleet: {health: {quietPeriodS: 600}}", clock=clock)
    ep = kubelet.endpoint("nvidia.com/gpu")
    ep.next_list()
    backend.inject_xid(H100[0], 94)  # contained ECC error: recoverable
    ep.wait_list(lambda u: health(u)[H100[0]] == "Unhealthy")
    clock.advance(599)
    clock.wait_reads(3)  # three health polls read the advanced clock: still inside the quiet period
    assert H100[0] in agent.board.faults()
    assert ep.lists.empty()
    clock.advance(1)
    ep.wait_list(lambda u: set(health(u).values()) == {"Healthy"})
    eventually(lambda: api.node.conditions["GpuUnhealthy"].status == "False" and not api.node.taints)


def test_application_xid_is_ignored(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    agent, backend, _ = make_agent()
    ep = kubelet.endpoint("nvidia.com/gpu")
    ep.next_list()
    backend.inject_xid(H100[0], 13)
    backend.inject_xid(H100[1], 48)  # a later critical one proves the first was processed
    update = ep.wait_list(lambda u: "Unhealthy" in health(u).values())
    assert health(update)[H100[0]] == "Healthy"
    assert 'gpufleet_agent_health_events_total{kind="xid"} 2.0' in agent.metrics.text()


# --- kubelet restart ----------------------------------------------------------------------------

def test_plugin_registers_again_after_a_kubelet_restart(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    # How fast (the documented 2 s bound) is measured by bench/agent_latency.py, not here.
    make_agent()
    kubelet.endpoint("nvidia.com/gpu").next_list()
    restarted = time.monotonic()
    kubelet.restart()
    ep = kubelet.endpoint("nvidia.com/gpu", after=restarted)
    assert len(ep.next_list().devices) == 8
    assert len(kubelet.registrations) == 2


def test_plugin_waits_for_a_kubelet_that_starts_later(sock_dir: Path, make_agent: AgentFactory) -> None:
    make_agent()
    late = FakeKubelet(sock_dir)
    late.start()
    try:
        assert late.endpoint("nvidia.com/gpu").next_list().devices
    finally:
        late.stop()


# --- Allocate in every mode ---------------------------------------------------------------------

def test_whole_gpu_allocation_sets_visible_devices_and_device_specs(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    agent, _, _ = make_agent(config="flags: {plugin: {passDeviceSpecs: true}}")
    ep = kubelet.endpoint("nvidia.com/gpu")
    response = ep.allocate([H100[1], H100[2]], [H100[5]])
    assert envs(response, 0)["NVIDIA_VISIBLE_DEVICES"] == f"{H100[1]},{H100[2]}"
    assert envs(response, 1)["NVIDIA_VISIBLE_DEVICES"] == H100[5]
    specs = [(d.container_path, d.permissions) for d in response.container_responses[0].devices]
    assert specs == [("/dev/nvidiactl", "rw"), ("/dev/nvidia-uvm", "rw"), ("/dev/nvidia1", "rw"), ("/dev/nvidia2", "rw")]
    assert 'gpufleet_agent_allocations_total{resource="nvidia.com/gpu",result="ok"} 2.0' in agent.metrics.text()


def test_cdi_strategies_return_cdi_devices_and_annotations(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent(config="flags: {plugin: {deviceListStrategy: [cdi-cri, cdi-annotations]}}")
    response = kubelet.endpoint("nvidia.com/gpu").allocate([H100[0]])
    c = response.container_responses[0]
    assert [d.name for d in c.cdi_devices] == [f"nvidia.com/gpu={H100[0]}"]
    assert list(c.annotations.values()) == [f"nvidia.com/gpu={H100[0]}"]
    assert next(iter(c.annotations)).startswith("cdi.k8s.io/")


def test_time_slicing_advertises_renamed_replicas_and_strips_them_in_allocate(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    config = """
sharing:
  timeSlicing:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 4}]
"""
    make_agent(config=config)
    ep = kubelet.endpoint("nvidia.com/gpu.shared")
    ids = [d.ID for d in ep.next_list().devices]
    assert len(ids) == 32 and ids[:2] == [f"{H100[0]}::0", f"{H100[0]}::1"]
    response = ep.allocate([f"{H100[0]}::0", f"{H100[0]}::3", f"{H100[1]}::1"])
    assert envs(response)["NVIDIA_VISIBLE_DEVICES"] == f"{H100[0]},{H100[1]}"


def test_mps_sets_per_container_memory_and_thread_limits_and_mounts_the_pipe(
        kubelet: FakeKubelet, make_agent: AgentFactory, mps_root: Path) -> None:
    make_agent(config=f"flags: {{mpsRoot: {mps_root}}}\n"
                      "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    ep = kubelet.endpoint("nvidia.com/gpu")
    response = ep.allocate([f"{H100[2]}::1"])
    e = envs(response)
    assert e["NVIDIA_VISIBLE_DEVICES"] == H100[2]
    assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={81559 // 2}M"
    assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert e["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    mounts = {(m.container_path, m.host_path) for m in response.container_responses[0].mounts}
    assert mounts == {("/mps/nvidia.com/gpu/pipe", f"{mps_root}/nvidia.com/gpu/pipe"),
                      ("/dev/shm", f"{mps_root}/shm")}


def test_mps_rejects_a_container_asking_for_two_replicas(kubelet: FakeKubelet, make_agent: AgentFactory,
                                                         mps_root: Path) -> None:
    make_agent(config=f"flags: {{mpsRoot: {mps_root}}}\n"
                      "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    ep = kubelet.endpoint("nvidia.com/gpu")
    with pytest.raises(grpc.RpcError) as info:
        ep.allocate([f"{H100[0]}::0", f"{H100[1]}::0"])
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "maximum request size for shared resources is 1" in info.value.details()


def test_mig_mixed_serves_one_resource_per_profile(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent("a100-mig", config="flags: {migStrategy: mixed}")
    small = kubelet.endpoint("nvidia.com/mig-1g.5gb")
    assert len(small.next_list().devices) == 9
    big = kubelet.endpoint("nvidia.com/mig-3g.20gb")
    mig_uuid = big.next_list().devices[0].ID
    assert envs(big.allocate([mig_uuid]))["NVIDIA_VISIBLE_DEVICES"] == mig_uuid
    whole = kubelet.endpoint("nvidia.com/gpu")
    assert [d.ID for d in whole.next_list().devices] == [A100[3]]


def test_mig_single_serves_uniform_mig_devices_as_gpus(
        kubelet: FakeKubelet, make_agent: AgentFactory, tmp_path: Path) -> None:
    data = yaml.safe_load(Path(fake.__file__).with_name("fixtures").joinpath("a100-mig.yaml").read_text())
    data["gpus"], data["nvlink"] = [data["gpus"][1]], []  # the GPU carved into 7 x 1g.5gb
    fixture = tmp_path / "a100-uniform.yaml"
    fixture.write_text(yaml.safe_dump(data))
    make_agent(str(fixture), config="flags: {migStrategy: single}")
    ep = kubelet.endpoint("nvidia.com/gpu")
    ids = [d.ID for d in ep.next_list().devices]
    assert len(ids) == 7 and all(i.startswith("MIG-") for i in ids)
    assert envs(ep.allocate([ids[4]]))["NVIDIA_VISIBLE_DEVICES"] == ids[4]


def test_xid_on_a_mig_instance_marks_only_that_mig_device(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    _, backend, _ = make_agent("a100-mig", config="flags: {migStrategy: mixed}")
    ep = kubelet.endpoint("nvidia.com/mig-1g.5gb")
    ep.next_list()
    backend.inject_xid(A100[0], 48, gi=9, ci=0)  # GPU 0's first 1g.5gb instance
    update = ep.wait_list(lambda u: "Unhealthy" in health(u).values())
    assert [i for i, h in health(update).items() if h == "Unhealthy"] == ["MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a03"]


# --- fractions and the scheduler's assignment ---------------------------------------------------

FRACTIONS_MPS = """
sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}
gpufleet: {fractions: true}
"""


def test_fraction_goes_to_the_gpu_the_scheduler_chose_with_mps_limits(
        kubelet: FakeKubelet, make_agent: AgentFactory, mps_root: Path) -> None:
    _, _, api = make_agent("h100-nvl-pairs", config=f"flags: {{mpsRoot: {mps_root}}}\n{FRACTIONS_MPS}",
                           pods=(pod("infer", ann.GpuAssignment(NODE, (NVL[2],), 250, 8192)),))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    tokens = [d.ID for d in ep.next_list().devices]
    assert len(tokens) == 4000
    chosen = ep.preferred(tokens, 250)
    assert len(chosen) == 250 and {t.split("::")[0] for t in chosen} == {NVL[2]}
    e = envs(ep.allocate(chosen))
    assert e["NVIDIA_VISIBLE_DEVICES"] == NVL[2]
    assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert (e["GPUFLEET_GPU_MILLI"], e["GPUFLEET_GPU_MEMORY_MIB"]) == ("250", "8192")
    assert api.node.capacity[ann.GPU_MEMORY_RESOURCE] == 4 * 95830


def test_fraction_maps_to_the_assignment_even_when_the_kubelet_picked_other_tokens(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}",
               pods=(pod("infer", ann.GpuAssignment(NODE, (NVL[3],), 100)),))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    e = envs(ep.allocate([f"{NVL[0]}::{k}" for k in range(100)]))
    assert e["NVIDIA_VISIBLE_DEVICES"] == NVL[3]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in e, "time slicing cannot enforce limits; no MPS without MPS"


@pytest.mark.parametrize("stranger", [
    pod("sneaky", ann.GpuAssignment(NODE, (NVL[1],), 250), scheduler="default-scheduler"),
    pod("elsewhere", ann.GpuAssignment("other-node", (NVL[1],), 250)),
    pod("unbound", ann.GpuAssignment(NODE, (NVL[1],), 250), node="other-node"),
], ids=["an assignment on a pod of another scheduler is not trusted",
        "an assignment naming another node is not trusted",
        "an assignment on a pod bound elsewhere is not trusted"])
def test_fraction_is_refused_without_a_trusted_assignment(
        kubelet: FakeKubelet, make_agent: AgentFactory, stranger: PodView) -> None:
    make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}", pods=(stranger,))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    with pytest.raises(grpc.RpcError) as info:
        ep.allocate([f"{NVL[1]}::{k}" for k in range(250)])
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "served only to pods that gpufleet placed" in info.value.details()


def test_an_assignment_is_used_once(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}",
               pods=(pod("infer", ann.GpuAssignment(NODE, (NVL[0],), 500)),))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    ep.allocate([f"{NVL[0]}::{k}" for k in range(500)])
    with pytest.raises(grpc.RpcError):
        ep.allocate([f"{NVL[0]}::{k}" for k in range(500, 1000)])


def test_fraction_is_refused_as_unavailable_while_the_api_is_unreachable(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    _, _, api = make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}",
                           pods=(pod("infer", ann.GpuAssignment(NODE, (NVL[0],), 500)),))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    api.fail = True
    tokens = [f"{NVL[1]}::{k}" for k in range(500)]
    assert len(ep.preferred(tokens + [f"{NVL[1]}::{k}" for k in range(500, 1000)], 500)) == 500, "topology fallback"
    with pytest.raises(grpc.RpcError) as info:
        ep.allocate(tokens)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_preferred_allocation_picks_an_nvlink_connected_pair(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent("h100-nvl-pairs")
    ep = kubelet.endpoint("nvidia.com/gpu")
    assert sorted(ep.preferred([NVL[0], NVL[2], NVL[3]], 2)) == [NVL[2], NVL[3]]
    assert sorted(ep.preferred(NVL, 2, must=[NVL[1]])) == [NVL[0], NVL[1]]


def test_preferred_allocation_follows_the_schedulers_whole_gpu_choice(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    make_agent("h100-nvl-pairs", pods=(pod("train", ann.GpuAssignment(NODE, (NVL[1], NVL[2]), 1000)),))
    ep = kubelet.endpoint("nvidia.com/gpu")
    assert sorted(ep.preferred(NVL, 2)) == [NVL[1], NVL[2]]


# --- configuration ------------------------------------------------------------------------------

def test_bad_config_is_rejected_and_the_last_good_one_keeps_serving(
        kubelet: FakeKubelet, make_agent: AgentFactory, tmp_path: Path) -> None:
    good = "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 4}]}}"
    agent, _, _ = make_agent(config=good, config_poll_s=0.05)
    ep = kubelet.endpoint("nvidia.com/gpu.shared")
    (tmp_path / "config.yaml").write_text(good.replace("replicas: 4", "replicas: 1"))
    eventually(lambda: agent.config_error is not None)
    assert "sharing.timeSlicing.resources[0].replicas: must be at least 2" in (agent.config_error or "")
    assert [p.plan.resource for p in agent.plugins] == ["nvidia.com/gpu.shared"]
    assert envs(ep.allocate([f"{H100[0]}::2"]))["NVIDIA_VISIBLE_DEVICES"] == H100[0]
    assert "gpufleet_agent_config_errors_total 1.0" in agent.metrics.text()


def test_a_new_good_config_replaces_the_plugins(kubelet: FakeKubelet, make_agent: AgentFactory, tmp_path: Path) -> None:
    agent, _, api = make_agent()
    kubelet.endpoint("nvidia.com/gpu")
    (tmp_path / "config.yaml").write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    assert agent.reload_config()
    after = kubelet.endpoint("nvidia.com/gpu", after=kubelet.registrations[0].registered_at + 1e-9)
    assert len(after.next_list().devices) == 16
    eventually(lambda: api.node.labels.get("nvidia.com/gpu.product") == "NVIDIA-H100-80GB-HBM3-SHARED")


def test_a_hanging_api_server_does_not_delay_registration_after_a_kubelet_restart(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    import threading

    agent, backend, api = make_agent()
    kubelet.endpoint("nvidia.com/gpu").next_list()
    hanging, release, answered = threading.Event(), threading.Event(), threading.Event()
    original = api.patch_node

    def hanging_patch(patch):  # type: ignore[no-untyped-def]
        hanging.set()
        release.wait(3 * WAIT_S)  # an API server that does not answer (for longer than the test waits)
        answered.set()
        return original(patch)

    api.patch_node = hanging_patch  # type: ignore[method-assign]
    try:
        backend.inject_xid(H100[0], 79)  # a health change makes the writer call the API
        assert hanging.wait(WAIT_S), "the writer never called the API"
        restarted = time.monotonic()
        kubelet.restart()
        kubelet.endpoint("nvidia.com/gpu", after=restarted)
        assert not answered.is_set(), "registered only once the API server answered"
    finally:
        release.set()


# --- signed assignments (--assignment-keys) -------------------------------------------------------

def signed(p: PodView, ring: KeyRing) -> PodView:
    text = p.annotations[ann.ASSIGNMENT_ANNOTATION]
    return dataclasses.replace(p, annotations={**p.annotations, SIGNATURE_ANNOTATION: sign(
        ring, p.uid, f"{p.namespace}/{p.name}", NODE, text)})


def test_with_keys_only_an_assignment_the_scheduler_signed_for_that_pod_is_served(
        kubelet: FakeKubelet, make_agent: AgentFactory, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "k1").write_bytes(b"k" * 32)
    ring = load_keyring(keys)
    good = signed(pod("infer", ann.GpuAssignment(NODE, (NVL[0],), 250), created="2026-01-03T00:00:00Z"), ring)
    forged = pod("forged", ann.GpuAssignment(NODE, (NVL[1],), 250))  # oldest, so it would be served first
    copied = dataclasses.replace(good, name="copy", uid="uid-copy", created="2026-01-02T00:00:00Z")
    retargeted = dataclasses.replace(forged, name="retargeted", uid="uid-retargeted", annotations={
        ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(ann.GpuAssignment(NODE, (NVL[1],), 250)),
        SIGNATURE_ANNOTATION: good.annotations[SIGNATURE_ANNOTATION]})
    agent, _, api = make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}",
                               pods=(forged, copied, retargeted, good), assignment_keys=keys)
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    assert envs(ep.allocate([f"{NVL[1]}::{k}" for k in range(250)]))["NVIDIA_VISIBLE_DEVICES"] == NVL[0]
    with pytest.raises(grpc.RpcError) as info:  # the three others get nothing
        ep.allocate([f"{NVL[1]}::{k}" for k in range(250)])
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert sorted((pod_key, reason) for pod_key, reason, _ in api.events) == [
        ("ml/copy", "AssignmentRejected"), ("ml/forged", "AssignmentRejected"), ("ml/retargeted", "AssignmentRejected")]
    assert all("only the gpufleet scheduler's own assignments get devices" in note for _, _, note in api.events)
    text = agent.metrics.text()
    assert 'gpufleet_agent_assignments_rejected_total{reason="missing"} 1.0' in text
    assert 'gpufleet_agent_assignments_rejected_total{reason="mismatch"} 2.0' in text  # once per pod, not per call


def test_without_keys_unsigned_assignments_are_served_as_before(kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    _, _, api = make_agent("h100-nvl-pairs", config="gpufleet: {fractions: true}",
                           pods=(pod("infer", ann.GpuAssignment(NODE, (NVL[2],), 250)),))
    ep = kubelet.endpoint("gpufleet.io/gpu-milli")
    assert envs(ep.allocate([f"{NVL[0]}::{k}" for k in range(250)]))["NVIDIA_VISIBLE_DEVICES"] == NVL[2]
    assert api.events == []
