"""Karpenter integration without a server: NodePools as node templates, NodeClaim bodies, which
pods gpufleet provisions for, and the do-not-disrupt guard's timing.

With the real Karpenter (its KWOK provider) on the real control plane: tests/live/test_karpenter_live.py.
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import pytest

from gpufleet.kube import consolidation, karpenter
from gpufleet.kube.karpenter import KarpenterSettings
from gpufleet.kube.nodepools import claim_body, pool_template
from gpufleet.model import ClusterSnapshot, ModelError, PodGroup
from gpufleet.kube import translate
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

H100 = "NVIDIA-H100-80GB-HBM3"
H100_SHAPE = {"instanceType": "p5.48xlarge", "gpuProduct": H100, "gpus": 8, "gpuMemoryMiB": 81559, "cpu": "192",
              "memory": "2048Gi", "pricePerHour": 98.32, "startSeconds": 300}
Obj = dict[str, Any]


def nodepool(name: str, *, shape: dict[str, Any] | None = None, instance_type: str = "p5.48xlarge",
             limits: dict[str, Any] | None = None, requirements: list[Obj] | None = None) -> Obj:
    reqs = requirements if requirements is not None else [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    pool: Obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                 "spec": {"template": {"metadata": {"labels": {"team": "ml"}},
                                       "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                                 "name": "gpu"},
                                                "requirements": reqs,
                                                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                                                "expireAfter": "720h"}},
                          "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}}}
    if shape is not None:
        pool["metadata"]["annotations"] = {"gpufleet.io/node-shape": json.dumps(shape)}
    if limits is not None:
        pool["spec"]["limits"] = limits
    return pool


def pod(name: str, limits: dict[str, Any], *, group: str | None = None) -> Obj:
    labels = {"app": "test", **({"scheduling.x-k8s.io/pod-group": group} if group else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"schedulerName": "gpufleet",
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "train", "resources": {
                         "limits": limits, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}


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
