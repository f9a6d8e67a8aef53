"""Karpenter integration: NodePools as node templates, NodeClaims for what Karpenter cannot size,
the condition Karpenter reacts to, and the do-not-disrupt guard on busy GPU nodes.

The live tests run the scheduler in process (`--karpenter`) against the local API server with
the karpenter.sh/v1 CRDs from `fixtures/` and a simulated cloud provider that turns each
NodeClaim into a GPU node (`gpufleet.testing.apiserver.karpenter`).
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.kube import consolidation, karpenter
from gpufleet.kube.karpenter import KarpenterSettings
from gpufleet.kube.nodepools import claim_body, pool_template
from gpufleet.model import ClusterSnapshot, ModelError, PodGroup
from gpufleet.kube import translate
from gpufleet.testing.apiserver import ApiServer
from gpufleet.testing.apiserver.karpenter import SimulatedKarpenter
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from .gpu_cluster import H100, H100_SHAPE, Bindings, cluster, condition, nodepool, pod, podgroup, scheduler, wait_until

A10 = {"instanceType": "g5.xlarge", "gpuProduct": "NVIDIA-A10", "gpus": 1, "gpuMemoryMiB": 23028, "cpu": "4",
       "memory": "16Gi", "pricePerHour": 1.0}


# -- NodePool -> template, NodeClaim body ---------------------------------------------------

def test_a_nodepool_shape_from_its_annotation() -> None:
    t = pool_template(nodepool("h100", shape=H100_SHAPE, limits={"nvidia.com/gpu": 64}))
    assert t is not None
    assert (t.name, t.gpu_model, t.gpus, t.gpu_mem_mib, t.cpu_milli, t.mem_mib) == \
        ("h100", H100, 8, 81559, 192_000, 2048 * 1024)
    assert t.price_per_hour == 98.32 and t.start_delay_s == 300
    assert t.labels["karpenter.sh/nodepool"] == "h100" and t.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert t.labels["team"] == "ml" and t.labels["karpenter.sh/capacity-type"] == "on-demand"
    assert [(x.key, x.effect.value) for x in t.taints] == [("nvidia.com/gpu", "NoSchedule")]


def test_a_nodepool_shape_from_aws_well_known_requirements() -> None:
    reqs = [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["4"]},
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a10g"]},
            {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "In", "values": ["24576"]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["48"]},
            {"key": "karpenter.k8s.aws/instance-memory", "operator": "In", "values": ["196608"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
    t = pool_template(nodepool("a10g", requirements=reqs))
    assert t is not None
    assert (t.gpu_model, t.gpus, t.gpu_mem_mib, t.cpu_milli, t.mem_mib) == ("a10g", 4, 24576, 48_000, 196608)
    assert t.price_per_hour == 4.0  # no price given: one per GPU-hour
    assert "karpenter.sh/capacity-type" not in t.labels  # two values: not a label every node has


@pytest.mark.parametrize(("pool", "message"), [
    (nodepool("x", shape={"gpus": 8, "gpuProduct": H100}), "cannot tell the GPU memory (gpuMemoryMiB), the node's CPU"),
    (nodepool("x", shape={**H100_SHAPE, "gpu": 8}), "annotation gpufleet.io/node-shape: gpu: unknown field"),
    (nodepool("x", shape={**H100_SHAPE, "gpus": "8"}), "gpus: wrong type: '8'"),
], ids=["an incomplete shape", "a misspelt field", "a count as a string"])
def test_a_nodepool_gpufleet_cannot_size_is_refused_naming_the_field(pool: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as caught:
        pool_template(pool)
    assert "NodePool x" in str(caught.value) and message in str(caught.value)


def test_a_cpu_nodepool_is_not_gpufleets_to_provision_from() -> None:
    assert pool_template(nodepool("cpu", instance_type="m7i.large")) is None


def test_a_nodeclaim_is_the_pools_template_narrowed_to_its_shape() -> None:
    pool = nodepool("h100", shape=H100_SHAPE)
    pool["metadata"]["uid"] = "pool-uid"
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = ["p5.48xlarge", "p5e.48xlarge"]
    t = pool_template(pool)
    assert t is not None
    pods = [translate.pod_spec({**pod(f"m{k}", {"nvidia.com/gpu": 8}, group="g"),
                                "metadata": {"name": f"m{k}", "namespace": "ns", "uid": f"u{k}"}}) for k in range(2)]
    body = claim_body(pool, t, "h100-gf-abc", pods)
    spec, m = body["spec"], body["metadata"]
    assert body["apiVersion"] == "karpenter.sh/v1" and m["name"] == "h100-gf-abc"
    assert m["labels"] == {"team": "ml", "karpenter.sh/nodepool": "h100", "gpufleet.io/node-template": "h100",
                           "gpufleet.io/provisioner": "gpufleet"}
    assert m["ownerReferences"] == [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "h100",
                                     "uid": "pool-uid"}]
    assert m["annotations"]["gpufleet.io/planned-pods"] == "ns/m0 ns/m1"
    assert spec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}
    reqs = {r["key"]: r["values"] for r in spec["requirements"]}
    assert reqs["node.kubernetes.io/instance-type"] == ["p5.48xlarge"]  # narrowed to the planned shape
    assert reqs["karpenter.sh/nodepool"] == ["h100"] and reqs["team"] == ["ml"]
    assert spec["resources"]["requests"] == {"cpu": "2000m", "memory": "2048Mi", "pods": "2", "nvidia.com/gpu": "8"}
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] and spec["expireAfter"] == "720h"


def test_settings_refuse_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown kind.*wholes.*known: gangs, fractions, mig"):
        KarpenterSettings(frozenset({"gangs", "wholes"}))


# -- live -----------------------------------------------------------------------------------

@pytest.fixture
def srv() -> Iterator[ApiServer]:
    with ApiServer(kubelet_start_delay_s=0.01) as s:
        cluster(s)
        small = next(x for x in SHAPES if x.name == "g4dn.xlarge")  # one T4: too small for what follows
        s.create(gpu_node("existing-t4", small, random.Random(1)))
        yield s


def claims_created(srv: ApiServer) -> list[str]:
    return [r.path for r in srv.requests if r.method == "POST" and r.path.endswith("/nodeclaims") and r.status == 201]


def pods(srv: ApiServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in srv.list("pods")}


def settings() -> dict[str, Any]:
    return {"karpenter": KarpenterSettings()}


def test_fractions_get_one_nodeclaim_and_wait_for_it_out_of_karpenters_sight(srv: ApiServer, tmp_path: Path) -> None:
    srv.create(nodepool("a10", shape=A10, instance_type="g5.xlarge"))
    srv.create(nodepool("h100", shape=H100_SHAPE))
    with SimulatedKarpenter(srv, launch_delay_s=1.0) as cloud, scheduler(srv, tmp_path, **settings()):
        for k in range(4):  # asking for A10s: the T4 node that exists does not do
            frac = pod(f"f{k}", {"gpufleet.io/gpu-milli": 250})
            frac["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A10"}
            srv.create(frac)
        wait_until(lambda: all(p["status"].get("nominatedNodeName") for n, p in pods(srv).items() if n[0] == "f"),
                   20, "the fractions to wait for a NodeClaim")
        (claim,) = srv.list("nodeclaims")
        assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "a10"  # four 250m fit one A10, the cheapest
        waiting = [p for p in pods(srv).values() if not p["spec"].get("nodeName")]
        for p in waiting:  # Unschedulable, but nominated: Karpenter ignores it (IsProvisionable)
            assert condition(p)["reason"] == "Unschedulable"
            assert p["status"]["nominatedNodeName"] == claim["metadata"]["name"]
            assert f"waiting for NodeClaim {claim['metadata']['name']}" in condition(p)["message"]
        wait_until(lambda: all(p["spec"].get("nodeName") for n, p in pods(srv).items() if n[0] == "f"), 20,
                   "the fractions bound on the new node")
        (launched,) = cloud.launched
        assert {p["spec"]["nodeName"] for n, p in pods(srv).items() if n[0] == "f"} == {launched[1]}
    assert len(claims_created(srv)) == 1


def test_a_whole_gpu_pod_is_left_to_karpenter_with_exactly_its_condition(srv: ApiServer, tmp_path: Path) -> None:
    srv.create(nodepool("h100", shape=H100_SHAPE))
    with scheduler(srv, tmp_path, **settings()):
        srv.create(pod("whole", {"nvidia.com/gpu": 4}))
        wait_until(lambda: condition(pods(srv)["whole"]).get("reason") == "Unschedulable", 20, "the condition")
        p = pods(srv)["whole"]
        assert condition(p)["status"] == "False" and not p["status"].get("nominatedNodeName")
        assert condition(p)["message"].startswith("0/1 nodes are available")
    assert claims_created(srv) == [] and srv.list("nodeclaims") == []


def test_a_registered_node_without_gpus_yet_is_still_in_flight(srv: ApiServer, tmp_path: Path) -> None:
    """The node registers first and its agent publishes the GPUs later: no second NodeClaim meanwhile."""
    srv.create(nodepool("h100", shape=H100_SHAPE))
    srv.create(podgroup("g", 2))
    with SimulatedKarpenter(srv, launch_delay_s=0.2, agent_delay_s=2.0) as cloud, \
            scheduler(srv, tmp_path, **settings()):
        for k in range(2):
            srv.create(pod(f"m{k}", {"nvidia.com/gpu": 4}, group="g"))
        wait_until(lambda: len(cloud.launched) == 1, 20, "one node launched")
        wait_until(lambda: all(p["spec"].get("nodeName") for p in pods(srv).values() if p["metadata"]["name"][0] == "m"),
                   20, "the gang bound once the agent published the GPUs")
    assert len(claims_created(srv)) == 1  # one 8-GPU node for 2 x 4 GPUs, created once


def test_pool_limits_hold_and_a_gang_is_planned_only_when_complete(srv: ApiServer, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    srv.create(nodepool("h100", shape=H100_SHAPE, limits={"nvidia.com/gpu": 16}))
    srv.create(podgroup("big", 3))
    with scheduler(srv, tmp_path, **settings()), caplog.at_level(logging.INFO, "gpufleet.kube.karpenter"):
        for k in range(2):
            srv.create(pod(f"b{k}", {"nvidia.com/gpu": 8}, group="big"))
        wait_until(lambda: all(condition(p).get("reason") == "Unschedulable" for p in pods(srv).values()), 20,
                   "the incomplete gang waiting")
        assert srv.list("nodeclaims") == []  # 2 of 3 members: nothing planned yet
        srv.create(pod("b2", {"nvidia.com/gpu": 8}, group="big"))
        wait_until(lambda: "exceeds the pool limits" in caplog.text, 20, "the planner's reason")
    assert srv.list("nodeclaims") == []  # 3 x 8 GPUs > 16: nothing half-provisioned
    assert not any(p["status"].get("nominatedNodeName") for p in pods(srv).values())


def test_busy_gpu_nodes_are_kept_from_consolidation_and_idle_ones_let_go(srv: ApiServer, tmp_path: Path) -> None:
    p5 = next(x for x in SHAPES if x.name == "p5.48xlarge")
    for name in ("busy", "idle", "pinned"):
        n = gpu_node(name, p5, random.Random(len(name)))
        n["metadata"]["labels"]["karpenter.sh/nodepool"] = "h100"
        if name == "pinned":  # an operator's own do-not-disrupt: never touched
            n["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] = "true"
        srv.create(n)
    with scheduler(srv, tmp_path, karpenter=KarpenterSettings(release_after_s=0)) as svc:
        job = pod("job", {"nvidia.com/gpu": 1}, tolerate_gpu=False)
        job["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "busy"}
        srv.create(job)

        def annotations(node: str) -> dict[str, str]:
            return (srv.get("nodes", node) or {})["metadata"].get("annotations") or {}
        wait_until(lambda: annotations("busy").get("karpenter.sh/do-not-disrupt") == "true", 20, "busy node guarded")
        assert annotations("busy")["gpufleet.io/do-not-disrupt"] == "gpus-busy"
        assert "karpenter.sh/do-not-disrupt" not in annotations("idle")
        srv.delete("pods", "job")
        wait_until(lambda: "karpenter.sh/do-not-disrupt" not in annotations("busy"), 20, "the guard lifted when idle")
        assert "gpufleet.io/do-not-disrupt" not in annotations("busy")
        assert annotations("pinned")["karpenter.sh/do-not-disrupt"] == "true"
        assert svc.metrics.do_not_disrupt._value.get() == 0


def test_without_the_karpenter_crds_the_scheduler_says_so_and_goes_on(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    with ApiServer(kubelet_start_delay_s=0.01) as srv:
        cluster(srv, karpenter=False)
        srv.create(gpu_node("n", next(x for x in SHAPES if x.name == "p5.48xlarge"), random.Random(1)))
        with caplog.at_level(logging.ERROR, "gpufleet.kube.karpenter"), scheduler(srv, tmp_path, **settings()):
            srv.create(pod("p", {"gpufleet.io/gpu-milli": 500}))
            wait_until(lambda: bool(pods(srv)["p"]["spec"].get("nodeName")), 20, "the pod bound all the same")
    assert "does not serve karpenter.sh/v1 (the NodePool and NodeClaim CRDs): is Karpenter v1 installed?" in caplog.text


def test_targets_are_gangs_fractions_and_mig_as_configured() -> None:
    specs = [translate.pod_spec(pod(n, lim, group=g)) for n, lim, g in (
        ("whole", {"nvidia.com/gpu": 2}, None), ("frac", {"gpufleet.io/gpu-milli": 300}, None),
        ("mig", {"nvidia.com/mig-1g.10gb": 1}, None), ("gang", {"nvidia.com/gpu": 1}, "g"))]
    uids = {s.uid for s in specs}
    snap = ClusterSnapshot.build([], (), [PodGroup("g", 1, "default")])
    p = karpenter.Provisioner.__new__(karpenter.Provisioner)
    for provision, expected in ((KarpenterSettings().provision, {"frac", "mig", "gang"}),
                                (frozenset({"gangs"}), {"gang"})):
        p.settings = KarpenterSettings(provision)
        assert {s.name for s in p.targets(snap, specs, uids)} == expected


class PatchRecorder:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((url, body))
        return {}


def test_a_node_idle_only_briefly_keeps_its_guard() -> None:
    from gpufleet.kube.metrics import Metrics
    from gpufleet.kube.retry import Retrier, RetryPolicy
    from gpufleet.model import NodeName, Placement, PodUid

    now = [100.0]
    rest = PatchRecorder()
    guard = consolidation.Guard(rest, Retrier(RetryPolicy(), logging.getLogger("t")), Metrics(),  # type: ignore[arg-type]
                                release_after_s=30, clock=lambda: now[0])
    raw = gpu_node("n", next(x for x in SHAPES if x.name == "p5.48xlarge"), random.Random(1))
    raw["metadata"]["labels"]["karpenter.sh/nodepool"] = "h100"
    info = translate.node_info(raw)
    busy = ClusterSnapshot.build([info], [Placement(PodUid("p"), NodeName("n"), 0, 0, (0,), 1000, 1)])
    idle = ClusterSnapshot.build([info])

    def settle() -> list[dict[str, Any]]:
        guard.drain()
        out = [b["metadata"]["annotations"] for _, b in rest.patches]
        rest.patches.clear()
        return out
    guard.upsert_node(raw)
    guard.update(busy)
    assert settle() == [{"karpenter.sh/do-not-disrupt": "true", "gpufleet.io/do-not-disrupt": "gpus-busy"}]
    raw["metadata"]["annotations"].update({"karpenter.sh/do-not-disrupt": "true", "gpufleet.io/do-not-disrupt": "x"})
    guard.upsert_node(raw)  # the echo
    guard.update(idle)
    now[0] += 29
    guard.update(idle)
    assert settle() == []  # idle for 29 s: a restarting job keeps its node
    now[0] += 1
    guard.update(idle)
    assert settle() == [{"karpenter.sh/do-not-disrupt": None, "gpufleet.io/do-not-disrupt": None}]
    guard.close()
