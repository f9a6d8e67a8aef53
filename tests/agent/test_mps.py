"""MPS out of the box: the daemon specs, the supervisor against the control stand-in, and the agent.

The stand-in (`mps_stub/nvidia-cuda-mps-control`) is written from NVIDIA's documented
interface and what a real H100 did (its README); it records the commands it is sent in
`control.log` and its environment in `stub-env.json`, as the real daemon logs its commands.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.agent import allocate as alloc
from gpufleet.agent import config as cfg
from gpufleet.agent import configsource, fake, health, mps
from gpufleet.agent.inventory import inventory
from gpufleet.agent.backend import BackendError
from gpufleet.agent.metrics import AgentMetrics
from gpufleet.agent.mps_daemon import MpsControl, MpsSupervisor, backoff_s
from gpufleet.agent.plan import Kind, plan_resources
from gpufleet.agent.report import MPS_CONDITION_TYPE

from .conftest import MPS_STUB_DIR, NODE, AgentFactory, kill_mps_daemons
from .kubelet import WAIT_S, FakeKubelet

STUB = str(MPS_STUB_DIR / "nvidia-cuda-mps-control")
H100_MEM = 81559


def _config(text: str) -> cfg.AgentConfig:
    return configsource.load_text(text, "test.yaml")


def _specs(text: str, fixture: str = "h100-sxm-8") -> tuple[mps.MpsDaemonSpec, ...]:
    backend = fake.load_fixture(fixture)
    config = _config(text)
    return mps.daemon_specs(plan_resources(inventory(backend.system(), backend.devices()), config), config)


def _commands(spec: mps.MpsDaemonSpec) -> list[str]:
    """The commands the daemon was sent, in order (its control.log, as the real daemon writes it)."""
    log = Path(spec.log_dir) / "control.log"
    return [line.split("Cmd:", 1)[1].strip() for line in log.read_text().splitlines() if "Cmd:" in line]


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- what the daemons must be ----------------------------------------------------------------------

MPS4 = "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}"


def test_one_daemon_per_mps_resource_with_each_replicas_share_as_its_defaults() -> None:
    (spec,) = _specs(f"flags: {{mpsRoot: /run/mps/}}\n{MPS4}")
    backend = fake.load_fixture("h100-sxm-8")
    uuids = tuple(g.uuid for g in backend.devices())
    assert spec.resource == "nvidia.com/gpu" and spec.gpus == uuids
    assert (spec.pipe_dir, spec.log_dir, spec.shm_dir) == (
        "/run/mps/nvidia.com/gpu/pipe", "/run/mps/nvidia.com/gpu/log", "/run/mps/shm")
    assert spec.env() == {"CUDA_MPS_PIPE_DIRECTORY": spec.pipe_dir, "CUDA_MPS_LOG_DIRECTORY": spec.log_dir,
                          "CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    assert spec.default_commands() == (
        *(f"set_default_device_pinned_mem_limit {u} {H100_MEM // 4}M" for u in uuids),
        "set_default_active_thread_percentage 25")
    assert spec.exclusive_process


def test_with_fractions_the_daemon_defaults_are_the_whole_gpu() -> None:
    """Fractions of any size share the daemon; a default below a grant would cap it (docs/hardware.md)."""
    (spec,) = _specs(f"{MPS4}\ngpufleet: {{fractions: true}}")
    assert {d.pinned_mem_mib for d in spec.limits} == {H100_MEM} and spec.thread_percentage == 100


@pytest.mark.parametrize("text", [
    "",
    "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}",
    f"{MPS4}\ngpufleet: {{mps: {{manageDaemon: false}}}}",
])
def test_no_daemon_without_mps_or_when_it_is_not_managed(text: str) -> None:
    assert _specs(text) == ()


@pytest.mark.parametrize("text", [
    MPS4,
    "sharing: {mps: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 2}]}}",
    f"{MPS4}\ngpufleet: {{fractions: true}}",
])
def test_every_mps_container_is_pointed_at_a_pipe_directory_a_daemon_listens_on(text: str) -> None:
    backend = fake.load_fixture("h100-sxm-8")
    config = _config(text)
    plans = plan_resources(inventory(backend.system(), backend.devices()), config)
    pipes = {s.pipe_dir for s in mps.daemon_specs(plans, config)}
    for plan in plans:
        unit = plan.units[0]
        grant = alloc.FractionGrant(unit, 250, 1024) if plan.kind is Kind.MILLI else None
        result = alloc.allocate(plan, [unit.id], config, grant=grant, dev_exists=lambda p: False)
        mounts = {m.container_path: m.host_path for m in result.mounts}
        assert mounts[result.envs["CUDA_MPS_PIPE_DIRECTORY"]] in pipes, plan.resource
        assert mounts["/dev/shm"] == f"{config.flags.mps_root}/shm"


def test_backoff_restarts_at_once_then_doubles_up_to_a_minute() -> None:
    assert [backoff_s(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]


@pytest.mark.parametrize(("text", "problem"), [
    ("gpufleet: {mps: {manageDaemon: yes please}}", "gpufleet.mps.manageDaemon: must be bool"),
    ("gpufleet: {mps: {controlBinary: ' '}}", "gpufleet.mps.controlBinary: must name the program"),
    ("gpufleet: {mps: {exclusive: true}}", "gpufleet.mps.exclusive: unknown key"),
])
def test_bad_mps_settings_name_the_key(text: str, problem: str) -> None:
    with pytest.raises(cfg.ConfigError, match=problem.replace(".", r"\.")):
        _config(text)


# --- the supervisor against the control stand-in ---------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def spec(sock_dir: Path) -> mps.MpsDaemonSpec:
    (s,) = _specs(f"flags: {{mpsRoot: {sock_dir}/mps}}\n{MPS4}")
    return s


Parts = tuple[MpsSupervisor, fake.FakeBackend, health.HealthBoard, AgentMetrics, Clock]


@pytest.fixture
def supervisor(sock_dir: Path) -> object:
    made: list[MpsSupervisor] = []

    def make(binary: str = STUB) -> Parts:
        backend, board, metrics, clock = fake.load_fixture("h100-sxm-8"), health.HealthBoard(), AgentMetrics(), Clock()
        s = MpsSupervisor(backend, board, metrics, binary, clock=clock, check_s=1.0, timeout_s=3.0)
        made.append(s)
        return s, backend, board, metrics, clock

    yield make
    for s in made:
        s.stop()
    kill_mps_daemons(sock_dir)


def _metric(metrics: AgentMetrics, name: str, resource: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"resource": resource})


def test_the_daemon_starts_with_its_environment_and_defaults_before_the_resource_is_released(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec) -> None:
    s, backend, board, metrics, _ = supervisor()
    s.apply((spec,))
    assert board.held() == {spec.resource: "MPS control daemon not started yet"}
    s.sync()
    assert board.held() == {}
    env = json.loads((Path(spec.log_dir) / "stub-env.json").read_text())
    assert {k: env[k] for k in spec.env()} == spec.env()
    assert _commands(spec) == list(spec.default_commands())
    assert backend.exclusive == dict.fromkeys(spec.gpus, True)
    assert _metric(metrics, "gpufleet_agent_mps_daemon_up", spec.resource) == 1
    assert s.status().down == {} and s.status().managed == (spec.resource,)


def test_a_missing_control_program_holds_the_resource_and_says_which(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec, tmp_path: Path) -> None:
    s, _, board, _, clock = supervisor(str(tmp_path / "no-such-mps-control"))
    s.apply((spec,))
    s.sync()
    reason = board.held()[spec.resource]
    assert "no-such-mps-control not found" in reason and "attempt 1, next in 0 s" in reason
    assert s.status().down == {spec.resource: reason}
    s.sync()
    assert "attempt 2, next in 1 s" in board.held()[spec.resource]
    s.sync()  # within the backoff: no new attempt
    assert "attempt 2" in board.held()[spec.resource]
    clock.now += 1
    s.sync()
    assert "attempt 3, next in 2 s" in board.held()[spec.resource]


def test_a_refused_compute_mode_keeps_the_daemon_down_and_names_the_way_out(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    s, backend, board, _, _ = supervisor()

    def refuse(gpu: str, exclusive: bool) -> None:
        raise BackendError("nvmlDeviceSetComputeMode failed: Insufficient Permissions")

    monkeypatch.setattr(backend, "set_exclusive_process", refuse)
    s.apply((spec,))
    s.sync()
    reason = board.held()[spec.resource]
    assert f"cannot put {spec.gpus[0]} in EXCLUSIVE_PROCESS compute mode" in reason
    assert "Insufficient Permissions" in reason and "gpufleet.mps.exclusiveProcess: false" in reason
    assert not (Path(spec.pipe_dir) / "nvidia-cuda-mps-control.pid").exists()  # no daemon without it


def test_a_killed_daemon_holds_the_resource_until_it_is_restarted_with_its_defaults(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec) -> None:
    s, _, board, metrics, clock = supervisor()
    s.apply((spec,))
    s.sync()
    first = MpsControl(STUB, spec).daemon_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    _wait(lambda: not _alive(first), "the daemon to die")
    clock.now += 0.5
    s.sync()  # before the next check: not noticed yet
    assert board.held() == {}
    clock.now += 0.5
    s.sync()  # the check fails and the restart (at once) succeeds in the same cycle
    second = MpsControl(STUB, spec).daemon_pid()
    assert second not in (None, first)
    assert board.held() == {}
    assert _metric(metrics, "gpufleet_agent_mps_daemon_restarts_total", spec.resource) == 1
    assert _commands(spec)[-len(spec.default_commands()):] == list(spec.default_commands())
    assert _commands(spec).count(spec.default_commands()[-1]) == 2  # sent again to the new daemon


def test_a_daemon_that_cannot_come_back_stays_held_and_is_retried_with_backoff(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, _, board, metrics, clock = supervisor()
    s.apply((spec,))
    s.sync()
    pid = MpsControl(STUB, spec).daemon_pid()
    assert pid is not None
    broken = tmp_path / "broken-mps-control"
    broken.write_text("#!/bin/sh\necho 'cannot open the GPU' >&2\nexit 3\n")
    broken.chmod(0o755)
    s.apply((spec,), str(broken))
    os.kill(pid, signal.SIGKILL)
    _wait(lambda: not _alive(pid), "the daemon to die")
    clock.now += 1
    s.sync()
    reason = board.held()[spec.resource]
    assert "`start (-d)` failed (exit 3): cannot open the GPU" in reason
    assert _metric(metrics, "gpufleet_agent_mps_daemon_up", spec.resource) != 1
    s.apply((spec,), STUB)
    clock.now += 60
    s.sync()
    assert board.held() == {}


def test_retiring_waits_for_attached_clients_then_quits_and_restores_the_compute_mode(
        supervisor: Callable[..., Parts], spec: mps.MpsDaemonSpec) -> None:
    s, backend, board, _, _ = supervisor()
    s.apply((spec,))
    s.sync()
    pid = MpsControl(STUB, spec).daemon_pid()
    assert pid is not None
    clients = Path(spec.pipe_dir) / "stub-clients"
    clients.write_text("4242 4343")
    s.apply(())
    s.sync()
    assert _alive(pid) and "quit" not in _commands(spec)
    assert s.status().retiring == {
        spec.resource: "waiting for 2 attached client(s) (pids 4242, 4343) to exit"}
    assert board.held() == {}
    clients.write_text("")
    s.sync()
    assert _commands(spec)[-1] == "quit"
    _wait(lambda: not _alive(pid), "the daemon to quit")
    assert s.status().retiring == {} and backend.exclusive == dict.fromkeys(spec.gpus, False)


# --- the agent ---------------------------------------------------------------------------------------

def _mps_config(root: Path, extra: str = "") -> str:
    return f"flags: {{mpsRoot: {root}}}\n{MPS4}\n{extra}"


def _health(update: object) -> set[str]:
    return {d.health for d in update.devices}  # type: ignore[attr-defined]


def test_the_agent_advertises_mps_replicas_only_with_a_daemon_answering(
        kubelet: FakeKubelet, make_agent: AgentFactory, mps_root: Path) -> None:
    agent, backend, api = make_agent(config=_mps_config(mps_root), mps_check_s=0.1)
    (spec,) = _specs(_mps_config(mps_root))
    ep = kubelet.endpoint("nvidia.com/gpu")
    first = ep.next_list()
    assert len(first.devices) == 32 and _health(first) == {"Healthy"}
    assert _commands(spec)[-len(spec.default_commands()):] == list(spec.default_commands())
    condition = api.node.conditions[MPS_CONDITION_TYPE]
    assert (condition.status, condition.reason) == ("False", "MpsDaemonsReady")
    assert api.node.labels["nvidia.com/mps.capable"] == "true"


def test_killing_the_daemon_flips_the_condition_and_stops_new_mps_allocations_until_it_is_back(
        kubelet: FakeKubelet, make_agent: AgentFactory, mps_root: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, _, api = make_agent(config=_mps_config(mps_root), mps_check_s=0.1)
    (spec,) = _specs(_mps_config(mps_root))
    ep = kubelet.endpoint("nvidia.com/gpu")
    ids = [d.ID for d in ep.next_list().devices]
    # A control program that fails to start keeps the daemon down long enough to look at.
    broken_dir = tmp_path / "broken"
    broken_dir.mkdir()
    broken = broken_dir / "nvidia-cuda-mps-control"
    broken.write_text(f"#!/bin/sh\n[ \"$1\" = -d ] && {{ echo 'stub: start refused' >&2; exit 1; }}\nexec {STUB}\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken_dir}{os.pathsep}{os.environ['PATH']}")
    pid = MpsControl(STUB, spec).daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    update = ep.wait_list(lambda u: _health(u) == {"Unhealthy"})
    assert len(update.devices) == 32
    devices = {"resource": "nvidia.com/gpu", "health": "Unhealthy"}
    _wait(lambda: agent.metrics.registry.get_sample_value("gpufleet_agent_devices", devices) == 32,
          "the device metric to count the held replicas Unhealthy")
    with pytest.raises(Exception) as info:
        ep.allocate([ids[0]])
    assert "no new MPS clients until the MPS control daemon of nvidia.com/gpu is back" in str(info.value)
    _wait(lambda: api.node.conditions[MPS_CONDITION_TYPE].status == "True",
          "the GpuMpsDaemonDown condition")
    message = api.node.conditions[MPS_CONDITION_TYPE].message
    assert message.startswith("nvidia.com/gpu: MPS control daemon") and "start refused" in message

    monkeypatch.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    ep.wait_list(lambda u: _health(u) == {"Healthy"}, timeout_s=WAIT_S + 2)  # backoff 1 s after the failure
    assert ep.allocate([ids[0]]).container_responses[0].envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    _wait(lambda: api.node.conditions[MPS_CONDITION_TYPE].status == "False",
          "the condition to clear")
    assert agent.metrics.registry.get_sample_value(
        "gpufleet_agent_mps_daemon_restarts_total", {"resource": "nvidia.com/gpu"}) == 1


def test_without_mps_the_condition_says_the_agent_runs_no_daemon(
        kubelet: FakeKubelet, make_agent: AgentFactory) -> None:
    _, _, api = make_agent()
    condition = api.node.conditions[MPS_CONDITION_TYPE]
    assert (condition.status, condition.reason) == ("False", "MpsNotManaged")
    assert NODE  # the node the fake API wrote
