"""The node agent against the fake API server: the runtime in process, and `gpufleet agent run` as a process."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import lightkube
import pytest

from gpufleet.agent import configsource, fake
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.cli.main import main
from gpufleet.model import annotations as ann

from .apiserver import FakeApiServer
from .conftest import NODE, VirtualTime, make_api

GPU = "GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d01"  # the first GPU of the h100-sxm-8 fixture
FOREIGN_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _condition(node: dict[str, Any]) -> dict[str, str]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "GpuUnhealthy")


def test_the_agent_labels_its_node_and_reports_an_xid_as_condition_and_taint(
        server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime, sock_dir: Path, tmp_path: Path) -> None:
    server.add_node(NODE, labels={"kubernetes.io/hostname": NODE}, taints=[FOREIGN_TAINT], conditions=[READY])
    (tmp_path / "config.yaml").write_text("")
    backend = fake.load_fixture("h100-sxm-8")
    api = AgentNodeApi(make_api(client, vtime))
    agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml", None, api.node_labels),
                  AgentOptions(NODE, sock_dir, metrics_port=0, health_poll_s=0.05))
    agent.start()
    try:
        node = server.node(NODE)  # start() writes the node before it returns
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and labels["nvidia.com/gpu.count"] == "8"
        assert labels["kubernetes.io/hostname"] == NODE
        inventory = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
        assert len(inventory) == 8 and all(g.healthy for g in inventory)
        assert _condition(node)["status"] == "False" and node["spec"]["taints"] == [FOREIGN_TAINT]

        backend.inject_xid(GPU, 79)  # fallen off the bus
        _wait_for(lambda: _condition(server.node(NODE))["status"] == "True", "the GpuUnhealthy condition")
        node = server.node(NODE)
        assert GPU in _condition(node)["message"]
        assert node["spec"]["taints"] == [FOREIGN_TAINT, {"key": f"unhealthy.gpufleet.io/{GPU}", "value": "xid-79",
                                                          "effect": "PreferNoSchedule"}]
        assert READY in node["status"]["conditions"]
        unhealthy = [g.uuid for g in ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
                     if not g.healthy]
        assert unhealthy == [GPU]
    finally:
        agent.stop()


def test_a_node_write_failing_during_an_outage_is_logged_once(
        server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime, sock_dir: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "config.yaml").write_text("")
    backend = fake.load_fixture("h100-sxm-8")
    agent = Agent(lambda: backend, AgentNodeApi(make_api(client, vtime)), configsource.ConfigSource(tmp_path / "config.yaml"),
                  AgentOptions(NODE, sock_dir, metrics_port=0, health_poll_s=0.05))
    server.fail(500, times=1000, method="GET", path=f"/api/v1/nodes/{NODE}")
    with caplog.at_level(logging.WARNING):
        agent.start()  # the supervisor then asks to write the node every 0.25 s
        try:
            time.sleep(1.0)
        finally:
            agent.stop()
    assert server.count("GET", f"/api/v1/nodes/{NODE}") == 4, "one call's retries, then the cool-down"
    assert [r.name for r in caplog.records] == ["gpufleet.kube.node_api", "gpufleet.agent.runtime"]


def _run_agent(kubeconfig: Path, sock_dir: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir",
           str(sock_dir), "--node-name", NODE, "--metrics-port", "0", "--kubeconfig", str(kubeconfig), *extra]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}  # loopback only
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "PYTHONPATH": str(SRC)})


def test_agent_run_with_a_kubeconfig_writes_the_node_and_stops_on_sigterm(
        server: FakeApiServer, kubeconfig: Path, sock_dir: Path) -> None:
    proc = _run_agent(kubeconfig, sock_dir)
    try:
        _wait_for(lambda: "nvidia.com/gpu.count" in server.node(NODE)["metadata"]["labels"] or proc.poll() is not None,
                  "the node's labels", timeout_s=15.0)
        node = server.node(NODE)
        assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
        assert ann.INVENTORY_ANNOTATION in node["metadata"]["annotations"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert f"serving nvidia.com/gpu for node {NODE}" in err


@pytest.mark.parametrize("setup, argv, message", [
    (lambda s: s.fail(403, message='nodes "n1" is forbidden'), [],
     'get node n1: 403 Forbidden: nodes "n1" is forbidden (the agent\'s service account needs'),
    (lambda s: None, ["--node-name", "n9"], 'get node n9: 404 NotFound: nodes "n9" not found'),
    (lambda s: None, ["--state-file", "node.json"], "--kubeconfig reads and writes the node through the API; "
                                                    "--state-file is for running without it"),
], ids=["missing RBAC", "a node name the cluster does not know", "an offline option with a kubeconfig"])
def test_run_mistakes_with_a_kubeconfig_are_one_line_errors(
        server: FakeApiServer, kubeconfig: Path, sock_dir: Path, capsys: pytest.CaptureFixture[str],
        setup: Callable[[FakeApiServer], None], argv: list[str], message: str) -> None:
    setup(server)
    code = main(["agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir", str(sock_dir), "--node-name", NODE,
                 "--kubeconfig", str(kubeconfig), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not list(sock_dir.iterdir()), "nothing was served"


def test_inside_a_pod_without_a_kubeconfig_the_in_cluster_config_is_used(
        sock_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert main(["agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir", str(sock_dir), "--node-name", NODE]) == 2
    assert "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set" in \
        capsys.readouterr().err
