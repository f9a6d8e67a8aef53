"""`gpufleet dev-cluster`: the real control plane with N KWOK GPU nodes, a kubeconfig, a clean stop."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.kube import config as kube_config
from gpufleet.testing.cluster import binaries

CLI = "import sys; from gpufleet.cli.main import main; sys.exit(main())"


def test_dev_cluster_serves_nodes_writes_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "dev.kubeconfig"
    proc = subprocess.Popen([sys.executable, "-c", CLI, "dev-cluster", "--nodes", "4", "--kubeconfig", str(kubeconfig),
                             "--seed", "3", "--dir", str(tmp_path / "state")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not kubeconfig.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no kubeconfig written"
            time.sleep(0.2)
        from lightkube.resources.core_v1 import Node
        client = kube_config.connect(kube_config.from_kubeconfig(kubeconfig))
        nodes = list(client.list(Node))
        assert len(nodes) == 4 and all(n.metadata and n.metadata.name.startswith("gpu-node-") for n in nodes)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"kubectl --kubeconfig {kubeconfig} get nodes" in out
        assert "kube-apiserver at https://127.0.0.1:" in out and "kubernetes v1.37" in out
        assert "stopped" in err
        # every component is gone: nothing listens on the API server's port any more
        assert subprocess.run(["pgrep", "-f", str(tmp_path / "state")], capture_output=True).returncode == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_negative_node_count_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-cluster", "--nodes", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "gpufleet dev-cluster: error: --nodes must be 0 or more, got -1"


def test_missing_binaries_say_how_to_build_them(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_KUBE_BIN", str(tmp_path / "empty"))
    assert main(["dev-cluster", "--nodes", "1", "--dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpufleet dev-cluster: error: etcd is not built: expected ")
    assert "`make kube`" in err and "\n" not in err
    assert binaries.bin_dir() == tmp_path / "empty"


def test_a_port_in_use_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert main(["dev-cluster", "--nodes", "0", "--port", str(busy), "--dir", str(tmp_path / "state")]) == 2
    assert capsys.readouterr().err.strip() == f"gpufleet dev-cluster: error: --port {busy}: address already in use"
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "state")], capture_output=True).returncode == 1
