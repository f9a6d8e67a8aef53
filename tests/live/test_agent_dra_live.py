"""The agent publishing its node's DRA pool (`KubeNodeApi.publish_resource_slices`) on the real
control plane, as the `gpufleet-agent` ServiceAccount of deploy/agent/rbac.yaml: slices created
with the Node as owner, a new generation on every slice only when something changed, slices
that are no longer wanted deleted, another node's pool left alone, and the pool collected by
kube-controller-manager's garbage collector when the Node goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import lightkube
import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.resourceslices import MigMode, SliceOptions
from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import agent_kubeconfig, create_all, install_gpufleet, wait_for

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


def test_the_garbage_collector_removes_the_pool_of_a_deleted_node(cluster: Cluster, client: lightkube.Client) -> None:
    node = "dra-node-002"
    KubeNodeApi(client, node).publish_resource_slices(rs.DRIVER, slices(node))
    assert len(pool(cluster, node)) == 1
    cluster.admin.delete("nodes", node)
    wait_for(lambda: not pool(cluster, node), 60, "the deleted node's ResourceSlices to be collected")
