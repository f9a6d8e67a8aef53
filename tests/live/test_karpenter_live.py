"""gpufleet with the real Karpenter: its KWOK provider (v1.15) on the real control plane, GPU
instance types (`gpufleet.testing.cluster.karpenter`), and `gpufleet scheduler --karpenter` as a
process under deploy/'s ServiceAccount, so kube-apiserver checks deploy/'s RBAC for nodeclaims,
nodepools and nodes, and the NodeClaim CRD's validation checks every body gpufleet sends.

Karpenter reacts only to gpufleet's condition (`PodScheduled=False`, reason `Unschedulable`, no
`nominatedNodeName`); KWOK plays the nodes Karpenter launches. Who created what is read from
kube-apiserver's audit log (Karpenter's own identity is left out of it: it is not under test).
"""

from __future__ import annotations

import json
import random
import re
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from gpufleet.kube import translate
from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.cluster.karpenter import (G4DN_XLARGE, G5_XLARGE, P5_48XLARGE, Karpenter, nodepool,
                                                 write_instance_types)
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from .cluster_kit import NAMESPACE, SCHEDULER_SA, Scheduler, create_all, install_gpufleet, scheduler_kubeconfig, wait_for

SCHEDULER = f"system:serviceaccount:{NAMESPACE}:{SCHEDULER_SA}"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
Obj = dict[str, Any]


class Env:
    """A cluster with gpufleet's manifests, Karpenter with `pools`, and the scheduler (`--karpenter`)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.stack = ExitStack()
        self.cluster = self.stack.enter_context(Cluster(tmp_path / "cluster"))
        install_gpufleet(self.cluster)
        self.kubeconfig = scheduler_kubeconfig(self.cluster, tmp_path / "scheduler.kubeconfig")
        self.karpenter: Karpenter | None = None
        self.scheduler: Scheduler | None = None

    def start(self, pools: Sequence[Obj], *scheduler_args: str) -> Env:
        self.karpenter = self.stack.enter_context(Karpenter(self.cluster, pools))
        self.scheduler = self.stack.enter_context(Scheduler(self.kubeconfig, self.tmp_path / "scheduler.log", "--qps",
                                                            "0", "--karpenter", *scheduler_args))
        wait_for(self.scheduler.ready, 60, "the scheduler to be ready")
        return self

    @property
    def admin(self) -> Any:
        return self.cluster.admin

    def pods(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in self.admin.list("pods", "default")}

    def claims_created_by_gpufleet(self) -> list[str]:
        return [r.name for r in self.cluster.iter_audit()
                if r.user == SCHEDULER and r.resource == "nodeclaims" and r.verb == "create" and r.code == 201]

    def refused(self) -> list[str]:
        """Requests of the scheduler the API server refused: RBAC (403), a body the schema or
        validation rejects (400, 422). Not 404/409/429, which the scheduler handles and retries."""
        return [f"{r.verb} {r.resource}/{r.subresource} {r.path}: {r.code}" for r in self.cluster.iter_audit()
                if r.user == SCHEDULER and r.code in (400, 401, 403, 422)]

    def close(self) -> None:
        self.stack.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    try:
        yield e
    finally:
        e.close()


def pod(name: str, gpus: int, *, group: str | None = None, tolerate: bool = True,
        selector: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"schedulerName": "gpufleet",
                 "containers": [{"name": "c", "image": "train", "resources": {
                     "limits": {"nvidia.com/gpu": gpus}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if tolerate:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if selector:
        spec["nodeSelector"] = selector
    labels = {"app": "test", **({translate.POD_GROUP_LABEL: group} if group else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": spec}


def podgroup(name: str, min_member: int) -> Obj:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min_member}}


def condition(p: Obj) -> Obj:
    return next((c for c in (p.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"), {})


def labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annots(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def test_instance_types_carry_gpus_and_gfd_labels(tmp_path: Path) -> None:
    """The file Karpenter reads: nvidia.com/gpu in the resources, GFD labels on every offering."""
    types = json.loads(write_instance_types(tmp_path / "types.json").read_text())
    p5 = next(t for t in types if t["name"] == "p5.48xlarge")
    assert p5["resources"]["nvidia.com/gpu"] == "8" and p5["resources"]["cpu"] == "192"
    reqs = {r["key"]: r["values"] for r in p5["offerings"][0]["Requirements"]}
    assert reqs["nvidia.com/gpu.product"] == ["NVIDIA-H100-80GB-HBM3"] and reqs["nvidia.com/gpu.memory"] == ["81559"]
    assert reqs["karpenter.sh/capacity-type"] == ["on-demand"]


# -- a. a whole-GPU pod: gpufleet's condition, Karpenter's node, gpufleet's binding ----------------

def test_a_whole_gpu_pod_that_fits_nowhere_gets_a_node_from_karpenter(env: Env) -> None:
    small = next(s for s in SHAPES if s.name == "g4dn.xlarge")
    env.admin.create(gpu_node("existing-t4", small, random.Random(1)))  # one T4: too small
    env.start([nodepool("h100", [P5_48XLARGE], taints=[GPU_TAINT]), nodepool("a10", [G5_XLARGE]),
               nodepool("t4", [G4DN_XLARGE])])
    started = time.monotonic()
    env.admin.create(pod("whole", 2))

    def state() -> Obj:
        return env.pods()["whole"]
    # gpufleet writes the condition Karpenter provisions for (and nothing else)
    wait_for(lambda: condition(state()).get("reason") == "Unschedulable" or bool(state()["spec"].get("nodeName")), 30,
             "gpufleet's Unschedulable condition")
    seen = state()
    assert not seen["spec"].get("nodeName"), "bound before any node could hold it"
    assert condition(seen)["status"] == "False" and not seen["status"].get("nominatedNodeName")
    assert condition(seen)["message"].startswith("0/1 nodes are available")
    # Karpenter launches a node with 2+ GPUs, and gpufleet binds the pod there
    wait_for(lambda: bool(state()["spec"].get("nodeName")), 90, "the pod bound on a node Karpenter launched")
    took = time.monotonic() - started
    bound = state()
    node = env.admin.get("nodes", bound["spec"]["nodeName"])
    assert node is not None
    assert labels(node)["karpenter.sh/nodepool"] == "h100"  # the only pool whose type has 2 GPUs
    assert labels(node)["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert labels(node)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert annots(node)["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    gpus = {g.uuid for g in translate.node_gpus(node)}
    assignment = ann.decode_assignment(annots(bound)[ann.ASSIGNMENT_ANNOTATION])
    assert assignment.node == node["metadata"]["name"] and len(assignment.gpus) == 2 and set(assignment.gpus) <= gpus
    wait_for(lambda: state()["status"].get("phase") == "Running", 30, "KWOK to run the pod")
    # the NodeClaim is Karpenter's own: whole GPUs are left to it
    (claim,) = claims_with_nodes(env)
    assert "gpufleet.io/provisioner" not in labels(claim) and claim["status"]["nodeName"] == node["metadata"]["name"]
    assert env.claims_created_by_gpufleet() == []
    assert env.karpenter is not None and "default/whole" in env.karpenter.log()
    binders = {r.user for r in env.cluster.iter_audit() if r.subresource == "binding" and r.code == 201}
    assert binders == {SCHEDULER}
    assert env.refused() == []
    print(f"\nwhole-GPU pod: Unschedulable -> Karpenter's p5.48xlarge -> bound in {took:.1f} s")


def claims_with_nodes(env: Env) -> list[dict[str, Any]]:
    """The NodeClaims, once Karpenter has recorded each one's node in its status: it does so after
    the node registered, which can be after gpufleet has already bound pods to that node."""
    wait_for(lambda: all(((c.get("status") or {}).get("nodeName")) for c in env.admin.list("nodeclaims")), 60,
             "Karpenter to record each NodeClaim's node")
    return env.admin.list("nodeclaims")


# -- b. a gang: gpufleet's NodeClaims, exactly its nodes ---------------------------------------------

def test_a_gang_of_8_x_8_gpus_gets_gpufleets_nodeclaims_and_exactly_8_nodes(env: Env) -> None:
    env.start([nodepool("h100", [P5_48XLARGE], taints=[GPU_TAINT], limits={"nvidia.com/gpu": 128}),
               nodepool("a10", [G5_XLARGE])])
    env.admin.create(podgroup("train", 8))
    started = time.monotonic()
    names = [f"train-{k}" for k in range(8)]
    create_all(env.admin, [pod(n, 8, group="train") for n in names])
    wait_for(lambda: all(env.pods()[n]["spec"].get("nodeName") for n in names), 180, "the gang bound")
    took = time.monotonic() - started
    pods = env.pods()
    nodes_of = {n: pods[n]["spec"]["nodeName"] for n in names}
    assert len(set(nodes_of.values())) == 8, f"not one member per node: {nodes_of}"
    claims = claims_with_nodes(env)
    assert len(claims) == 8 and all(labels(c).get("gpufleet.io/provisioner") == "gpufleet" for c in claims), \
        [(c["metadata"]["name"], labels(c).get("gpufleet.io/provisioner")) for c in claims]
    assert sorted(env.claims_created_by_gpufleet()) == sorted(c["metadata"]["name"] for c in claims)
    planned = sorted(n for c in claims for n in annots(c)["gpufleet.io/planned-pods"].split())
    assert planned == sorted(f"default/{n}" for n in names)  # one plan, one member per 8-GPU node
    assert env.scheduler is not None
    assert len(re.findall(r"plan for 8 pod\(s\): add 8 node\(s\)", env.scheduler.log())) == 1
    assert {c["status"]["nodeName"] for c in claims} == set(nodes_of.values())
    assert env.karpenter is not None
    karpenter_nodes = env.karpenter.nodes()
    assert len(karpenter_nodes) == 8 and all(labels(n)["node.kubernetes.io/instance-type"] == "p5.48xlarge"
                                             for n in karpenter_nodes)

    def lifecycle() -> dict[str, str]:
        return {f"{c['metadata']['name']} {x['type']}": f"{x['status']} {x.get('message', '')}"
                for c in env.admin.list("nodeclaims") for x in c["status"]["conditions"]
                if x["type"] in ("Launched", "Registered", "Initialized") and x["status"] != "True"}
    # Karpenter takes gpufleet's NodeClaims through their whole lifecycle (Initialized: each requested
    # resource is allocatable on the node)
    try:
        wait_for(lambda: not lifecycle(), 30, "gpufleet's NodeClaims Launched, Registered and Initialized")
    except AssertionError:
        raise AssertionError(lifecycle()) from None
    assert env.refused() == []
    wait_for(lambda: all(env.pods()[n]["status"].get("phase") == "Running" for n in names), 30, "the gang running")
    print(f"\ngang of 8 x 8 GPUs: 8 NodeClaims by gpufleet, 8 nodes by Karpenter, bound in {took:.1f} s")


# -- c. do-not-disrupt: the busy GPU node stays, the idle one is consolidated ----------------------

def test_busy_gpu_nodes_stay_through_consolidation_and_idle_ones_go(env: Env) -> None:
    """Two 8-GPU nodes; one keeps a 1-GPU job. Karpenter consolidates the idle node away, and would
    replace the busy one with a 1-GPU g5.xlarge (cheaper, enough for what the job requests):
    gpufleet's karpenter.sh/do-not-disrupt keeps it, until it is removed by hand at the end."""
    env.start([nodepool("gpu", [P5_48XLARGE, G5_XLARGE], consolidate_after="10s", shape=False)],
              "--karpenter-release-after", "2")
    create_all(env.admin, [pod("warm-0", 8), pod("warm-1", 8)])
    wait_for(lambda: all(env.pods()[n]["spec"].get("nodeName") for n in ("warm-0", "warm-1")), 90,
             "two p5.48xlarge nodes from Karpenter")
    nodes = {env.pods()[n]["spec"]["nodeName"] for n in ("warm-0", "warm-1")}
    assert len(nodes) == 2
    wait_for(lambda: all(annots(env.admin.get("nodes", n)).get("karpenter.sh/do-not-disrupt") == "true"
                         for n in nodes), 30, "both busy nodes guarded")
    for n in ("warm-0", "warm-1"):
        env.admin.delete("pods", n, "default", grace_period_s=0)
    env.admin.create(pod("job", 1))
    wait_for(lambda: bool(env.pods().get("job", {}).get("spec", {}).get("nodeName")), 30, "the job bound")
    busy = env.pods()["job"]["spec"]["nodeName"]
    (idle,) = nodes - {busy}
    job_uid = env.pods()["job"]["metadata"]["uid"]
    wait_for(lambda: "karpenter.sh/do-not-disrupt" not in annots(env.admin.get("nodes", idle)), 30,
             "the idle node's guard lifted")
    gone = wait_for(lambda: env.admin.get("nodes", idle) is None, 150, "Karpenter to consolidate the idle node")
    node = env.admin.get("nodes", busy)
    assert node is not None and node["metadata"].get("deletionTimestamp") is None
    assert annots(node)["karpenter.sh/do-not-disrupt"] == "true"
    assert annots(node)["gpufleet.io/do-not-disrupt"] == "gpus-busy"
    job = env.pods()["job"]
    assert job["metadata"]["uid"] == job_uid and job["spec"]["nodeName"] == busy
    assert job["status"].get("phase") == "Running"

    def blocked() -> bool:  # Karpenter considered the busy node for disruption and found the annotation
        return any(e.get("reason") == "DisruptionBlocked" and "do-not-disrupt" in (e.get("message") or "")
                   and (e.get("involvedObject") or {}).get("name") == busy for e in env.admin.list("events"))
    wait_for(blocked, 30, "Karpenter's DisruptionBlocked event on the busy node")
    # Control: without the annotation Karpenter does replace the busy node (the guard was what kept it).
    assert env.scheduler is not None
    env.scheduler.terminate()
    env.admin.patch("nodes", busy, {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": None,
                                                                 "gpufleet.io/do-not-disrupt": None}}})
    replaced = wait_for(lambda: any(labels(c).get("node.kubernetes.io/instance-type") == "g5.xlarge"
                                    for c in env.admin.list("nodeclaims"))
                        or (env.admin.get("nodes", busy) or {}).get("metadata", {}).get("deletionTimestamp") is not None,
                        150, "Karpenter to replace the busy node once unguarded")
    print(f"\nidle node consolidated {gone:.0f} s after its guard lifted; the busy one kept; "
          f"unguarded, Karpenter replaced it after {replaced:.0f} s")


# -- ported from the simulated Karpenter (tests/kube/live/test_karpenter.py) -----------------------

def test_fractions_get_one_nodeclaim_of_gpufleets_and_karpenter_leaves_them_alone(env: Env) -> None:
    """Karpenter cannot size GPU fractions (no instance type has gpufleet.io/gpu-milli): gpufleet
    creates one NodeClaim for four quarter-GPUs, nominates it, and binds them on its node."""
    env.start([nodepool("a10", [G5_XLARGE]), nodepool("h100", [P5_48XLARGE], taints=[GPU_TAINT])])
    for k in range(4):
        frac = pod(f"f{k}", 0, selector={"nvidia.com/gpu.product": "NVIDIA-A10"})
        frac["spec"]["containers"][0]["resources"] = {"limits": {"gpufleet.io/gpu-milli": 250},
                                                      "requests": {"cpu": "500m", "memory": "1Gi"}}
        env.admin.create(frac)
    names = [f"f{k}" for k in range(4)]
    wait_for(lambda: all(env.pods()[n]["spec"].get("nodeName") for n in names), 90,
             "the fractions bound on gpufleet's node")
    (claim,) = claims_with_nodes(env)  # four 250m fit one A10, the cheapest
    assert labels(claim)["gpufleet.io/provisioner"] == "gpufleet" and labels(claim)["karpenter.sh/nodepool"] == "a10"
    assert env.claims_created_by_gpufleet() == [claim["metadata"]["name"]]
    node = claim["status"]["nodeName"]
    assert {env.pods()[n]["spec"]["nodeName"] for n in names} == {node}
    wait_for(lambda: annots(env.admin.get("nodes", node)).get("karpenter.sh/do-not-disrupt") == "true", 30,
             "the node of busy fractions guarded")
    # each waited Unschedulable, nominated to the claim (which makes Karpenter ignore it)
    assert env.karpenter is not None and "default/f0" not in env.karpenter.log()
    assert env.refused() == []


def test_a_gang_is_planned_only_when_complete_and_within_the_pool_limits(env: Env) -> None:
    """Karpenter never sees a gang member as provisionable: an incomplete gang, or one beyond the
    pool's limits, gets gpufleet's `GangUnschedulable` and no node is added for part of it."""
    env.start([nodepool("h100", [P5_48XLARGE], taints=[GPU_TAINT], limits={"nvidia.com/gpu": 16})])
    env.admin.create(podgroup("big", 3))
    create_all(env.admin, [pod(f"b{k}", 8, group="big") for k in range(2)])

    def reasons() -> set[str]:
        return {condition(p).get("reason", "") for p in env.pods().values()}
    wait_for(lambda: reasons() == {"GangUnschedulable"}, 30, "the incomplete gang waiting")
    time.sleep(4)  # Karpenter's batch window (1 s idle) and more: time to provision, had it seen the pods
    assert env.admin.list("nodeclaims") == []
    env.admin.create(pod("b2", 8, group="big"))
    scheduler = env.scheduler
    assert scheduler is not None
    wait_for(lambda: "exceeds the pool limits" in scheduler.log(), 30, "the planner's reason")
    time.sleep(4)
    assert env.admin.list("nodeclaims") == []  # 3 x 8 GPUs > 16: nothing half-provisioned
    assert reasons() == {"GangUnschedulable"}
    assert not any(p["status"].get("nominatedNodeName") for p in env.pods().values())
    assert env.karpenter is not None and "default/b0" not in env.karpenter.log()
    events = [e for e in env.admin.list("events", "default") if e.get("reason") == "FailedScheduling"]
    assert events, "no FailedScheduling event for the waiting gang"


def test_without_the_karpenter_crds_the_scheduler_says_so_and_goes_on(tmp_path: Path) -> None:
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        c.admin.create(gpu_node("n", next(s for s in SHAPES if s.name == "p5.48xlarge"), random.Random(1)))
        kubeconfig = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0", "--karpenter") as s:
            wait_for(s.ready, 60, "the scheduler")
            frac = pod("p", 0)
            frac["spec"]["containers"][0]["resources"]["limits"] = {"gpufleet.io/gpu-milli": 500}
            c.admin.create(frac)
            wait_for(lambda: bool((c.admin.get("pods", "p", "default") or {})["spec"].get("nodeName")), 30,
                     "the pod bound all the same")
            assert "does not serve karpenter.sh/v1 (the NodePool and NodeClaim CRDs): is Karpenter v1 installed?" \
                in s.log()
