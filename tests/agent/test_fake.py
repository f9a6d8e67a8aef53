"""The fixture-driven backend: shipped fixtures, bad fixtures, injected events."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent import fake
from gpufleet.model import ModelError


def test_the_shipped_fixtures_cover_the_boards_the_agent_is_tested_on() -> None:
    assert fake.fixture_names() == ["a100-mig", "h100-nvl-pairs", "h100-sxm-8", "h200-sxm-8"]


@pytest.mark.parametrize("fixture, count, name", [
    ("h100-sxm-8", 8, "NVIDIA H100 80GB HBM3"), ("h200-sxm-8", 8, "NVIDIA H200"),
    ("h100-nvl-pairs", 4, "NVIDIA H100 NVL"), ("a100-mig", 4, "NVIDIA A100-SXM4-40GB"),
], ids=["eight H100 SXM", "eight H200 SXM", "four H100 NVL cards", "four A100 40GB"])
def test_fixture_loads_its_gpus(fixture: str, count: int, name: str) -> None:
    gpus = fake.load_fixture(fixture).devices()
    assert len(gpus) == count and {g.name for g in gpus} == {name}
    assert [g.index for g in gpus] == list(range(count))


def test_unknown_fixture_names_the_shipped_ones() -> None:
    with pytest.raises(ModelError, match="shipped ones: a100-mig"):
        fake.load_fixture("b200")


@pytest.mark.parametrize("text, problem", [
    ("system: [", "is not valid YAML"),
    ("system: {driverVersion: '1.2'}\ngpus: []", "malformed"),
    ("system: {driverVersion: '1', cudaDriverVersion: 1}\nboard: {name: x, memMiB: 1, pciDeviceId: 1, "
     "compute: [9, 0]}\ngpus: [{uuid: GPU-1, busId: b}]\nnvlink: [[0, 1]]", "beyond the 1 GPUs"),
], ids=["broken YAML", "a missing field", "an NVLink group naming a missing GPU"])
def test_bad_fixture_file_is_a_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ModelError, match=problem):
        fake.load_fixture(str(path))


def test_injected_events_come_out_in_order_and_then_the_wait_times_out() -> None:
    backend = fake.load_fixture("h100-sxm-8")
    backend.inject_xid("GPU-a", 79)
    backend.inject_double_bit_ecc("GPU-b")
    backend.inject_row_remap_failure("GPU-c")
    backend.inject_lost()
    kinds = [backend.wait_event(0.01) for _ in range(4)]
    assert [(e.kind, e.gpu_uuid) for e in kinds if e] == [
        (dev.EventKind.XID, "GPU-a"), (dev.EventKind.DOUBLE_BIT_ECC, "GPU-b"),
        (dev.EventKind.ROW_REMAP_FAILURE, "GPU-c"), (dev.EventKind.LOST, None)]
    assert backend.wait_event(0.01) is None
