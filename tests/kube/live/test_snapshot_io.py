"""Snapshot dumps: a round trip through JSON, and `gpufleet snapshot replay` on one (a dump from
the real control plane: tests/live/test_snapshot_live.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.kube import snapshot_io
from gpufleet.model import Gpu, GpuUuid, NodeInfo, NodeName, Placement, PodGroup, PodUid, Queue
from gpufleet.testing import make_node, make_pod


def sample() -> snapshot_io.Dump:
    nodes = (make_node("n1").gpus(4, model="NVIDIA-A100-SXM4-80GB").label("zone", "a").taint("gpu").build(),
             make_node("n2").gpus(2, model="NVIDIA-H100-80GB-HBM3").build())
    running = (Placement(PodUid("r1"), NodeName("n1"), 1000, 1024, (0, 1), 1000, 81920, pod_group="ns/g"),)
    pending = (make_pod("p1").gpus(2).build(), make_pod("p2").fraction(300).affinity("zone", "In", "a").tolerate("gpu").build(), make_pod("p3").gpus(8).build())
    return snapshot_io.Dump(nodes, running, (PodGroup("g", 2, "ns", required_topology="topology.gpufleet.io/rack"),), (Queue("team", weight=2.0, limit={"gpu": 4000}), Queue("own", namespaces=frozenset({"a", "b"}))),
                            pending, {"ns/bad": "pod ns/bad: nvidia.com/gpu: '1.5' is not a whole number of units"})


def test_round_trip_is_lossless() -> None:
    d = sample()
    again = snapshot_io.loads(snapshot_io.dumps(d))
    assert again == d


def test_mig_mode_and_mig_uuids_survive_a_round_trip() -> None:
    """A GPU in MIG mode with nothing carved (being repartitioned) must not come back as a whole GPU."""
    empty = Gpu(GpuUuid("GPU-e"), "NVIDIA-A100-SXM4-80GB", 81920, 0, mig_mode=True)
    carved = Gpu(GpuUuid("GPU-c"), "NVIDIA-A100-SXM4-80GB", 81920, 1, mig_slices=("3g.40gb",), mig_uuids=("MIG-1",))
    d = snapshot_io.Dump((NodeInfo(NodeName("n"), 1000, 1024, gpus=(empty, carved)),), (), (), (), (), {})
    assert snapshot_io.loads(snapshot_io.dumps(d)) == d


def test_a_malformed_dump_is_one_clear_error() -> None:
    with pytest.raises(Exception, match="snap.json: not a gpufleet snapshot"):
        snapshot_io.loads('{"nodes": []}', "snap.json")


def test_replay_prints_binds_and_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "snap.json"
    f.write_text(snapshot_io.dumps(sample()))
    assert main(["snapshot", "replay", str(f), "--profile", "default"]) == 0
    out = capsys.readouterr().out
    assert "2 nodes, 1 running, 3 pending" in out and "2 bound, 1 unschedulable" in out
    assert "0/2 nodes are available" in out and "ns/bad" in out

