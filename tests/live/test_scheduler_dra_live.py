"""gpufleet's scheduler allocates DRA claims on the real control plane (issue 21, item 4).

KWOK GPU nodes publish their GPUs in ResourceSlices shaped as NVIDIA's DRA driver publishes
them (driver `gpu.nvidia.com`, devices `gpu-N` with NVIDIA's attributes, written by the agent's
publisher through `gpufleet.testing.dra_objects`; the uuids are the GPUs of the node's
inventory annotation, so each device is linked to its GPU), with NVIDIA's DeviceClasses
`gpu.nvidia.com` and `mig.nvidia.com`: three nodes publish whole GPUs, one Dynamic MIG
(partitionable devices sharing each GPU's counters), one GPUs shared by memory (consumable capacity). The scheduler runs in this process as the
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

from gpufleet.agent.resourceslices import MigMode
from gpufleet.model import annotations as ann
from gpufleet.model.dra import DELETE_PROTECTION
from gpufleet.model.units import parse_quantity
from gpufleet.testing import dra_objects as dra
from gpufleet.testing.cluster import Cluster, KubeClient
from gpufleet.testing.cluster.faultproxy import FaultProxy, Reply, Rule
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from tests.agent.drakubelet import kubelet_checks
from .cluster_kit import (NAMESPACE, SCHEDULER_SA, create_all, install_gpufleet, scheduler_in_process,
                          scheduler_kubeconfig, service_account_user, wait_for)

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
NODES = 5
MIG_NODE, SHARED_NODE = 3, 4
H100 = next(s for s in SHAPES if s.name == "p5.48xlarge")
SCHEDULER_USER = service_account_user(SCHEDULER_SA)


def node_slices(node: Obj, i: int) -> tuple[Obj, ...]:
    """The pool the agent publishes for `node`: whole GPUs, Dynamic MIG (node MIG_NODE) or memory shares (SHARED_NODE)."""
    gpus = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
    return dra.node_slices(node["metadata"]["name"], [g.uuid for g in gpus],
                           mig=MigMode.DYNAMIC if i == MIG_NODE else MigMode.STATIC, memory_shares=i == SHARED_NODE)


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
        create_all(c.admin, [s for i, n in enumerate(nodes) for s in node_slices(n, i)])
        create_all(c.admin, dra.device_classes())
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


def test_mig_placements_and_memory_shares_are_allocated_packed_and_never_overcommitted(
        cluster: Cluster, tmp_path: Path) -> None:
    """Partitionable devices (Dynamic MIG) and consumable capacity, as the real API server takes
    them: what gpufleet writes passes validation and the kubelet's checks, MIG placements of one
    GPU never share a memory slice, memory shares carry what they consume and are packed."""
    admin = cluster.admin
    ns = namespace(admin, "parts")
    requests = {"mig-a": dra.mig_device("1g.10gb"), "mig-b": dra.mig_device("1g.10gb"),
                "mig-c": dra.mig_device("1g.10gb"), "mig-big": dra.mig_device("3g.40gb"),
                "mem-a": dra.gpu_memory("20Gi"), "mem-b": dra.gpu_memory("20Gi"), "mig-odd": dra.mig_device("5g.50gb")}
    create_all(admin, [dra.claim(name, ns, request) for name, request in requests.items()])
    placed = [name for name in requests if name != "mig-odd"]
    create_all(admin, [pod(name, ns, resourceClaimName=name) for name in requests])
    with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "scheduler.kubeconfig"), dra_drivers=(DRIVER,)):
        wait_for(lambda: all(pods_of(admin, ns)[n]["spec"].get("nodeName") for n in placed), 60,
                 "gpufleet to bind the MIG and memory-share pods")
        wait_for(lambda: condition(pods_of(admin, ns)["mig-odd"]).get("reason") == "Unschedulable", 30,
                 "the pod asking for a profile no GPU has to be reported")
    pods = pods_of(admin, ns)
    claims = {c["metadata"]["name"]: c for c in admin.list("resourceclaims", ns)}
    published = {(s["spec"]["pool"]["name"], d["name"]): d for s in admin.list("resourceslices")
                 for d in s["spec"].get("devices", [])}
    mig_node, shared_node = f"dra-gpu-{MIG_NODE}", f"dra-gpu-{SHARED_NODE}"
    slices_taken: dict[tuple[str, str], str] = {}
    mig_gpus: set[str] = set()
    memory: dict[str, list[str]] = {}
    for name in placed:
        p, c = pods[name], claims[name]
        node = p["spec"]["nodeName"]
        assert kubelet_checks(c, p, node, {}) == [], (name, c)
        (result,) = c["status"]["allocation"]["devices"]["results"]
        device = published[result["pool"], result["device"]]
        if name.startswith("mig-"):
            assert node == mig_node and device["attributes"]["type"]["string"] == "mig"
            mig_gpus.add(device["attributes"]["parentUUID"]["string"])
            for use in device["consumesCounters"]:
                for counter in use["counters"]:
                    if counter.startswith("memory-slice-"):
                        key = (use["counterSet"], counter)
                        assert slices_taken.setdefault(key, name) == name, f"{key} in {slices_taken[key]} and {name}"
        else:
            assert node == shared_node and device.get("allowMultipleAllocations")
            assert parse_quantity(result["consumedCapacity"]["memory"], name) == parse_quantity("20Gi", name)
            assert result.get("shareID"), "a device several claims hold gets a share ID per allocation"
            memory.setdefault(result["device"], []).append(name)
    assert len(mig_gpus) == 1, f"three 1g and one 3g placement fit on one GPU, and were spread over {mig_gpus}"
    assert list(memory.values()) == [["mem-a", "mem-b"]], f"the two shares were not packed on one GPU: {memory}"
    odd = condition(pods["mig-odd"])["message"]
    assert f"resourceclaim {ns}/mig-odd: request gpu: no node has 1 device(s) of class mig.nvidia.com" in odd, odd
