"""The agent as a DRA driver on the real control plane, as the `gpufleet-agent` ServiceAccount of
deploy/agent/rbac.yaml.

Publishing (`KubeNodeApi.publish_resource_slices`): slices created with the Node as owner, a
new generation on every slice only when something changed, slices no longer wanted deleted,
another node's pool left alone, and the pool collected by kube-controller-manager's garbage
collector when the Node goes.

Preparing: the real kube-scheduler (v1.37, its DRA allocator) allocates claims, direct and
from templates, on the devices the running agent published, with deploy/dra's DeviceClasses
(whole GPUs, and Dynamic MIG placements, which the agent carves through the fake backend);
a kubelet stand-in (tests/agent/drakubelet.py, written from the kubelet's API) checks each
bound pod's claims as the kubelet does and asks the agent to prepare them. gpufleet's own
scheduler does not allocate claims yet."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import lightkube
import pytest
import yaml

from gpufleet.agent import configsource, fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.resourceslices import MigMode, SliceOptions
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.cluster.binaries import binary
from gpufleet.testing.gpu_nodes import gpu_nodes

from tests.agent.drakubelet import kubelet_checks, register
from .cluster_kit import agent_kubeconfig, clean_env, create_all, install_gpufleet, manifests, wait_for

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("agent-dra") / "cluster") as c:
        install_gpufleet(c)
        create_all(c.admin, gpu_nodes(3, prefix="dra-node"))
        yield c


@pytest.fixture(scope="module")
def client(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[lightkube.Client]:
    kubeconfig = agent_kubeconfig(cluster, tmp_path_factory.mktemp("agent-sa") / "kubeconfig")
    c = config.connect(config.from_kubeconfig(kubeconfig))
    yield c
    c.close()


def slices(node: str, options: SliceOptions = SliceOptions(), unhealthy: frozenset[str] = frozenset()) -> tuple[Obj, ...]:
    backend = fake.load_fixture("h100-sxm-8")
    return rs.resource_slices(inventory.inventory(backend.system(), backend.devices()), node, 1, options, unhealthy)


def pool(cluster: Cluster, node: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in cluster.admin.list("resourceslices")
            if o["spec"]["pool"]["name"] == node}


def test_the_pool_follows_what_the_agent_wants_in_generations(cluster: Cluster, client: lightkube.Client) -> None:
    node, other = "dra-node-000", "dra-node-001"
    KubeNodeApi(client, other).publish_resource_slices(rs.DRIVER, slices(other))
    api = KubeNodeApi(client, node)
    dynamic = SliceOptions(mig=MigMode.DYNAMIC)

    assert api.publish_resource_slices(rs.DRIVER, slices(node, dynamic)) == 1
    first = pool(cluster, node)
    assert len(first) == 5 and {o["spec"]["pool"]["generation"] for o in first.values()} == {1}
    uid = cluster.admin.get("nodes", node)["metadata"]["uid"]  # type: ignore[index]
    assert all(o["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
                                                     "controller": True}] for o in first.values())

    assert api.publish_resource_slices(rs.DRIVER, slices(node, dynamic)) == 1  # nothing changed: nothing written
    assert {n: o["metadata"]["resourceVersion"] for n, o in pool(cluster, node).items()} == \
        {n: o["metadata"]["resourceVersion"] for n, o in first.items()}

    uuid = fake.load_fixture("h100-sxm-8").devices()[0].uuid
    assert api.publish_resource_slices(rs.DRIVER, slices(node, dynamic, frozenset({uuid}))) == 2
    tainted = pool(cluster, node)
    assert {o["spec"]["pool"]["generation"] for o in tainted.values()} == {2}
    assert any(d.get("taints") for o in tainted.values() for d in o["spec"].get("devices", []))
    # taints come back with timeAdded set by the server; the same wish is still no change
    assert api.publish_resource_slices(rs.DRIVER, slices(node, dynamic, frozenset({uuid}))) == 2

    assert api.publish_resource_slices(rs.DRIVER, slices(node)) == 3  # static: one slice of 8 whole GPUs
    (static,) = pool(cluster, node).values()
    assert static["spec"]["pool"] == {"name": node, "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in static["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]

    api.publish_resource_slices(rs.DRIVER, ())
    assert pool(cluster, node) == {}
    assert len(pool(cluster, other)) == 1, "another node's pool was touched"
    KubeNodeApi(client, other).publish_resource_slices(rs.DRIVER, ())


def test_the_garbage_collector_removes_the_pool_of_a_deleted_node(cluster: Cluster, client: lightkube.Client) -> None:
    node = "dra-node-002"
    KubeNodeApi(client, node).publish_resource_slices(rs.DRIVER, slices(node))
    assert len(pool(cluster, node)) == 1
    cluster.admin.delete("nodes", node)
    wait_for(lambda: not pool(cluster, node), 60, "the deleted node's ResourceSlices to be collected")


@pytest.fixture(scope="module")
def kube_scheduler(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """The real kube-scheduler with its default profile, DRA allocator included."""
    tmp = tmp_path_factory.mktemp("kube-scheduler")
    kubeconfig = cluster.workdir / "kube-scheduler.kubeconfig"
    (tmp / "config.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "leaderElection": {"leaderElect": False}}))
    with (tmp / "kube-scheduler.log").open("ab") as log:
        proc = subprocess.Popen([str(binary("kube-scheduler")), f"--config={tmp / 'config.yaml'}",
                                 f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                                 "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"],
                                stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    yield proc
    proc.terminate()
    proc.wait(10)


def gpu_claim_spec(count: int, selector: str | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.gpufleet.io", "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def deviceclasses_and_namespace(cluster: Cluster) -> None:
    """deploy/dra's DeviceClasses and the namespace `team`, whichever test of the module comes first."""
    for obj in manifests("deploy/dra/deviceclasses.yaml"):
        if cluster.admin.get("deviceclasses", obj["metadata"]["name"]) is None:
            cluster.admin.create(obj)
    if cluster.admin.get("namespaces", "team") is None:
        cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})


def claim_pod(name: str, claim: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
            "spec": {"resourceClaims": [{"name": "gpus", **claim}],
                     "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]}}


def test_kube_scheduler_allocates_what_the_agent_published_and_the_agent_prepares_it(
        cluster: Cluster, client: lightkube.Client, kube_scheduler: subprocess.Popen[bytes], tmp_path: Path) -> None:
    admin = cluster.admin
    deviceclasses_and_namespace(cluster)
    node = "dra-node-prep"
    create_all(admin, [{**n, "metadata": {**n["metadata"], "name": node,
                                          "labels": {**n["metadata"]["labels"], "kubernetes.io/hostname": node}}}
                       for n in gpu_nodes(1, prefix="prep")])
    (tmp_path / "config.yaml").write_text("gpufleet: {metricsPort: 0, dra: {publish: true}}\n")
    backend = fake.load_fixture("h100-sxm-8")
    api = AgentNodeApi(KubeNodeApi(client, node))
    agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml"),
                  AgentOptions(node, tmp_path / "dp", metrics_port=0, dra_plugins_dir=tmp_path / "p",
                               dra_registry_dir=tmp_path / "r", cdi_root=tmp_path / "cdi"))
    (tmp_path / "dp").mkdir()
    agent.start()
    try:
        admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": "pair", "namespace": "team"}, "spec": gpu_claim_spec(2)})
        admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                      "metadata": {"name": "one-h100", "namespace": "team"},
                      "spec": {"spec": gpu_claim_spec(1, 'device.attributes["gpu.gpufleet.io"].productName == '
                                                         '"NVIDIA H100 80GB HBM3"')}})
        admin.create(claim_pod("direct", {"resourceClaimName": "pair"}))
        admin.create(claim_pod("templated", {"resourceClaimTemplateName": "one-h100"}))
        admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": "nine", "namespace": "team"}, "spec": gpu_claim_spec(9)})
        admin.create(claim_pod("too-big", {"resourceClaimName": "nine"}))

        def pods() -> dict[str, Obj]:
            return {p["metadata"]["name"]: p for p in admin.list("pods", "team")}
        wait_for(lambda: all(pods()[n]["spec"].get("nodeName") for n in ("direct", "templated")), 60,
                 "kube-scheduler to bind the pods with claims")
        wait_for(lambda: any(c.get("reason") == "Unschedulable" for c in pods()["too-big"].get("status", {})
                             .get("conditions", [])), 30, "the pod asking for 9 GPUs to be Unschedulable")

        kubelet = register(agent.dra.registration_path)  # type: ignore[union-attr]
        handed: list[str] = []
        for name in ("direct", "templated"):
            pod = pods()[name]
            assert pod["spec"]["nodeName"] == node
            claim_name = next(s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]) \
                if name == "templated" else "pair"
            claim = admin.get("resourceclaims", claim_name, "team")
            assert kubelet_checks(claim, pod, node, admin.get("nodes", node)["metadata"]["labels"]) == []  # type: ignore[index]
            assert claim is not None
            uid = claim["metadata"]["uid"]
            answer = kubelet.prepare(("team", claim_name, uid)).claims[uid]
            assert answer.error == ""
            devices = [d.device_name for d in answer.devices]
            assert devices == [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
            assert [list(d.cdi_device_ids) for d in answer.devices] == \
                [[f"k8s.gpu.gpufleet.io/claim={uid}-{d}"] for d in devices]
            assert (tmp_path / "cdi" / f"k8s.gpu.gpufleet.io-claim_{uid}.json").exists()
            handed += devices
        assert len(handed) == 3 and len(set(handed)) == 3, "kube-scheduler gave one device to two claims"

        # a claim whose allocation copies a prepared device, as a second allocator on the pool
        # would write it: kube-apiserver stores it, the agent refuses to hand the device out again
        admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": "copy", "namespace": "team"}, "spec": gpu_claim_spec(1)})
        copy = admin.get("resourceclaims", "copy", "team")
        assert copy is not None
        copy["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": rs.DRIVER, "pool": node, "device": handed[0]}]}}}
        admin.call("PUT", f"/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/copy/status", copy)
        refused = kubelet.prepare(("team", "copy", copy["metadata"]["uid"])).claims[copy["metadata"]["uid"]]
        assert f"device {handed[0]!r} is already prepared for ResourceClaim team/" in refused.error
        kubelet.close()
    finally:
        agent.stop()


def test_kube_scheduler_allocates_dynamic_mig_placements_and_the_agent_carves_them(
        cluster: Cluster, client: lightkube.Client, kube_scheduler: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """Dynamic MIG end to end, on the fake backend: the real allocator picks placements by the
    published counters, the agent carves them at prepare and destroys them at unprepare."""
    admin = cluster.admin
    deviceclasses_and_namespace(cluster)
    node = "dra-node-mig"
    create_all(admin, [{**n, "metadata": {**n["metadata"], "name": node,
                                          "labels": {**n["metadata"]["labels"], "kubernetes.io/hostname": node}}}
                       for n in gpu_nodes(1, prefix="mig")])
    (tmp_path / "config.yaml").write_text("gpufleet: {metricsPort: 0, dra: {publish: true, mig: dynamic}}\n")
    backend = fake.load_fixture("h100-sxm-8")
    for g in backend.devices():
        backend.set_mig_mode(g.uuid, True)
    gpu0 = backend.devices()[0].uuid
    agent = Agent(lambda: backend, AgentNodeApi(KubeNodeApi(client, node)),
                  configsource.ConfigSource(tmp_path / "config.yaml"),
                  AgentOptions(node, tmp_path / "dp", metrics_port=0, dra_plugins_dir=tmp_path / "p",
                               dra_registry_dir=tmp_path / "r", cdi_root=tmp_path / "cdi"))
    (tmp_path / "dp").mkdir()
    agent.start()
    try:
        three_g = (f'device.attributes["gpu.gpufleet.io"].profile == "3g.40gb" && '
                   f'device.attributes["gpu.gpufleet.io"].parentUUID == "{gpu0}"')
        def mig_pod(name: str, count: int) -> None:
            spec = {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "mig.gpufleet.io", "allocationMode": "ExactCount", "count": count,
                "selectors": [{"cel": {"expression": three_g}}]}}]}}
            admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                          "metadata": {"name": name, "namespace": "team"}, "spec": spec})
            admin.create(claim_pod(f"mig-{name}", {"resourceClaimName": name}))

        def pod(name: str) -> Obj:
            found = admin.get("pods", name, "team")
            assert found is not None
            return found
        # one after the other: created together, kube-scheduler can place "third" first (when "halves"
        # backs off, say, because its claim is not in the scheduler's cache yet), and "halves" then
        # finds only one 3g.40gb of GPU 0 left (a CI run failed so once)
        mig_pod("halves", 2)
        wait_for(lambda: pod("mig-halves")["spec"].get("nodeName") == node, 60, "kube-scheduler to bind mig-halves")
        mig_pod("third", 1)
        wait_for(lambda: any(c.get("reason") == "Unschedulable" for c in pod("mig-third").get("status", {})
                             .get("conditions", [])), 30, "a third 3g.40gb on GPU 0 to be Unschedulable (counters)")

        claim = admin.get("resourceclaims", "halves", "team")
        assert claim is not None
        assert kubelet_checks(claim, pod("mig-halves"), node, admin.get("nodes", node)["metadata"]["labels"]) == []  # type: ignore[index]
        devices = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
        assert devices == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
        uid = claim["metadata"]["uid"]
        kubelet = register(agent.dra.registration_path)  # type: ignore[union-attr]
        assert kubelet.prepare(("team", "halves", uid)).claims[uid].error == ""
        carved = backend.devices()[0].mig_devices
        assert sorted(m.placement_start for m in carved) == [0, 4]
        spec = (tmp_path / "cdi" / f"k8s.gpu.gpufleet.io-claim_{uid}.json").read_text()
        assert all(m.uuid in spec for m in carved)

        # a second allocator's overlapping placement: stored by kube-apiserver, refused by the agent
        admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": "overlap", "namespace": "team"}, "spec": gpu_claim_spec(1)})
        overlap = admin.get("resourceclaims", "overlap", "team")
        assert overlap is not None
        overlap["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": rs.DRIVER, "pool": node, "device": "gpu-0-mig-1g10gb-19-5"}]}}}
        admin.call("PUT", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/overlap/status", overlap)
        refused = kubelet.prepare(("team", "overlap", overlap["metadata"]["uid"])).claims[overlap["metadata"]["uid"]]
        assert "overlaps 'gpu-0-mig-3g40gb-9-4' (prepared for ResourceClaim team/halves)" in refused.error
        assert len(backend.devices()[0].mig_devices) == 2

        assert kubelet.unprepare(("team", "halves", uid)).claims[uid].error == ""
        assert backend.devices()[0].mig_devices == ()
        kubelet.close()
    finally:
        agent.stop()
