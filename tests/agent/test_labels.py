"""GPU feature-discovery labels: GFD's names and values, and the per-fixture tables in docs/labels.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpufleet.agent import configsource, fake, inventory
from gpufleet.agent.labels import gfd_labels

DOC = Path(__file__).resolve().parents[2] / "docs" / "labels.md"

CASES = [
    ("h100-sxm-8", ""),
    ("h200-sxm-8", ""),
    ("h100-nvl-pairs", "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"),
    ("h100-sxm-8", "sharing:\n  mps:\n    renameByDefault: true\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"),
    ("a100-mig", ""),
    ("a100-mig", "flags: {migStrategy: mixed}\n"),
    ("a100-mig", "flags: {migStrategy: single}\n"),
]
CASE_IDS = ["H100 SXM board", "H200 SXM board", "H100 NVL pairs with time slicing", "H100 with renamed MPS",
            "A100 in MIG mode under strategy none", "A100 in MIG mode under strategy mixed",
            "A100 with mixed layouts under strategy single"]


def labels_for(fixture: str, config: str) -> dict[str, str]:
    backend = fake.load_fixture(fixture)
    return gfd_labels(inventory.inventory(backend.system(), backend.devices()), configsource.load_text(config, "c"))


def render(fixture: str, config: str) -> str:
    """The markdown block docs/labels.md shows for one case (the test checks the doc holds it)."""
    rows = "".join(f"| `{k}` | `{v}` |\n" for k, v in sorted(labels_for(fixture, config).items()))
    shown = config.rstrip() or "# (empty: NVIDIA's defaults)"
    return f"Fixture `{fixture}`, config:\n\n```yaml\n{shown}\n```\n\n| label | value |\n|---|---|\n{rows}"


@pytest.mark.parametrize("fixture, config", CASES, ids=CASE_IDS)
def test_docs_label_table_matches_the_computed_labels(fixture: str, config: str) -> None:
    assert render(fixture, config) in DOC.read_text(), "regenerate docs/labels.md (see its last section)"


def test_a_board_gets_gfd_product_count_memory_and_architecture() -> None:
    labels = labels_for("h100-sxm-8", "")
    assert {k: labels[k] for k in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
                                   "nvidia.com/gpu.family", "nvidia.com/gpu.compute.major",
                                   "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy")} == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}
    assert "nvidia.com/mig.strategy" not in labels and "nvidia.com/gfd.timestamp" not in labels


def test_driver_and_cuda_versions_come_in_new_and_deprecated_names() -> None:
    labels = labels_for("h100-sxm-8", "")
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54.15"
    assert labels["nvidia.com/cuda.driver-version.revision"] == labels["nvidia.com/cuda.driver.rev"] == "15"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"


def test_replicated_gpus_carry_the_shared_suffix_unless_renamed() -> None:
    shared = labels_for(*CASES[2])
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-NVL-SHARED"
    assert (shared["nvidia.com/gpu.replicas"], shared["nvidia.com/gpu.sharing-strategy"]) == ("4", "time-slicing")
    renamed = labels_for(*CASES[3])
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert renamed["nvidia.com/mps.capable"] == "true"


def test_mixed_strategy_labels_each_profile() -> None:
    labels = labels_for(*CASES[5])
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "9"
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/mig-3g.20gb.multiprocessors"] == "42"
    assert labels["nvidia.com/mig-7g.40gb.engines.jpeg"] == "1"


def test_single_strategy_overrides_the_gpu_labels_with_the_mig_device() -> None:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    inv = dataclasses.replace(inv, gpus=(inv.gpus[1],))
    labels = gfd_labels(inv, configsource.load_text("flags: {migStrategy: single}", "c"))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("7", "4864")
    assert labels["nvidia.com/gpu.slices.gi"] == "1"


def test_single_strategy_on_mixed_layouts_reports_an_invalid_product() -> None:
    labels = labels_for(*CASES[6])
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == "0"


def test_a_node_without_gpus_gets_no_labels() -> None:
    backend = fake.load_fixture("h100-sxm-8")
    inv = dataclasses.replace(inventory.inventory(backend.system(), backend.devices()), gpus=())
    assert gfd_labels(inv, configsource.load_text("", "c")) == {}
