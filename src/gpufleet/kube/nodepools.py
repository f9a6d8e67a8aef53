"""Karpenter NodePools (`karpenter.sh/v1`) as gpufleet `NodeTemplate`s, and the NodeClaims built from them.

Plain data in, plain data out: no I/O here. The `Provisioner` (`kube/karpenter.py`) calls
`pool_template` for each NodePool, `limited` to apply the pool's limits, and `claim_body` for
each node it plans.

**A NodePool gpufleet can size** says what one node is, from, in this order: the NodePool
annotation `gpufleet.io/node-shape` (JSON), single-valued `In` requirements of the
well-known labels (`node.kubernetes.io/instance-type`, `karpenter.k8s.aws/instance-cpu`,
`-memory`, `-gpu-count`, `-gpu-name`, `-gpu-memory`), and the template's labels
(`nvidia.com/gpu.product`, `.count`, `.memory`). Limits come from `spec.limits`
(`nvidia.com/gpu`, `cpu`, `memory`, `nodes`) against the pool's nodes and unregistered
NodeClaims. NodePools without any GPU hint are CPU pools and are skipped.

**A NodeClaim** for one planned node (`claim_body`) is the NodePool's template (nodeClassRef,
requirements narrowed to the shape's instance type, labels, taints), owned by the NodePool,
labelled `karpenter.sh/nodepool`, with the planned pods' requests.
"""

from __future__ import annotations

import json
from dataclasses import replace
from math import ceil
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate
from gpufleet.kube import translate
from gpufleet.model import (GPU_MILLI, GPU_PRODUCT_LABEL, ClusterSnapshot, GpuKind, ModelError, PodSpec, Taint,
                            TaintEffect)
from gpufleet.model import annotations as ann
from gpufleet.model import units

Obj = Mapping[str, Any]

GROUP_VERSION = "karpenter.sh/v1"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
SHAPE_ANNOTATION = "gpufleet.io/node-shape"
"""On a NodePool: JSON describing one node of it (see `Shape`)."""
OWNER_LABEL = "gpufleet.io/provisioner"
"""On NodeClaims gpufleet created: `gpufleet`."""
PODS_ANNOTATION = "gpufleet.io/planned-pods"
"""On NodeClaims gpufleet created: the pods it was planned for (`ns/name ...`), for people."""
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
AWS = "karpenter.k8s.aws/"


# -- NodePool -> NodeTemplate -------------------------------------------------------------

SHAPE_KEYS = {"instanceType": str, "gpuProduct": str, "gpus": int, "gpuMemoryMiB": int, "cpu": (str, int),
              "memory": (str, int), "pricePerHour": (int, float), "startSeconds": (int, float),
              "migLayout": list, "maxPods": int}
"""The `gpufleet.io/node-shape` fields and their JSON types; cpu and memory are quantities."""


def pool_template(pool: Obj) -> NodeTemplate | None:
    """The node one NodePool would add, or None for a pool without GPUs; raises ModelError naming the field."""
    name = str(translate.meta(pool).get("name", ""))
    where = f"NodePool {name}"
    template = (pool.get("spec") or {}).get("template") or {}
    tmeta, tspec = template.get("metadata") or {}, template.get("spec") or {}
    shape = _shape(translate.meta(pool), where)
    single = _single_values(tspec.get("requirements") or ())
    labels: dict[str, str] = {**(tmeta.get("labels") or {}), **single, NODEPOOL_LABEL: name}

    def pick(key: str, *sources: tuple[Mapping[str, Any], str]) -> Any:
        if key in shape:
            return shape[key]
        return next((m[k] for m, k in sources if m.get(k) not in (None, "")), None)
    gpus = pick("gpus", (single, AWS + "instance-gpu-count"), (labels, "nvidia.com/gpu.count"))
    product = pick("gpuProduct", (labels, GPU_PRODUCT_LABEL), (single, AWS + "instance-gpu-name"))
    if gpus is None and product is None and not shape:
        return None  # a CPU pool: not gpufleet's to provision from
    missing = [what for what, v in (("the GPU count (gpus)", gpus), ("the GPU product (gpuProduct)", product)) if v is None]
    gpu_mem = pick("gpuMemoryMiB", (single, AWS + "instance-gpu-memory"), (labels, "nvidia.com/gpu.memory"))
    cpu = pick("cpu", (single, AWS + "instance-cpu"))
    mem = pick("memory", (single, AWS + "instance-memory"))
    missing += [what for what, v in (("the GPU memory (gpuMemoryMiB)", gpu_mem), ("the node's CPU (cpu)", cpu),
                                      ("the node's memory (memory)", mem)) if v is None]
    if missing:
        raise ModelError(where, f"cannot tell {', '.join(missing)} of its nodes: give them in the annotation "
                                f"{SHAPE_ANNOTATION} or as single-valued 'In' requirements ({AWS}instance-gpu-count, "
                                f"-gpu-name, -gpu-memory, -cpu, -memory)")
    instance_type = pick("instanceType", (single, INSTANCE_TYPE))
    if instance_type:
        labels[INSTANCE_TYPE] = str(instance_type)
    n = units.count(gpus, f"{where}: gpus")
    return NodeTemplate(
        name=name, cpu_milli=units.cpu_milli(cpu, f"{where}: cpu"),
        mem_mib=units.mem_mib(mem, f"{where}: memory") if "memory" in shape else units.count(mem, f"{where}: memory"),
        price_per_hour=float(shape.get("pricePerHour", n)), gpu_model=str(product), gpus=n,
        gpu_mem_mib=units.count(gpu_mem, f"{where}: gpuMemoryMiB"), mig_layout=tuple(shape.get("migLayout") or ()),
        max_pods=int(shape.get("maxPods", 110)), labels=MappingProxyType(labels),
        taints=tuple(_taint(t) for t in tspec.get("taints") or ()), start_delay_s=float(shape.get("startSeconds", 0)))


def _shape(m: Obj, where: str) -> dict[str, Any]:
    text = (m.get("annotations") or {}).get(SHAPE_ANNOTATION)
    if not text:
        return {}
    here = f"{where}: annotation {SHAPE_ANNOTATION}"
    try:
        shape = json.loads(text)
    except ValueError as exc:
        raise ModelError(here, f"not valid JSON: {exc}") from None
    if not isinstance(shape, dict):
        raise ModelError(here, "must be a JSON object")
    for k, v in shape.items():
        if k not in SHAPE_KEYS:
            raise ModelError(f"{here}: {k}", f"unknown field; known: {', '.join(SHAPE_KEYS)}")
        if not isinstance(v, SHAPE_KEYS[k]) or isinstance(v, bool):  # type: ignore[arg-type]
            raise ModelError(f"{here}: {k}", f"wrong type: {v!r}")
    return shape


def _single_values(requirements: Iterable[Obj]) -> dict[str, str]:
    return {str(r.get("key")): str(r["values"][0]) for r in requirements
            if r.get("operator") == "In" and len(r.get("values") or ()) == 1}


def _taint(t: Obj) -> Taint:
    return Taint(str(t.get("key", "")), str(t.get("value") or ""), TaintEffect(t.get("effect", "NoSchedule")))


# -- NodePool -> NodeClaim ----------------------------------------------------------------

def claim_body(pool: Obj, template: NodeTemplate, name: str, pods: Sequence[PodSpec]) -> dict[str, Any]:
    """A NodeClaim for one planned node of `pool`, as Karpenter's own provisioner shapes it."""
    m = translate.meta(pool)
    t = (pool.get("spec") or {}).get("template") or {}
    tmeta, tspec = t.get("metadata") or {}, t.get("spec") or {}
    instance_type = template.labels.get(INSTANCE_TYPE)
    requirements = [dict(r) for r in tspec.get("requirements") or ()
                    if not (instance_type and r.get("key") == INSTANCE_TYPE)]
    if instance_type:
        requirements.append({"key": INSTANCE_TYPE, "operator": "In", "values": [instance_type]})
    keys = {r.get("key") for r in requirements}
    pool_labels = {**(tmeta.get("labels") or {}), NODEPOOL_LABEL: template.name}
    requirements += [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pool_labels.items()) if k not in keys]
    labels = {**pool_labels, TEMPLATE_LABEL: template.name, OWNER_LABEL: "gpufleet"}
    spec: dict[str, Any] = {"nodeClassRef": dict(tspec.get("nodeClassRef") or {}), "requirements": requirements,
                            "resources": {"requests": _requests(pods, template)}}
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if tspec.get(key):
            spec[key] = tspec[key]
    return {"apiVersion": GROUP_VERSION, "kind": "NodeClaim",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {**(tmeta.get("annotations") or {}),
                                         PODS_ANNOTATION: " ".join(p.key for p in pods)[:4096]},
                         "ownerReferences": [{"apiVersion": GROUP_VERSION, "kind": "NodePool", "name": m.get("name"),
                                              "uid": m.get("uid")}]},
            "spec": spec}


def _requests(pods: Sequence[PodSpec], template: NodeTemplate) -> dict[str, str]:
    """CPU, memory and the whole GPUs the planned pods use. Karpenter matches requests against
    instance types (which know `nvidia.com/gpu`, not fractions or MIG slices) and marks a claim
    Initialized only when each requested resource is allocatable, so only those are asked for."""
    out = {"cpu": f"{sum(p.cpu_milli for p in pods)}m", "memory": f"{sum(p.mem_mib for p in pods)}Mi",
           "pods": str(len(pods))}
    whole = sum(p.gpu.count for p in pods if p.gpu.kind is GpuKind.WHOLE)
    whole += ceil(sum(p.gpu.milli for p in pods if p.gpu.kind is GpuKind.FRACTION) / GPU_MILLI)
    if whole and not template.mig_layout:
        out[ann.GPU_RESOURCE] = str(min(whole, template.gpus))
    return out


# -- spec.limits --------------------------------------------------------------------------

def limited(t: NodeTemplate, pool: Obj, snapshot: ClusterSnapshot, claims: Iterable[Obj],
            created_pools: Sequence[str]) -> NodeTemplate:
    """`t` with the pool's `spec.limits` as node and GPU limits (in the planner's terms: counting the
    snapshot's nodes labelled with the template, plus the headroom the limits leave). `created_pools`:
    the NodePool of each NodeClaim gpufleet created that the informer does not show yet."""
    limits = (pool.get("spec") or {}).get("limits") or {}
    if not limits:
        return t
    where = f"NodePool {t.name}: spec.limits"
    nodes = gpus = cpu = mem = 0
    registered = set()
    for n in snapshot.cluster.nodes:
        if n.labels.get(NODEPOOL_LABEL) == t.name:
            nodes, gpus, cpu, mem = nodes + 1, gpus + len(n.gpus), cpu + n.cpu_milli, mem + n.mem_mib
            registered.add(n.name)
    unseen = [c for c in claims if ((translate.meta(c).get("labels") or {}).get(NODEPOOL_LABEL) == t.name
                                    and (c.get("status") or {}).get("nodeName") not in registered)]
    k = len(unseen) + sum(1 for pool_name in created_pools if pool_name == t.name)
    nodes, gpus, cpu, mem = nodes + k, gpus + k * t.gpus, cpu + k * t.cpu_milli, mem + k * t.mem_mib
    headroom = 1 << 40
    if "nodes" in limits:
        headroom = min(headroom, units.count(limits["nodes"], f"{where}.nodes") - nodes)
    if "cpu" in limits and t.cpu_milli:
        headroom = min(headroom, (units.cpu_milli(limits["cpu"], f"{where}.cpu") - cpu) // t.cpu_milli)
    if "memory" in limits and t.mem_mib:
        headroom = min(headroom, (units.mem_mib(limits["memory"], f"{where}.memory") - mem) // t.mem_mib)
    if ann.GPU_RESOURCE in limits and t.gpus:
        headroom = min(headroom, (units.count(limits[ann.GPU_RESOURCE], f"{where}.{ann.GPU_RESOURCE}") - gpus) // t.gpus)
    counted = sum(1 for n in snapshot.cluster.nodes if n.labels.get(TEMPLATE_LABEL) == t.name)
    return replace(t, max_nodes=counted + max(0, headroom))
