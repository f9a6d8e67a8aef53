"""The committed device-plugin stubs are exactly what api.proto generates, and the API paths are the kubelet's."""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.drav1 import dra_pb2, registration_pb2
from gpufleet.agent.drav1 import generate as drav1_generate
from gpufleet.agent.v1beta1 import api_pb2, generate


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    for fresh in generate.generate(tmp_path):
        committed = generate.PACKAGE_DIR / fresh.name
        assert committed.read_text() == fresh.read_text(), f"{fresh.name} is stale: run python -m {generate.__name__}"


def test_the_proto_keeps_the_v1beta1_package_and_the_kubelet_method_paths() -> None:
    services = api_pb2.DESCRIPTOR.services_by_name
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert [m.full_name for m in services["Registration"].methods] == ["v1beta1.Registration.Register"]
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"]
    assert services["DevicePlugin"].methods_by_name["ListAndWatch"].server_streaming


def test_field_numbers_follow_the_api() -> None:
    fields = {name: {f.name: f.number for f in m.fields} for name, m in api_pb2.DESCRIPTOR.message_types_by_name.items()}
    assert fields["RegisterRequest"] == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert fields["Device"] == {"ID": 1, "health": 2, "topology": 3}
    assert fields["ContainerPreferredAllocationRequest"] == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert fields["ContainerAllocateResponse"] == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4,
                                                   "cdi_devices": 5}


def test_committed_dra_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    for fresh in drav1_generate.generate(tmp_path):
        committed = drav1_generate.PACKAGE_DIR / fresh.name
        assert committed.read_text() == fresh.read_text(), f"{fresh.name} is stale: run python -m {drav1_generate.__name__}"


def test_the_dra_protos_keep_the_kubelets_packages_and_method_paths() -> None:
    dra = dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert [m.full_name for m in dra.methods] == ["k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin.NodePrepareResources",
                                                  "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin.NodeUnprepareResources"]
    registration = registration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert [m.full_name for m in registration.methods] == ["pluginregistration.Registration.GetInfo",
                                                           "pluginregistration.Registration.NotifyRegistrationStatus"]
    fields = {f.name: f.number for f in dra_pb2.Device.DESCRIPTOR.fields}
    assert fields == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4, "share_id": 5}
