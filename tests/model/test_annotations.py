"""The annotation contract between scheduler and agent: round trips, names and clear errors."""

from __future__ import annotations

import json

import pytest

from gpufleet.model import ModelError, NodeInfo, NodeName
from gpufleet.model import annotations as ann

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"


def _inventory() -> tuple[ann.InventoryGpu, ...]:
    return (
        ann.InventoryGpu("GPU-a", H100, 81559, 0, 0, "nvl0"),
        ann.InventoryGpu("GPU-b", H100, 81559, 1, None, None, healthy=False),
    )


def test_inventory_survives_a_round_trip_through_json() -> None:
    gpus = _inventory()
    assert ann.decode_inventory(ann.encode_inventory(gpus)) == gpus


def test_inventory_json_uses_the_documented_field_names() -> None:
    first = json.loads(ann.encode_inventory(_inventory()))[0]
    assert sorted(first) == sorted(["uuid", "model", "memMiB", "index", "numaNode", "nvlinkDomain",
                                    "healthy", "mig", "migDevices", "migEnabled"])
    carved = ann.InventoryGpu("GPU-m", A100, 40960, 0, mig=("3g.20gb",), mig_devices=("MIG-1",), mig_starts=(4,))
    assert json.loads(ann.encode_inventory((carved,)))[0]["migStarts"] == [4]


def test_mig_placements_and_mig_mode_survive_a_round_trip() -> None:
    gpus = (ann.InventoryGpu("GPU-m", A100, 40960, 0, mig=("3g.20gb", "1g.5gb"), mig_devices=("MIG-1", "MIG-2"),
                             mig_starts=(4, None)),
            ann.InventoryGpu("GPU-e", A100, 40960, 1, mig_enabled=True))
    assert ann.decode_inventory(ann.encode_inventory(gpus)) == gpus
    assert gpus[0].mig_enabled  # implied by its instances


def test_a_mig_assignment_carries_the_instances_uuid_and_reads_without_one() -> None:
    a = ann.GpuAssignment("n1", mig=(ann.MigSliceRef("GPU-m", 2, "MIG-9"), ann.MigSliceRef("GPU-m", 0)))
    assert ann.decode_assignment(ann.encode_assignment(a)) == a
    assert json.loads(ann.encode_assignment(a))["mig"] == [{"gpu": "GPU-m", "slice": 2, "uuid": "MIG-9"},
                                                          {"gpu": "GPU-m", "slice": 0}]
    with pytest.raises(ModelError, match=r"mig\[0\]: uuid"):
        ann.decode_assignment('{"node": "n1", "mig": [{"gpu": "GPU-m", "slice": 0, "uuid": 7}]}')


def test_an_inventory_from_an_agent_before_placements_reads_as_none_known() -> None:
    (gpu,) = ann.decode_inventory('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "mig": ["1g.5gb"], '
                                  '"migDevices": ["MIG-1"]}]')
    assert gpu.mig_starts == () and gpu.mig_enabled


def test_inventory_becomes_scheduler_gpus_that_a_node_accepts() -> None:
    mig_gpu = ann.InventoryGpu("GPU-m", A100, 40960, 0, 1, None, True, ("3g.20gb", "1g.5gb"),
                               ("MIG-1", "MIG-2"))
    gpus = ann.inventory_to_gpus((mig_gpu,))
    node = NodeInfo(NodeName("n1"), 1000, 1024, gpus=gpus)
    assert node.gpus[0].mig_slices == ("3g.20gb", "1g.5gb")
    assert node.gpus[0].numa_node == 1


def test_unknown_numa_node_reads_as_zero_for_the_scheduler() -> None:
    assert ann.inventory_to_gpus(_inventory())[1].numa_node == 0


@pytest.mark.parametrize("text, where", [
    ("{", "gpu-inventory: is not valid JSON"),
    ('{"uuid": "x"}', "gpu-inventory: must be a JSON list"),
    ('[{"uuid": "x", "model": "m", "memMiB": -1, "index": 0}]', "[0]: memMiB"),
    ('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "mig": ["1g.5gb"]}]', "[0]: migDevices"),
    ('[{"model": "m", "memMiB": 1, "index": 0}]', "[0]: uuid"),
    ('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "healthy": "yes"}]', "[0]: healthy"),
    ('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "mig": ["1g.5gb"], "migDevices": ["M"], '
     '"migStarts": [0, 1]}]', "[0]: migStarts"),
    ('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "mig": ["1g.5gb"], "migDevices": ["M"], '
     '"migStarts": ["0"]}]', "[0]: migStarts[0]"),
    ('[{"uuid": "x", "model": "m", "memMiB": 1, "index": 0, "mig": ["1g.5gb"], "migDevices": ["M"], '
     '"migEnabled": false}]', "[0]: migEnabled"),
], ids=["broken JSON is rejected", "an object instead of a list is rejected",
        "negative memory is rejected", "MIG UUIDs must parallel MIG profiles",
        "a GPU without a UUID is rejected", "health must be a boolean",
        "one start per MIG slice", "a start is an integer", "MIG slices mean MIG mode"])
def test_bad_inventory_names_the_annotation_and_field(text: str, where: str) -> None:
    with pytest.raises(ModelError) as info:
        ann.decode_inventory(text)
    assert where in str(info.value)
    assert str(info.value).startswith("annotation gpufleet.io/gpu-inventory")


@pytest.mark.parametrize("assignment", [
    ann.GpuAssignment("n1", ("GPU-a", "GPU-b"), 1000),
    ann.GpuAssignment("n1", ("GPU-a",), 250, 8192),
    ann.GpuAssignment("n1", mig=(ann.MigSliceRef("GPU-a", 2),)),
    ann.GpuAssignment("n1", ("GPU-a",), 1000, queue="vision"),
], ids=["whole GPUs", "a fraction with a memory cap", "a MIG slice", "with the queue it was scheduled in"])
def test_assignment_survives_a_round_trip_through_json(assignment: ann.GpuAssignment) -> None:
    assert ann.decode_assignment(ann.encode_assignment(assignment)) == assignment


def test_an_assignment_without_a_queue_reads_as_none() -> None:
    """Written before the queue was recorded (or by another writer): the pod's label decides."""
    assert ann.decode_assignment('{"node": "n1", "gpus": ["GPU-a"]}').queue is None
    assert "queue" not in json.loads(ann.encode_assignment(ann.GpuAssignment("n1", ("GPU-a",), 1000)))


def test_assignment_without_milli_means_whole_gpus() -> None:
    a = ann.decode_assignment('{"node": "n1", "gpus": ["GPU-a"]}')
    assert a.milli == 1000 and not a.is_fraction


def test_a_fraction_is_recognised() -> None:
    assert ann.GpuAssignment("n1", ("GPU-a",), 300).is_fraction


@pytest.mark.parametrize("text, field", [
    ('{"gpus": ["GPU-a"]}', "node"),
    ('{"node": "n1", "gpus": ["GPU-a", "GPU-a"]}', "gpus"),
    ('{"node": "n1", "gpus": ["GPU-a"], "milli": 1001}', "milli"),
    ('{"node": "n1", "gpus": ["GPU-a", "GPU-b"], "milli": 500}', "milli"),
    ('{"node": "n1", "milli": 500}', "milli"),
    ('{"node": "n1", "gpus": ["GPU-a"], "memMiB": 1.5}', "memMiB"),
    ('{"node": "n1", "mig": [{"gpu": "GPU-a"}]}', "mig[0]: slice"),
    ('{"node": "n1", "mig": {"gpu": "GPU-a"}}', "mig"),
    ('{"node": "n1", "queue": 7}', "queue"),
    ('{"node": "n1", "queue": ""}', "queue"),
], ids=["a missing node is rejected", "a GPU listed twice is rejected",
        "more than a whole GPU per GPU is rejected", "a fraction of several GPUs is rejected",
        "milli without GPUs is rejected", "fractional MiB are rejected",
        "a MIG slice needs an index", "MIG slices must be a list", "a queue is a name",
        "an empty queue is rejected"])
def test_bad_assignment_names_the_annotation_and_field(text: str, field: str) -> None:
    with pytest.raises(ModelError) as info:
        ann.decode_assignment(text)
    assert str(info.value).startswith(f"annotation gpufleet.io/gpu-assignment: {field}")


@pytest.mark.parametrize("profile, resource", [
    ("1g.10gb", "nvidia.com/mig-1g.10gb"),
    ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
    ("7g.141gb", "nvidia.com/mig-7g.141gb"),
], ids=["a plain profile", "a media-extension profile writes + as a dot", "a three-digit memory size"])
def test_mig_resource_names_round_trip(profile: str, resource: str) -> None:
    assert ann.mig_resource(profile) == resource
    assert ann.mig_profile_of(resource) == profile


def test_non_mig_resources_have_no_profile() -> None:
    assert ann.mig_profile_of(ann.GPU_RESOURCE) is None
