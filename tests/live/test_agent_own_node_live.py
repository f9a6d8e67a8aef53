"""deploy/admission/agent-own-node.yaml on the real kube-apiserver: the agent's ServiceAccount,
with a token bound to its pod (as the kubelet projects one), writes its own Node, that node's
status and its ResourceSlices, and nothing of another node; a token not bound to a pod on a
node writes no node at all. The node comes from the token: kube-apiserver puts the pod's node
into the request's user info (authentication.kubernetes.io/node-name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.testing.cluster import ApiError, Cluster, KubeClient
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import AGENT_SA, NAMESPACE, create_all, install_gpufleet, manifests, wait_for

OWN, OTHER = "own-000", "own-001"
MERGE = "application/merge-patch+json"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(Path(tmp_path_factory.mktemp("own-node")) / "cluster") as c:
        install_gpufleet(c)
        create_all(c.admin, gpu_nodes(2, prefix="own"))
        for obj in manifests("deploy/admission/agent-own-node.yaml"):
            c.admin.create(obj)
        yield c


def bound_token(c: Cluster, node: str) -> str:
    """A token of the agent's ServiceAccount bound to an agent pod on `node`."""
    pod = c.admin.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"agent-{node}", "namespace": NAMESPACE},
                          "spec": {"serviceAccountName": AGENT_SA, "nodeName": node,
                                   "containers": [{"name": "agent", "image": "x"}]}})
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "expirationSeconds": 3600,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                           "uid": pod["metadata"]["uid"]}}}
    answer = c.admin.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{AGENT_SA}/token", request)
    return str(answer["status"]["token"])


@pytest.fixture(scope="module")
def agent(cluster: Cluster) -> Iterator[KubeClient]:
    client = cluster.client(bound_token(cluster, OWN))
    yield client
    client.close()


def label(client: KubeClient, node: str, value: str) -> ApiError | None:
    try:
        client.call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"gpufleet.io/test": value}}},
                    content_type=MERGE)
    except ApiError as exc:
        return exc
    return None


def a_slice(node: str) -> Obj:
    backend = fake.load_fixture("h100-sxm-8")
    return rs.resource_slices(inventory.inventory(backend.system(), backend.devices()), node, 1)[0]


def test_the_agent_writes_its_own_node_and_not_another(cluster: Cluster, agent: KubeClient) -> None:
    # kube-apiserver loads a new policy from its informer, a moment after the create
    wait_for(lambda: label(agent, OTHER, "probe") is not None, 30, "the policy to be in force")
    assert label(agent, OWN, "1") is None
    assert cluster.admin.get("nodes", OWN)["metadata"]["labels"]["gpufleet.io/test"] == "1"  # type: ignore[index]
    refused = label(agent, OTHER, "1")
    assert refused is not None and refused.status == 403
    assert (f"this token is for node {OWN}, the request is for node {OTHER} (gpufleet-agent-own-node)"
            in refused.message)
    status = {"status": {"conditions": [{"type": "GpuUnhealthy", "status": "False", "reason": "GpusHealthy",
                                          "message": "all GPUs are healthy"}]}}
    agent.call("PATCH", f"/api/v1/nodes/{OWN}/status", status, content_type=MERGE)
    with pytest.raises(ApiError, match="gpufleet-agent-own-node"):
        agent.call("PATCH", f"/api/v1/nodes/{OTHER}/status", status, content_type=MERGE)


def test_the_agent_publishes_and_deletes_only_its_own_nodes_slices(cluster: Cluster, agent: KubeClient) -> None:
    wait_for(lambda: label(agent, OTHER, "probe") is not None, 30, "the policy to be in force")
    mine = agent.create(a_slice(OWN))
    with pytest.raises(ApiError, match=f"the request is for node {OTHER}"):
        agent.create(a_slice(OTHER))
    theirs = cluster.admin.create(a_slice(OTHER))  # published by someone allowed to
    with pytest.raises(ApiError, match=f"the request is for node {OTHER}"):
        agent.call("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{theirs['metadata']['name']}")
    moved = {**mine, "spec": {**mine["spec"], "nodeName": OTHER}}  # nodeName is immutable anyway
    with pytest.raises(ApiError):
        agent.call("PUT", f"/apis/resource.k8s.io/v1/resourceslices/{mine['metadata']['name']}", moved)
    agent.call("DELETE", f"/apis/resource.k8s.io/v1/resourceslices/{mine['metadata']['name']}")


def test_a_token_not_bound_to_a_pod_on_a_node_writes_no_node(cluster: Cluster, agent: KubeClient) -> None:
    wait_for(lambda: label(agent, OTHER, "probe") is not None, 30, "the policy to be in force")
    unbound = cluster.client(cluster.service_account_token(NAMESPACE, AGENT_SA))
    try:
        refused = label(unbound, OWN, "2")
        assert refused is not None and "this token is not bound to a pod on a node" in refused.message
    finally:
        unbound.close()
