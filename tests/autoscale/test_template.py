"""NodeTemplate: validation names the field; the node it builds is what the scheduler will see."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate
from gpufleet.model import GPU_PRODUCT_LABEL, ModelError

GOOD: dict[str, Any] = dict(name="h100-x8", cpu_milli=128_000, mem_mib=1024 * 1024, price_per_hour=98.0,
                            gpu_model="H100-80GB", gpus=8, gpu_mem_mib=80 * 1024)

BAD = [
    ("0 GPUs with a GPU model is rejected", dict(gpus=0), "gpus"),
    ("GPUs without a GPU model are rejected", dict(gpu_model=None), "gpu_model"),
    ("an unknown MIG profile is rejected", dict(mig_layout=("9g.99gb",)), "mig_layout"),
    ("a MIG layout larger than one GPU is rejected", dict(mig_layout=("7g.80gb", "1g.10gb")), "mig_layout"),
    ("a MIG layout on a GPU without MIG is rejected", dict(gpu_model="L40S", mig_layout=("1g.10gb",)), "mig_layout"),
    ("a negative price is rejected", dict(price_per_hour=-1.0), "price_per_hour"),
    ("an infinite price is rejected", dict(price_per_hour=float("inf")), "price_per_hour"),
    ("a negative start delay is rejected", dict(start_delay_s=-5.0), "start_delay_s"),
    ("negative CPU is rejected", dict(cpu_milli=-1), "cpu_milli"),
    ("a float memory size is rejected", dict(mem_mib=1.5), "mem_mib"),
    ("a GPU template without GPU memory is rejected", dict(gpu_mem_mib=0), "gpu_mem_mib"),
    ("a negative pool limit is rejected", dict(max_nodes=-1), "max_nodes"),
    ("a boolean GPU limit is rejected", dict(max_gpus=True), "max_gpus"),
    ("zero max pods is rejected", dict(max_pods=0), "max_pods"),
    ("an empty name is rejected", dict(name=""), "name"),
]


@pytest.mark.parametrize(("change", "field"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_template_input_is_a_model_error_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelError) as err:
        NodeTemplate(**{**GOOD, **change})
    assert err.value.where.endswith(f": {field}"), err.value


def test_a_cpu_only_template_is_valid_and_builds_a_node_without_gpus() -> None:
    node = NodeTemplate("cpu", 32_000, 128 * 1024, 1.5).node_info("n1")
    assert node.gpus == () and node.labels[TEMPLATE_LABEL] == "cpu" and GPU_PRODUCT_LABEL not in node.labels


def test_the_node_carries_the_templates_gpus_mig_layout_labels_and_taints() -> None:
    from gpufleet.model import Taint
    t = NodeTemplate(**{**GOOD, "gpus": 2, "mig_layout": ("3g.40gb", "3g.40gb"), "labels": {"pool": "a"},
                        "taints": (Taint("dedicated", "ml"),)})
    node = t.node_info("planned-1")
    assert node.name == "planned-1" and node.cpu_milli == 128_000
    assert [g.mig_slices for g in node.gpus] == [("3g.40gb", "3g.40gb")] * 2
    assert {g.uuid for g in node.gpus} == {"GPU-planned-1-0", "GPU-planned-1-1"}
    assert dict(node.labels) == {"pool": "a", TEMPLATE_LABEL: "h100-x8", GPU_PRODUCT_LABEL: "H100-80GB"}
    assert node.taints == (Taint("dedicated", "ml"),)
