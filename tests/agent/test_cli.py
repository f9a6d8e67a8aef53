"""`gpufleet agent ...` end to end: output, one-line errors, and `run` serving a kubelet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpufleet.cli.main import main

from .kubelet import FakeKubelet


def test_inventory_json_prints_what_discovery_sees(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "inventory", "--json", "--fake", "a100-mig"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["gpus"]) == 4 and data["gpus"][2]["mig"][0]["profile"] == "7g.40gb"


def test_inventory_table_has_a_line_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "inventory", "--fake", "h100-nvl-pairs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and "nvlink=nvl1" in lines[-1]


def test_inventory_table_says_what_is_unknown_in_words(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """As on the H100 VM of docs/hardware.md: no DMI product name, no NUMA node (sysfs -1)."""
    import yaml
    from gpufleet.agent import fake
    data = yaml.safe_load(Path(fake.__file__).with_name("fixtures").joinpath("h100-nvl-pairs.yaml").read_text())
    del data["system"]["machine"]
    for gpu in data["gpus"]:
        gpu.pop("numaNode")
    fixture = tmp_path / "vm.yaml"
    fixture.write_text(yaml.safe_dump(data))
    assert main(["agent", "inventory", "--fake", str(fixture)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("machine unknown (no DMI product name)")
    assert " numa=- " in lines[1] and "None" not in "".join(lines)


def test_labels_prints_labels_annotation_and_capacity(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("gpufleet: {fractions: true}")
    assert main(["agent", "labels", "--fake", "h200-sxm-8", "--config", str(config)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert out["capacity"] == {"gpufleet.io/gpu-memory": 8 * 143771}
    assert "gpufleet.io/gpu-inventory" in out["annotations"]


@pytest.mark.parametrize("argv, message", [
    (["agent", "inventory"], "no NVIDIA driver on this machine"),
    (["agent", "inventory", "--fake", "b200"], "no such fixture"),
    (["agent", "run", "--node-name", "n", "--kubelet-dir", "/tmp", "--kubeconfig", "/nonexistent/k"],
     "kubeconfig /nonexistent/k: no such file"),
    (["agent", "run", "--kubelet-dir", "/nonexistent"], "--node-name is required"),
    (["agent", "labels", "--fake", "a100-mig", "--node-label", "novalue"], "expected KEY=VALUE"),
    (["agent", "resourceslices", "--fake", "a100-mig"], "--node-name is required"),
    (["agent", "resourceslices", "--fake", "a100-mig", "--node-name", "n", "--generation", "0"],
     "--generation 0: must be 1 or more"),
], ids=["no GPU driver", "an unknown fixture", "a kubeconfig that does not exist",
        "no node name", "a malformed node label", "slices without a node name", "generation 0"])
def test_user_mistakes_are_one_line_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_resourceslices_prints_the_pool_for_kubectl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "resourceslices", "--fake", "h100-sxm-8", "--node-name", "n1", "--mig", "dynamic"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ResourceSlice"] * 5
    assert {d["spec"]["pool"]["resourceSliceCount"] for d in docs} == {5}
    assert main(["agent", "resourceslices", "--fake", "h100-sxm-8", "--node-name", "n1", "--json", "--memory-shares"]) == 0
    (only,) = json.loads(capsys.readouterr().out)
    assert all(d["allowMultipleAllocations"] for d in only["spec"]["devices"])


def test_labels_reports_a_config_the_node_cannot_serve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("flags: {migStrategy: single}")
    assert main(["agent", "labels", "--fake", "a100-mig", "--config", str(config)]) == 2
    assert "needs every GPU in MIG mode" in capsys.readouterr().err


def test_run_serves_a_kubelet_writes_node_state_and_stops_on_sigterm(
        kubelet: FakeKubelet, sock_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "node.json"
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "agent", "run", "--fake", "h100-sxm-8",
           "--kubelet-dir", str(sock_dir), "--node-name", "n1", "--metrics-port", "0", "--state-file", str(state)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    try:
        assert len(kubelet.endpoint("nvidia.com/gpu", timeout_s=15.0).next_list().devices) == 8
        deadline = time.monotonic() + 5.0
        while not state.exists() and time.monotonic() < deadline:  # written just after registering
            time.sleep(0.02)
        assert json.loads(state.read_text())["labels"]["nvidia.com/gpu.count"] == "8"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "serving nvidia.com/gpu for node n1" in err


def test_run_inside_a_pod_without_a_kubeconfig_uses_the_in_cluster_config(
        sock_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    assert main(["agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir", str(sock_dir), "--node-name", "n1"]) == 2
    assert "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set" in \
        capsys.readouterr().err
    assert not list(sock_dir.iterdir()), "nothing was served"


MIG_GPU = "GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a01"
"""a100-mig's first GPU: 2g.10gb@0, 1g.5gb@2, 1g.5gb@3, 3g.20gb@4."""


def test_mig_layout_prints_the_change_and_makes_it_only_with_apply(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"generation": 1, "gpus": {MIG_GPU: ["3g.20gb@0", "3g.20gb@4"]}}))
    assert main(["agent", "mig-layout", str(layout), "--fake", "a100-mig"]) == 0
    assert capsys.readouterr().out == (
        f"GPU {MIG_GPU}: destroy 2g.10gb@0 (MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a02); "
        "destroy 1g.5gb@2 (MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a03); "
        "destroy 1g.5gb@3 (MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a04); create 3g.20gb@0\n")
    assert main(["agent", "mig-layout", str(layout), "--fake", "a100-mig", "--apply"]) == 0
    assert capsys.readouterr().out.endswith(f"GPU {MIG_GPU}: applied\n")


@pytest.mark.parametrize("layout,code,message", [
    ('{"generation": 1, "gpus": {"GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a04": ["7g.40gb@0"]}}', 1,
     "error: GPU GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a04: MIG mode is off"),
    ('{"generation": 1, "gpus": {"GPU-nowhere": ["7g.40gb@0"]}}', 1, "error: GPU GPU-nowhere: not on this node"),
    ('{"generation": 1}', 2, 'gpufleet agent mig-layout: error: annotation gpufleet.io/mig-layout: "gpus" must map'),
    ("no-such-file", 2, "LAYOUT 'no-such-file': not JSON and not a readable file"),
], ids=["MIG off", "an unknown GPU", "a malformed layout", "neither JSON nor a file"])
def test_mig_layout_mistakes_are_one_line_errors(capsys: pytest.CaptureFixture[str], layout: str, code: int,
                                                 message: str) -> None:
    assert main(["agent", "mig-layout", layout, "--fake", "a100-mig"]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
