"""`gpufleet dev-cluster`: serves N GPU nodes, writes a kubeconfig, stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from gpufleet.cli.main import main

CLI = "import sys; from gpufleet.cli.main import main; sys.exit(main())"


def test_dev_cluster_serves_nodes_writes_a_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "dev.kubeconfig"
    proc = subprocess.Popen([sys.executable, "-c", CLI, "dev-cluster", "--nodes", "4",
                             "--kubeconfig", str(config), "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not config.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no kubeconfig written"
            time.sleep(0.05)
        server = yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"]
        with urllib.request.urlopen(f"{server}/api/v1/nodes") as resp:
            nodes = json.loads(resp.read())["items"]
        assert len(nodes) == 4
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert f"kubectl --kubeconfig {config} get nodes" in out
        assert "stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_negative_node_count_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev-cluster", "--nodes", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "gpufleet dev-cluster: error: --nodes must be 0 or more, got -1"
