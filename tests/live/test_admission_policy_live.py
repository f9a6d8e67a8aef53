"""deploy/admission/: the ValidatingAdmissionPolicy that refuses pods created bound to a node while
asking for GPUs, enforced by the real kube-apiserver (docs/security.md, "Limits").

A tenant (a ServiceAccount with the built-in `edit` ClusterRole in its namespace, what a team
usually gets) cannot create such a pod, whichever GPU resource it names and in whichever
container; it can create the same pod unbound, and a bound pod that asks for no GPU. A kubelet
(group system:nodes, here the test admin impersonating one) still may: static pods' mirror pods
are created bound. The scheduler binds through pods/binding, which the policy does not match:
its pods are placed with the policy in force.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.testing.cluster import ApiError, Cluster, KubeClient
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import add_tenant, bound, create_all, install_gpufleet, manifests, refused_dry_run, \
    scheduler_in_process, scheduler_kubeconfig, try_create, wait_for

TENANT_NS = "team-a"
POLICY = "gpufleet-no-prebound-gpu-pods"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("admission") / "cluster") as c:
        install_gpufleet(c)
        for obj in manifests("deploy/admission/no-prebound-gpu-pods.yaml"):
            c.admin.create(obj)
        add_tenant(c, TENANT_NS)
        create_all(c.admin, gpu_nodes(4, seed=3))
        probe = pod("probe", {"limits": {"nvidia.com/gpu": 1}}, node=a_node(c))
        # kube-apiserver loads a new policy from its informer, a moment after the create
        wait_for(lambda: refused_dry_run(c.admin, probe), 30, "the policy to be in force")
        yield c


@pytest.fixture(scope="module")
def tenant(cluster: Cluster) -> Iterator[KubeClient]:
    client = cluster.client(cluster.service_account_token(TENANT_NS, "default"))
    yield client
    client.close()


def pod(name: str, resources: dict[str, Any], *, node: str | None = None, init: bool = False) -> Obj:
    container = {"name": "c", "image": "x", "resources": resources}
    spec: Obj = {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": "x"}] if init else [container]}
    if init:
        spec["initContainers"] = [container]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT_NS}, "spec": spec}


def a_node(cluster: Cluster) -> str:
    return str(cluster.admin.list("nodes")[0]["metadata"]["name"])


@pytest.mark.parametrize(("name", "resources", "init"), [
    ("whole", {"limits": {"nvidia.com/gpu": 1}}, False),
    ("mig", {"limits": {"nvidia.com/mig-1g.10gb": 1}}, False),
    ("fraction", {"limits": {"gpufleet.io/gpu-milli": 250}}, False),
    ("in-init", {"limits": {"nvidia.com/gpu": 1}}, True),
    ("requests-too", {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}}, False),
])
def test_a_tenant_cannot_create_a_pod_bound_to_a_node_that_asks_for_gpus(
        cluster: Cluster, tenant: KubeClient, name: str, resources: dict[str, Any], init: bool) -> None:
    refused = try_create(tenant, pod(f"prebound-{name}", resources, node=a_node(cluster), init=init))
    assert refused is not None and refused.status == 403, refused
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in refused.message
    assert "leave spec.nodeName empty and let the scheduler bind it" in refused.message
    assert cluster.admin.get("pods", f"prebound-{name}", TENANT_NS) is None


def test_unbound_gpu_pods_and_bound_pods_without_gpus_are_admitted(cluster: Cluster, tenant: KubeClient) -> None:
    assert try_create(tenant, pod("unbound-gpu", {"limits": {"nvidia.com/gpu": 1}})) is None
    assert try_create(tenant, pod("bound-cpu", {"limits": {"cpu": "1"}}, node=a_node(cluster))) is None


def test_a_kubelet_may_still_create_a_bound_gpu_pod(cluster: Cluster) -> None:
    node = a_node(cluster)
    # This control plane authorizes with RBAC only (no Node authorizer, which is what lets a real
    # kubelet create its mirror pods): give the node's user the built-in system:node role instead.
    # Authorization is not under test here; admission is.
    cluster.admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                          "metadata": {"name": f"kubelet-{node}"},
                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                          "subjects": [{"kind": "User", "name": f"system:node:{node}", "apiGroup": "rbac.authorization.k8s.io"}]})
    kubelet = KubeClient(cluster.url, cluster.admin_token, str(cluster.ca_file),
                         headers={"Impersonate-User": f"system:node:{node}", "Impersonate-Group": "system:nodes"})
    try:
        # what a static pod's mirror looks like to the API server: bound at creation, by its kubelet
        created = kubelet.create(pod("mirror", {"limits": {"nvidia.com/gpu": 1}}, node=node), dry_run=True)
    finally:
        kubelet.close()
    assert created["spec"]["nodeName"] == node


def test_the_scheduler_binds_gpu_pods_with_the_policy_in_force(cluster: Cluster, tenant: KubeClient,
                                                               tmp_path: Path) -> None:
    for i in range(3):
        tenant.create(pod(f"scheduled-{i}", {"limits": {"nvidia.com/gpu": 1}}))
    with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "scheduler.kubeconfig")):
        wait_for(lambda: {f"{TENANT_NS}/scheduled-{i}" for i in range(3)} <= set(bound(cluster.admin.list("pods"))),
                 60, "the scheduler to bind its pods")


def test_a_tenant_cannot_bind_a_pod_itself_either(cluster: Cluster, tenant: KubeClient) -> None:
    """The other way to choose a node: the pods/binding subresource, which the built-in `edit` role
    does not grant (RBAC, not the policy, refuses it)."""
    tenant.create(pod("self-bound", {"limits": {"nvidia.com/gpu": 1}}))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "self-bound", "namespace": TENANT_NS},
               "target": {"apiVersion": "v1", "kind": "Node", "name": a_node(cluster)}}
    with pytest.raises(ApiError) as refused:
        tenant.call("POST", f"/api/v1/namespaces/{TENANT_NS}/pods/self-bound/binding", binding)
    assert refused.value.status == 403 and 'cannot create resource "pods/binding"' in refused.value.message
