"""gpufleet's scheduler allocates DRA claims on the real control plane (issue 21, item 4).

KWOK GPU nodes publish their GPUs in ResourceSlices shaped as NVIDIA's DRA driver publishes
them (driver `gpu.nvidia.com`, devices `gpu-N` with `type`, `uuid`, `productName`; the uuids
are the GPUs of the node's inventory annotation, so each device is linked to its GPU), with
NVIDIA's DeviceClass `gpu.nvidia.com`. The scheduler runs in this process as the
`gpufleet-scheduler` ServiceAccount of deploy/scheduler/rbac.yaml, owning the pools of
`gpu.nvidia.com`. Pods use claims directly, through a ResourceClaimTemplate (the claims made
by kube-controller-manager's resourceclaim controller), and one claim shared by two pods.

Checked from the API server: every bound pod passes the kubelet's checks on each of its
claims (allocated, the pod in `reservedFor`, the allocation's node selector picks the pod's
node), no device is in two claims, the finalizer is on each allocated claim; unsatisfiable
claims leave their pods pending with the reason in PodScheduled; a status write that fails
leaves nothing half-written (the finalizer taken back, no allocation, no reservation), and a
409 on it is read again and written.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.model import annotations as ann
from gpufleet.model.dra import DELETE_PROTECTION
from gpufleet.testing.cluster import Cluster, KubeClient
from gpufleet.testing.cluster.faultproxy import FaultProxy, Reply, Rule
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from tests.agent.drakubelet import kubelet_checks
from .cluster_kit import (NAMESPACE, SCHEDULER_SA, create_all, install_gpufleet, scheduler_in_process,
                          scheduler_kubeconfig, service_account_user, wait_for)

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
NODES = 3
H100 = next(s for s in SHAPES if s.name == "p5.48xlarge")
SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
"""The selector of NVIDIA's DeviceClass gpu.nvidia.com."""
SCHEDULER_USER = service_account_user(SCHEDULER_SA)


def nvidia_slice(node: Obj) -> Obj:
    """The ResourceSlice NVIDIA's driver publishes for `node`'s GPUs: one pool per node."""
    name = node["metadata"]["name"]
    gpus = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
    devices = [{"name": f"gpu-{g.index}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": g.uuid}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
        "capacity": {"memory": {"value": "80Gi"}}} for g in gpus]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def claim_spec(count: int, device_class: str = DRIVER, selector: str | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim(name: str, namespace: str, count: int, device_class: str = DRIVER) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": claim_spec(count, device_class)}


def pod(name: str, namespace: str, **source: str) -> Obj:
    """A gpufleet pod with one claim entry `gpu`: `resourceClaimName=` or `resourceClaimTemplateName=`."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "gpufleet", "resourceClaims": [{"name": "gpu", **source}],
                     "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("scheduler-dra") / "cluster") as c:
        install_gpufleet(c)
        rng = random.Random(21)
        nodes = [gpu_node(f"dra-gpu-{i}", H100, rng, index=i) for i in range(NODES)]
        create_all(c.admin, nodes)
        create_all(c.admin, [nvidia_slice(n) for n in nodes])
        c.admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                        "spec": {"selectors": [{"cel": {"expression": SELECTOR}}]}})
        wait_for(lambda: all(not any(t.get("key") == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or ())
                             for n in c.admin.list("nodes")), 60, "KWOK to make the nodes Ready", interval_s=0.5)
        yield c


def namespace(admin: KubeClient, name: str) -> str:
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: admin.get("serviceaccounts", "default", name) is not None, 30, f"namespace {name}'s ServiceAccount")
    return name


def pods_of(admin: KubeClient, ns: str) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in admin.list("pods", ns)}


def claim_names(p: Obj) -> list[str]:
    """The pod's claims as the kubelet finds them: by name, or as the controller recorded them."""
    generated = {s["name"]: s.get("resourceClaimName") for s in (p.get("status") or {}).get("resourceClaimStatuses") or []}
    return [e.get("resourceClaimName") or generated[e["name"]] for e in p["spec"]["resourceClaims"]]


def condition(p: Obj) -> Obj:
    return next((c for c in (p.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})


def test_claims_direct_from_templates_and_shared_are_allocated_and_reserved_before_binding(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.admin
    ns = namespace(admin, "team")
    admin.create(claim("pair", ns, 2))
    admin.create(claim("shared", ns, 1))
    admin.create(claim("nine", ns, 9))
    admin.create(claim("odd", ns, 1, device_class="no-such-class"))
    admin.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                  "metadata": {"name": "one-h100", "namespace": ns},
                  "spec": {"spec": claim_spec(1, selector='device.attributes["gpu.nvidia.com"].productName == '
                                                           '"NVIDIA H100 80GB HBM3"')}})
    placed = ["direct", "share-a", "share-b", *(f"templated-{i}" for i in range(4))]
    create_all(admin, [pod("direct", ns, resourceClaimName="pair"),
                       pod("share-a", ns, resourceClaimName="shared"), pod("share-b", ns, resourceClaimName="shared"),
                       *(pod(f"templated-{i}", ns, resourceClaimTemplateName="one-h100") for i in range(4)),
                       pod("too-big", ns, resourceClaimName="nine"), pod("unknown-class", ns, resourceClaimName="odd")])
    kubeconfig = scheduler_kubeconfig(cluster, tmp_path / "scheduler.kubeconfig")
    with scheduler_in_process(kubeconfig, dra_drivers=(DRIVER,)):
        took = wait_for(lambda: all(pods_of(admin, ns)[n]["spec"].get("nodeName") for n in placed), 60,
                        "gpufleet to bind the pods with claims")
        wait_for(lambda: all(condition(pods_of(admin, ns)[n]).get("reason") == "Unschedulable"
                             for n in ("too-big", "unknown-class")), 30, "the unsatisfiable pods to be reported")
    print(f"7 pods with claims bound in {took:.1f} s")
    pods = pods_of(admin, ns)
    nodes = {n["metadata"]["name"]: n for n in admin.list("nodes")}
    claims = {c["metadata"]["name"]: c for c in admin.list("resourceclaims", ns)}
    handed: dict[tuple[str, str], str] = {}
    for name in placed:
        p = pods[name]
        node = p["spec"]["nodeName"]
        for claim_name in claim_names(p):
            c = claims[claim_name]
            assert kubelet_checks(c, p, node, nodes[node]["metadata"]["labels"]) == [], (name, c)
            assert DELETE_PROTECTION in c["metadata"].get("finalizers", [])
            allocation = c["status"]["allocation"]
            assert allocation["allocationTimestamp"]
            for r in allocation["devices"]["results"]:
                assert (r["driver"], r["pool"]) == (DRIVER, node)
                assert handed.setdefault((node, r["device"]), claim_name) == claim_name, "one device in two claims"
    assert len(handed) == 2 + 1 + 4
    assert pods["share-a"]["spec"]["nodeName"] == pods["share-b"]["spec"]["nodeName"]
    assert [r["name"] for r in claims["shared"]["status"]["reservedFor"]] in (["share-a", "share-b"],
                                                                               ["share-b", "share-a"])
    too_big, unknown = condition(pods["too-big"])["message"], condition(pods["unknown-class"])["message"]
    assert f"resourceclaim {ns}/nine: request gpu: no node has 9 device(s) of class {DRIVER}" in too_big, too_big
    assert f"resourceclaim {ns}/odd" in unknown and "device class no-such-class not found" in unknown, unknown
    for name in ("nine", "odd"):
        assert not (claims[name].get("status") or {}) and not claims[name]["metadata"].get("finalizers")
    writes = [r for r in cluster.audit() if r.user == SCHEDULER_USER and r.resource == "resourceclaims"
              and r.verb == "update"]
    assert writes and all(r.code == 200 for r in writes), [(r.path, r.subresource, r.code) for r in writes]


def test_a_failed_status_write_leaves_nothing_half_written_and_a_conflict_is_read_again(
        cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.admin
    ns = namespace(admin, "flaky")
    admin.create(claim("flaky", ns, 1))
    admin.create(claim("racy", ns, 1))
    with FaultProxy.for_cluster(cluster, tmp_path / "proxy") as proxy:
        token = cluster.service_account_token(NAMESPACE, SCHEDULER_SA)
        kubeconfig = proxy.kubeconfig(tmp_path / "via-proxy.kubeconfig", token, user=SCHEDULER_SA, namespace=NAMESPACE)
        proxy.inject(Rule("PUT", r"/resourceclaims/flaky/status$", Reply(500), times=1000),
                     Rule("PUT", r"/resourceclaims/racy/status$", Reply(409), times=1))
        create_all(admin, [pod("flaky", ns, resourceClaimName="flaky"), pod("racy", ns, resourceClaimName="racy")])
        with scheduler_in_process(kubeconfig, dra_drivers=(DRIVER,)):
            wait_for(lambda: bool(pods_of(admin, ns)["racy"]["spec"].get("nodeName")), 60, "the racy pod bound")
            wait_for(lambda: proxy.injected_count(Reply(500)) >= 6, 60, "two decisions for the flaky pod to fail")
        # the scheduler stopped (its requests in flight finished): what the failed decisions left
        flaky = admin.get("resourceclaims", "flaky", ns)
        assert flaky is not None and not pods_of(admin, ns)["flaky"]["spec"].get("nodeName")
        assert not flaky["metadata"].get("finalizers") and not (flaky.get("status") or {}), flaky
        racy = admin.get("resourceclaims", "racy", ns)
        racy_pod = pods_of(admin, ns)["racy"]
        assert racy is not None and kubelet_checks(racy, racy_pod, racy_pod["spec"]["nodeName"], {}) == []
    audit = [r for r in cluster.audit() if r.user == SCHEDULER_USER and r.resource == "resourceclaims"]
    finalizer_writes = [r for r in audit if r.name == "flaky" and r.verb == "update" and not r.subresource]
    assert len(finalizer_writes) >= 4 and len(finalizer_writes) % 2 == 0, "each finalizer added is taken back"
    assert not [r for r in audit if r.name == "flaky" and r.subresource == "status"], "the proxy refused them all"
    assert [r.verb for r in audit if r.name == "racy" and r.verb == "get"], "the claim was read again after the 409"
    # the fault gone, a new scheduler places the pod
    with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "direct.kubeconfig"), dra_drivers=(DRIVER,)):
        wait_for(lambda: bool(pods_of(admin, ns)["flaky"]["spec"].get("nodeName")), 60, "the flaky pod bound")
    flaky_pod = pods_of(admin, ns)["flaky"]
    flaky = admin.get("resourceclaims", "flaky", ns)
    assert kubelet_checks(flaky, flaky_pod, flaky_pod["spec"]["nodeName"], {}) == []
