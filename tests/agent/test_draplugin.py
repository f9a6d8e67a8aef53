"""The agent as the kubelet's DRA plugin, through a kubelet-side peer over real unix sockets
(`drakubelet.py`): registration, preparing claims into CDI specs, refusing what must not be
handed out, unpreparing, and a restart that remembers what was prepared. Dynamic MIG placements,
carved at prepare, are in test_draplugin_carve.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.draplugin import CheckpointError, DraPlugin
from gpufleet.agent.kube import KubeAccessError
from gpufleet.agent.resourceslices import SliceOptions

from .drakubelet import DraEndpoint, register

NODE = "node-a"
DRIVER = rs.DRIVER
Obj = dict[str, Any]


def claim(name: str, *devices: str, uid: str | None = None, driver: str = DRIVER, pool: str = NODE) -> Obj:
    results = [{"request": "gpus", "driver": driver, "pool": pool, "device": d} for d in devices]
    return {"metadata": {"namespace": "team", "name": name, "uid": uid or f"uid-{name}"},
            "status": {"allocation": {"devices": {"results": results}}}}


class Claims:
    """The API server's claims, as the agent reads them."""

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], Obj] = {}
        self.unreachable = False

    def add(self, c: Obj) -> Obj:
        self.by_name[(c["metadata"]["namespace"], c["metadata"]["name"])] = c
        return c

    def read(self, namespace: str, name: str) -> Obj | None:
        if self.unreachable:
            raise KubeAccessError("connection refused")
        return self.by_name.get((namespace, name))


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    # unix socket paths are limited to about 100 bytes: keep them under a short root
    return {"plugins": tmp_path / "p", "registry": tmp_path / "r", "cdi": tmp_path / "cdi"}


def make_plugin(claims: Claims, dirs: dict[str, Path], fixture: str = "h100-sxm-8",
                options: SliceOptions = SliceOptions()) -> DraPlugin:
    backend = fake.load_fixture(fixture)
    inv = inventory.inventory(backend.system(), backend.devices())
    return DraPlugin(options.driver, NODE, claims.read, rs.device_targets(inv, options), dirs["plugins"],
                     dirs["registry"], dirs["cdi"], dev_exists=lambda p: p in ("/dev/nvidiactl", "/dev/nvidia-uvm"))


@pytest.fixture
def plugin(claims: Claims, dirs: dict[str, Path]) -> Iterator[DraPlugin]:
    p = make_plugin(claims, dirs)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def kubelet(plugin: DraPlugin) -> Iterator[DraEndpoint]:
    endpoint = register(plugin.registration_path)
    yield endpoint
    endpoint.close()


def ref(c: Obj) -> tuple[str, str, str]:
    return c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["uid"]


def test_registration_names_the_driver_the_dra_socket_and_the_v1_service(plugin: DraPlugin,
                                                                          kubelet: DraEndpoint) -> None:
    assert plugin.registration_path.name == "gpu.gpufleet.io-reg.sock"
    assert (kubelet.info.type, kubelet.info.name, kubelet.info.endpoint, list(kubelet.info.supported_versions)) == (
        "DRAPlugin", DRIVER, str(plugin.data_dir / "dra.sock"), ["v1.DRAPlugin"])
    assert plugin.registered is True


def test_a_prepared_claim_gets_cdi_ids_a_cdi_spec_and_a_checkpoint_entry(plugin: DraPlugin, kubelet: DraEndpoint,
                                                                          claims: Claims, dirs: dict[str, Path]) -> None:
    c = claims.add(claim("train", "gpu-2", "gpu-5"))
    answer = kubelet.prepare(ref(c)).claims["uid-train"]
    assert answer.error == ""
    assert [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [
        (["gpus"], NODE, "gpu-2", ["k8s.gpu.gpufleet.io/claim=uid-train-gpu-2"]),
        (["gpus"], NODE, "gpu-5", ["k8s.gpu.gpufleet.io/claim=uid-train-gpu-5"])]
    spec = json.loads((dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-train.json").read_text())
    uuids = [g.uuid for g in fake.load_fixture("h100-sxm-8").devices()]
    assert spec == {"cdiVersion": "0.5.0", "kind": "k8s.gpu.gpufleet.io/claim",
                    "devices": [{"name": "uid-train-gpu-2", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia2"}]}},
                                {"name": "uid-train-gpu-5", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia5"}]}}],
                    "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={uuids[2]},{uuids[5]}"],
                                       "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]}}
    checkpoint = json.loads(plugin.checkpoint_path.read_text())
    assert [d["device"] for d in checkpoint["claims"]["uid-train"]["devices"]] == ["gpu-2", "gpu-5"]
    assert kubelet.prepare(ref(c)).claims["uid-train"].devices == answer.devices  # the kubelet retries: same answer


def test_a_device_is_never_prepared_for_two_claims_even_across_a_restart(claims: Claims, dirs: dict[str, Path]) -> None:
    first, second = claims.add(claim("first", "gpu-1")), claims.add(claim("second", "gpu-0", "gpu-1"))
    plugin = make_plugin(claims, dirs)
    plugin.start()
    try:
        kubelet = register(plugin.registration_path)
        assert kubelet.prepare(ref(first)).claims["uid-first"].error == ""
        kubelet.close()
    finally:
        plugin.stop()
    restarted = make_plugin(claims, dirs)
    restarted.start()
    try:
        kubelet = register(restarted.registration_path)
        refused = kubelet.prepare(ref(second)).claims["uid-second"]
        assert refused.error == ("ResourceClaim team/second: status.allocation.devices.results[1]: device 'gpu-1' is "
                                 "already prepared for ResourceClaim team/first; refusing to hand it out twice")
        assert not refused.devices and "uid-second" not in restarted.prepared
        assert not (dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-second.json").exists()
        kubelet.unprepare(ref(first))
        assert kubelet.prepare(ref(second)).claims["uid-second"].error == ""
        kubelet.close()
    finally:
        restarted.stop()


def test_memory_shares_let_several_claims_hold_one_gpu(claims: Claims, dirs: dict[str, Path]) -> None:
    plugin = make_plugin(claims, dirs, options=SliceOptions(memory_shares=True))
    plugin.start()
    try:
        kubelet = register(plugin.registration_path)
        for name in ("a", "b"):
            assert kubelet.prepare(ref(claims.add(claim(name, "gpu-0")))).claims[f"uid-{name}"].error == ""
        kubelet.close()
    finally:
        plugin.stop()


@pytest.mark.parametrize("stored, asked_uid, message", [
    (None, "uid-x", "ResourceClaim team/x: not found"),
    (claim("x", "gpu-0", uid="uid-new"), "uid-x", "has UID 'uid-new', not 'uid-x': the claim was replaced"),
    ({"metadata": {"namespace": "team", "name": "x", "uid": "uid-x"}, "status": {}}, "uid-x",
     "status.allocation is empty: the claim is not allocated"),
    (claim("x", "gpu-0", pool="node-b"), "uid-x", "results[0]: pool 'node-b' is not this node's ('node-a')"),
    (claim("x", "gpu-9"), "uid-x", "results[0]: device 'gpu-9' is not one this node publishes"),
], ids=["a claim that is gone", "a replaced claim", "an unallocated claim", "another node's pool", "an unknown device"])
def test_a_claim_that_cannot_be_prepared_gets_an_error_naming_it(plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims,
                                                                  stored: Obj | None, asked_uid: str, message: str) -> None:
    if stored is not None:
        claims.add(stored)
    answer = kubelet.prepare(("team", "x", asked_uid)).claims[asked_uid]
    assert message in answer.error and not answer.devices and plugin.prepared == {}


def test_an_unreachable_api_server_refuses_the_claim_for_now(plugin: DraPlugin, kubelet: DraEndpoint,
                                                              claims: Claims) -> None:
    c = claims.add(claim("x", "gpu-0"))
    claims.unreachable = True
    assert kubelet.prepare(ref(c)).claims["uid-x"].error == "ResourceClaim team/x: cannot read it: connection refused"
    claims.unreachable = False
    assert kubelet.prepare(ref(c)).claims["uid-x"].error == ""


def test_only_this_drivers_results_are_prepared(plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims) -> None:
    c = claim("mixed", "gpu-3")
    c["status"]["allocation"]["devices"]["results"].append(
        {"request": "nic", "driver": "rdma.example.com", "pool": "elsewhere", "device": "mlx-0"})
    answer = kubelet.prepare(ref(claims.add(c))).claims["uid-mixed"]
    assert answer.error == "" and [d.device_name for d in answer.devices] == ["gpu-3"]


def test_a_carved_mig_instance_is_prepared_with_its_parents_node_and_its_own_uuid(claims: Claims,
                                                                                   dirs: dict[str, Path]) -> None:
    plugin = make_plugin(claims, dirs, fixture="a100-mig")
    plugin.start()
    try:
        kubelet = register(plugin.registration_path)
        c = claims.add(claim("small", "gpu-1-mig-1g5gb-19-3"))
        assert kubelet.prepare(ref(c)).claims["uid-small"].error == ""
        spec = json.loads((dirs["cdi"] / "k8s.gpu.gpufleet.io-claim_uid-small.json").read_text())
        mig = fake.load_fixture("a100-mig").devices()[1].mig_devices[3].uuid
        assert spec["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia1"}]}
        assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={mig}"]
        kubelet.close()
    finally:
        plugin.stop()


def test_unprepare_removes_the_spec_and_is_idempotent(plugin: DraPlugin, kubelet: DraEndpoint, claims: Claims,
                                                      dirs: dict[str, Path]) -> None:
    c = claims.add(claim("x", "gpu-0"))
    kubelet.prepare(ref(c))
    for _ in range(2):
        assert kubelet.unprepare(ref(c)).claims["uid-x"].error == ""
    assert plugin.prepared == {} and not list(dirs["cdi"].iterdir())
    assert json.loads(plugin.checkpoint_path.read_text()) == {"claims": {}}


def test_a_corrupt_checkpoint_stops_the_plugin_naming_the_file(claims: Claims, dirs: dict[str, Path]) -> None:
    plugin = make_plugin(claims, dirs)
    plugin.data_dir.mkdir(parents=True)
    plugin.checkpoint_path.write_text("{not json")
    with pytest.raises(CheckpointError, match=r"prepared.json: cannot read the prepared claims \(JSONDecodeError"):
        plugin.start()
    assert not plugin.socket_path.exists()
