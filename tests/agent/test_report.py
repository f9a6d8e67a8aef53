"""What the agent writes on its node: labels, inventory annotation, condition, taints, capacity."""

from __future__ import annotations

from gpufleet.agent import configsource, fake, inventory, xids
from gpufleet.agent.health import Fault
from gpufleet.agent.kube import FakeNodeApi, NodeState
from gpufleet.agent.report import CONDITION_TYPE, TAINT_PREFIX, node_patch
from gpufleet.model import TaintEffect
from gpufleet.model import annotations as ann

H100 = [f"GPU-1d7a2c39-5c5e-4a0b-8f6e-2b1f0c3a9d0{i}" for i in range(1, 9)]


def _inv() -> inventory.NodeGpuInventory:
    backend = fake.load_fixture("h100-sxm-8")
    return inventory.inventory(backend.system(), backend.devices())


def test_a_healthy_node_gets_labels_inventory_and_a_false_condition_without_taints() -> None:
    node = NodeState()
    node.apply(node_patch(_inv(), configsource.load_text("", "c"), {}))
    assert node.labels["nvidia.com/gpu.count"] == "8"
    gpus = ann.decode_inventory(node.annotations[ann.INVENTORY_ANNOTATION])
    assert all(g.healthy for g in gpus) and gpus[0].nvlink_domain == "nvl0"
    assert node.conditions[CONDITION_TYPE].status == "False"
    assert node.taints == [] and ann.GPU_MEMORY_RESOURCE not in node.capacity


def test_a_faulty_device_is_named_in_the_condition_taint_and_inventory() -> None:
    fault = Fault(H100[2], xids.FaultClass.RESET, "xid-48", 0.0)
    node = NodeState()
    node.apply(node_patch(_inv(), configsource.load_text("", "c"), {H100[2]: fault}))
    condition = node.conditions[CONDITION_TYPE]
    assert condition.status == "True" and f"{H100[2]}: xid-48 (reset)" in condition.message
    assert [(t.key, t.value, t.effect) for t in node.taints] == [
        (TAINT_PREFIX + H100[2], "xid-48", TaintEffect.PREFER_NO_SCHEDULE)]
    healthy = [g.healthy for g in ann.decode_inventory(node.annotations[ann.INVENTORY_ANNOTATION])]
    assert healthy == [True, True, False, True, True, True, True, True]


def test_taint_effect_is_configurable_and_none_means_no_taint() -> None:
    fault = {H100[0]: Fault(H100[0], xids.FaultClass.NODE, "xid-79", 0.0)}
    patch = node_patch(_inv(), configsource.load_text("gpufleet: {health: {taintEffect: NoSchedule}}", "c"), fault)
    assert patch.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert node_patch(_inv(), configsource.load_text("gpufleet: {health: {taintEffect: none}}", "c"), fault).taints == ()


def test_labels_the_agent_no_longer_computes_are_removed_and_foreign_labels_kept() -> None:
    api = FakeNodeApi(labels={"team": "ml"})
    mixed = configsource.load_text("flags: {migStrategy: single}", "c")
    first = node_patch(_inv(), mixed, {})
    api.patch_node(first)
    assert api.node.labels["nvidia.com/mig.strategy"] == "single"
    owned = frozenset(k for k, v in first.labels.items() if v is not None)
    api.patch_node(node_patch(_inv(), configsource.load_text("", "c"), {}, owned))
    assert "nvidia.com/mig.strategy" not in api.node.labels and api.node.labels["team"] == "ml"


def test_fractions_advertise_gpu_memory_capacity_in_mib() -> None:
    patch = node_patch(_inv(), configsource.load_text("gpufleet: {fractions: true}", "c"), {})
    assert patch.capacity == {ann.GPU_MEMORY_RESOURCE: 8 * 81559}


def test_a_faulty_mig_device_reports_its_gpu_unhealthy_in_the_inventory() -> None:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    mig = inv.gpus[1].mig_slices[3].uuid
    patch = node_patch(inv, configsource.load_text("flags: {migStrategy: mixed}", "c"),
                       {mig: Fault(mig, xids.FaultClass.RESET, "xid-48", 0.0)})
    text = patch.annotations[ann.INVENTORY_ANNOTATION]
    assert text is not None
    assert [g.healthy for g in ann.decode_inventory(text)] == [True, False, True, True]
    assert patch.taints[0].key == TAINT_PREFIX + mig
