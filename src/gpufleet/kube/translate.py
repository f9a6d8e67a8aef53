"""Kubernetes objects (raw JSON dicts) -> model objects, parsed once, at the edge.

* `pod_spec(pod)`: a pending pod as the core sees it. A bad GPU request (1.5 GPUs, an
  unknown MIG profile, a fraction of several GPUs, two kinds at once) raises `ModelError`
  naming the pod and the field; the scheduler turns it into an Unschedulable condition
  with that message, never a crash.
* `node_info(node)`: allocatable CPU, memory and pods, labels, taints, and the GPUs: from
  the agent's `gpufleet.io/gpu-inventory` annotation when present, else `nvidia.com/gpu`
  allocatable with the feature-discovery labels `nvidia.com/gpu.product` and
  `nvidia.com/gpu.memory` (MiB), one synthetic device per GPU.
* `placement(pod, node)`: what a bound pod holds, from its `gpufleet.io/gpu-assignment`
  annotation (device UUIDs -> indices on the node); a GPU pod bound by another scheduler has
  no assignment and gets its devices chosen by the cache (see `cache`).
* `pod_group(obj)`, `queue(obj)`: the scheduler-plugins PodGroup and the gpufleet Queue CRs.
* `pod_claims(pod)`: the pod's DRA ResourceClaims (`spec.resourceClaims`): a named claim
  directly, a template's claim by the name kube-controller-manager recorded in
  `status.resourceClaimStatuses` once it created it; until then the entry is `missing`.

Pod groups are keyed `namespace/name` (a PodGroup's pods live in its namespace).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from types import MappingProxyType
from typing import Any, Collection, Mapping, TypeVar

from gpufleet.model import (GPU_MILLI, GPU_PRODUCT_LABEL, Gpu, GpuRequest, GpuUuid, ModelError, NodeInfo,
                            NodeName, NodeSelectorRequirement, NodeSelectorTerm, Operator, Placement,
                            PodGroup, PodSpec, PodUid, Queue, Taint, TaintEffect, Toleration,
                            TolerationOperator, gpu_fraction, mig_slices, whole_gpus)
from gpufleet.model import annotations as ann
from gpufleet.model import documents
from gpufleet.model import pod as pod_model
from gpufleet.model import queue as queues
from gpufleet.model import units
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION
from gpufleet.model.pod import NO_GPU

Obj = Mapping[str, Any]

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GFD: memory of one GPU in MiB."""
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
MAX_NODE_DEVICES = 4096
"""`nvidia.com/gpu` a node may advertise without an inventory annotation (one synthetic device each):
time slicing multiplies GPUs by the replicas (8 x 48 = 384 is real), but 10**9 is a node that
would take the scheduler minutes and gigabytes to build."""


def meta(obj: Obj) -> Obj:
    m: Obj = obj.get("metadata") or {}
    return m


def key_of(obj: Obj) -> str:
    m = meta(obj)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))


def created_s(obj: Obj) -> float:
    return rfc3339_s(meta(obj).get("creationTimestamp"))


def rfc3339_s(text: object) -> float:
    """RFC 3339 text as Unix seconds; 0.0 when absent or malformed."""
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# -- pods ---------------------------------------------------------------------------------

def scheduling_gated(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def node_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


_SPEC_METADATA = ("name", "namespace", "uid", "creationTimestamp")
BINDING_ANNOTATIONS = frozenset({ann.ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION})
"""What gpufleet's Binding writes besides `spec.nodeName` (binder.py)."""
TOPOLOGY_PREFIX = "topology.kubernetes.io/"
"""The node labels kube-apiserver's PodTopologyLabels admission (on by default since 1.35) copies
onto a pod when it is bound."""


def same_pod_spec(a: Obj, b: Obj, *, bound_since: bool = False) -> bool:
    """Whether `pod_spec` reads the same from both pods, so gives the same answer: it reads the
    spec, the metadata in `_SPEC_METADATA`, the labels and annotations, and
    `status.resourceClaimStatuses` (`pod_claims`), nothing else. A bound pod's later updates (its
    status as it starts and runs, a resourceVersion) change none of it, and translating each again
    costs more than the watch. With `bound_since`, `b` may also differ by what binding pod `a`
    wrote: `spec.nodeName`, gpufleet's `BINDING_ANNOTATIONS` and the node's topology labels
    (the echo of a bind).
    (tests/kube/test_translate.py changes every field of real pods and checks this.)"""
    ma, mb = meta(a), meta(b)
    sa, sb = a.get("spec") or {}, b.get("spec") or {}
    aa, ab = ma.get("annotations") or {}, mb.get("annotations") or {}
    la, lb = ma.get("labels") or {}, mb.get("labels") or {}
    if bound_since:
        sa, sb = _without(sa, ("nodeName",)), _without(sb, ("nodeName",))
        aa, ab = _without(aa, BINDING_ANNOTATIONS), _without(ab, BINDING_ANNOTATIONS)
        la, lb = _without_topology(la), _without_topology(lb)
    claims_a = (a.get("status") or {}).get("resourceClaimStatuses")
    claims_b = (b.get("status") or {}).get("resourceClaimStatuses")
    return sa == sb and aa == ab and la == lb and claims_a == claims_b and all(ma.get(k) == mb.get(k)
                                                                              for k in _SPEC_METADATA)


def _without(d: Mapping[str, Any], keys: Collection[str]) -> Mapping[str, Any]:
    out: dict[str, Any] | None = None
    for k in keys:
        if k in d:
            if out is None:
                out = dict(d)
            del out[k]
    return d if out is None else out


def _without_topology(labels: Mapping[str, Any]) -> Mapping[str, Any]:
    return {k: v for k, v in labels.items() if not k.startswith(TOPOLOGY_PREFIX)}


def same_placement(a: Obj, b: Obj) -> bool:
    """Whether `placement` (on the same node, with the same PodSpec) reads the same from both
    pods: what `same_pod_spec` compares, and `status.startTime`."""
    return same_pod_spec(a, b) and same_start(a, b)


def same_start(a: Obj, b: Obj) -> bool:
    """Whether both pods say the same `status.startTime` (what `placement` reads beyond the spec)."""
    return (a.get("status") or {}).get("startTime") == (b.get("status") or {}).get("startTime")


def pod_spec(pod: Obj) -> PodSpec:
    """The pending pod `pod` as a `PodSpec`; raises ModelError for a request that cannot be met."""
    m, spec = meta(pod), pod.get("spec") or {}
    name, ns = str(m.get("name", "")), str(m.get("namespace") or "default")
    where = f"pod {ns}/{name}"
    labels: Mapping[str, str] = m.get("labels") or {}
    annotations: Mapping[str, str] = m.get("annotations") or {}
    cpu, mem, extended = _requests(spec, where)
    terms, models = _affinity(spec, where)
    group = labels.get(POD_GROUP_LABEL)
    priority = spec.get("priority") or 0
    return PodSpec(
        uid=PodUid(str(m.get("uid") or f"{ns}/{name}")), name=name, namespace=ns, cpu_milli=cpu, mem_mib=mem,
        gpu=gpu_request(extended, where), gpu_models=models,
        node_selector=MappingProxyType(dict(spec.get("nodeSelector") or {})), affinity=terms,
        tolerations=tuple(_toleration(t, f"{where}: tolerations[{i}]")
                          for i, t in enumerate(spec.get("tolerations") or ())),
        priority=priority if isinstance(priority, int) else 0,
        queue=labels.get(queues.QUEUE_LABEL, queues.DEFAULT_QUEUE),
        pod_group=f"{ns}/{group}" if group else None,
        preemptible=annotations.get(queues.PREEMPTIBLE_ANNOTATION, "true").lower() != "false",
        created_s=created_s(pod), claims=pod_claims(pod).keys)


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's ResourceClaims as `namespace/name`."""

    keys: tuple[str, ...] = ()
    """Every claim the pod names or that was generated for it, in `spec.resourceClaims` order."""
    templated: tuple[str, ...] = ()
    """Those generated from a ResourceClaimTemplate: they must be owned by the pod."""
    missing: tuple[str, ...] = ()
    """`spec.resourceClaims` entries (`name (template t)`) whose claim is not created yet."""


def pod_claims(pod: Obj) -> PodClaims:
    """The pod's claims; raises ModelError for an entry naming neither a claim nor a template.

    A template entry whose status entry has no `resourceClaimName` needs no claim (the API's
    rule: "generating a ResourceClaim was not necessary") and is left out."""
    m, spec = meta(pod), pod.get("spec") or {}
    ns, name = str(m.get("namespace") or "default"), str(m.get("name", ""))
    generated: dict[str, object] = {}
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            generated[entry["name"]] = entry.get("resourceClaimName")
    keys: list[str] = []
    templated: list[str] = []
    missing: list[str] = []
    for i, entry in enumerate(spec.get("resourceClaims") or ()):
        where = f"pod {ns}/{name}: spec.resourceClaims[{i}]"
        if not isinstance(entry, Mapping):
            raise ModelError(where, f"expected an object, got {type(entry).__name__}")
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if bool(direct) == bool(template):
            raise ModelError(where, "exactly one of resourceClaimName or resourceClaimTemplateName is required")
        if direct:
            keys.append(f"{ns}/{direct}")
            continue
        entry_name = str(entry.get("name", ""))
        if entry_name not in generated:
            missing.append(f"{entry_name} (template {template})")
        elif generated[entry_name]:
            keys.append(f"{ns}/{generated[entry_name]}")
            templated.append(keys[-1])
    return PodClaims(tuple(keys), tuple(templated), tuple(missing))


def _requests(spec: Obj, where: str) -> tuple[int, int, dict[str, int]]:
    """Effective CPU (milli), memory (MiB) and extended resources: the sum over containers,
    or the largest init container if that is more (as kube-scheduler computes it)."""
    def one(container: Obj, cwhere: str) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = dict(res.get("requests") or {})
        for k, v in (res.get("limits") or {}).items():  # extended resources: limits imply requests
            merged.setdefault(k, v)
        out: dict[str, int] = {}
        for k, v in merged.items():
            f = f"{cwhere}: resources.{documents.printable(k)}"
            if k == "cpu":
                out[k] = units.cpu_milli(v, f)
            elif k == "memory":
                out[k] = units.mem_mib(v, f)
            elif _is_gpu_resource(k):
                out[k] = units.count(v, f)
        return out
    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or ()):
        for k, v in one(c, f"{where}: containers[{i}]").items():
            total[k] = total.get(k, 0) + v
    for i, c in enumerate(spec.get("initContainers") or ()):
        for k, v in one(c, f"{where}: initContainers[{i}]").items():
            total[k] = max(total.get(k, 0), v)
    extended = {k: v for k, v in total.items() if k not in ("cpu", "memory") and v}
    return total.get("cpu", 0), total.get("memory", 0), extended


def _is_gpu_resource(name: str) -> bool:
    return name in (ann.GPU_RESOURCE, ann.GPU_MILLI_RESOURCE, ann.GPU_MEMORY_RESOURCE) \
        or name.startswith(ann.MIG_RESOURCE_PREFIX)


def gpu_request(extended: Mapping[str, int], where: str) -> GpuRequest:
    """Whole GPUs, a fraction or MIG slices from the pod's extended resources (one kind only)."""
    whole = extended.get(ann.GPU_RESOURCE, 0)
    milli = extended.get(ann.GPU_MILLI_RESOURCE, 0)
    memory = extended.get(ann.GPU_MEMORY_RESOURCE, 0)
    migs = {k: v for k, v in extended.items() if k.startswith(ann.MIG_RESOURCE_PREFIX)}
    if milli:
        if migs:
            raise ModelError(f"{where}: {ann.GPU_MILLI_RESOURCE}", "a GPU fraction cannot be combined with MIG slices")
        return gpu_fraction(milli, memory, gpus=max(1, whole), where=where)
    if memory:
        raise ModelError(f"{where}: {ann.GPU_MEMORY_RESOURCE}",
                         f"a GPU-memory cap needs a fraction ({ann.GPU_MILLI_RESOURCE})")
    if migs:
        if whole:
            raise ModelError(f"{where}: {ann.GPU_RESOURCE}", "whole GPUs cannot be combined with MIG slices")
        if len(migs) > 1:
            raise ModelError(f"{where}: resources", f"one MIG profile per pod, got {', '.join(sorted(migs))}")
        (resource, n), = migs.items()
        profile = ann.mig_profile_of(resource) or ""
        return mig_slices(profile, n, where=where)
    if whole:
        return whole_gpus(whole, where)
    return NO_GPU


def _affinity(spec: Obj, where: str) -> tuple[tuple[NodeSelectorTerm, ...], frozenset[str]]:
    """Required node affinity terms; an `In` on the GPU product label also narrows the GPU models."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms: list[NodeSelectorTerm] = []
    models: set[str] | None = None
    for i, term in enumerate(required.get("nodeSelectorTerms") or ()):
        reqs = []
        for j, r in enumerate(term.get("matchExpressions") or ()):
            rwhere = f"{where}: nodeSelectorTerms[{i}].matchExpressions[{j}]"
            op = _enum(Operator, r.get("operator"), f"{rwhere}.operator")
            try:
                reqs.append(NodeSelectorRequirement(str(r.get("key", "")), op, tuple(r.get("values") or ())))
            except ModelError as exc:  # its own `where` names the label key, not the pod
                raise ModelError(rwhere, exc.problem) from None
            if r.get("key") == GPU_PRODUCT_LABEL and op is Operator.IN:
                models = (models or set()) | set(r.get("values") or ())
        terms.append(NodeSelectorTerm(tuple(reqs)))
    # Only a single term narrows the models unambiguously; with ORed terms NodeAffinity decides.
    return tuple(terms), frozenset(models) if models and len(terms) == 1 else frozenset()


def _toleration(t: Obj, where: str) -> Toleration:
    effect = t.get("effect")
    operator = _enum(TolerationOperator, t.get("operator") or "Equal", f"{where}.operator")
    return Toleration(str(t.get("key") or ""), operator, str(t.get("value") or ""),
                      _enum(TaintEffect, effect, f"{where}.effect") if effect else None)


E = TypeVar("E", bound=Enum)


def _enum(kind: type[E], value: object, where: str) -> E:
    """`kind(value)`, or a ModelError naming the field (the API server validates these for
    built-in objects, but a dump or a future API version may still hold another value)."""
    try:
        return kind(value)  # a dict lookup (iterating the members costs more than the rest of pod_spec)
    except (ValueError, TypeError):  # TypeError: an unhashable value, a list or an object
        raise ModelError(where, f"unknown value {value!r}; expected one of {', '.join(str(m.value) for m in kind)}") \
            from None


# -- nodes --------------------------------------------------------------------------------

def node_info(node: Obj) -> NodeInfo:
    m = meta(node)
    name = NodeName(str(m.get("name", "")))
    where = f"node {name}"
    status = node.get("status") or {}
    alloc: Mapping[str, Any] = status.get("allocatable") or status.get("capacity") or {}
    labels: dict[str, str] = dict(m.get("labels") or {})
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("value") or ""),
                         _enum(TaintEffect, t.get("effect", "NoSchedule"), f"{where}: spec.taints[{i}].effect"))
                   for i, t in enumerate((node.get("spec") or {}).get("taints") or ()))
    if (node.get("spec") or {}).get("unschedulable"):
        taints += (Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE),)
    return NodeInfo(name, units.cpu_milli(alloc.get("cpu", 0), f"{where}: allocatable.cpu"),
                    units.mem_mib(alloc.get("memory", 0), f"{where}: allocatable.memory"),
                    units.count(alloc.get("pods", 110), f"{where}: allocatable.pods"),
                    MappingProxyType(labels), taints, node_gpus(node))


def node_gpus(node: Obj) -> tuple[Gpu, ...]:
    m = meta(node)
    name = str(m.get("name", ""))
    inventory = (m.get("annotations") or {}).get(ann.INVENTORY_ANNOTATION)
    if inventory:
        return ann.inventory_to_gpus(ann.decode_inventory(inventory))
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    n = units.count(alloc.get(ann.GPU_RESOURCE, 0), f"node {name}: allocatable.{ann.GPU_RESOURCE}")
    if not n:
        return ()
    if n > MAX_NODE_DEVICES:
        raise ModelError(f"node {name}: allocatable.{ann.GPU_RESOURCE}",
                         f"{n} devices; at most {MAX_NODE_DEVICES} on one node")
    labels = m.get("labels") or {}
    model = labels.get(GPU_PRODUCT_LABEL, "unknown")
    try:
        mem = int(labels.get(GPU_MEMORY_LABEL, "0"))
    except ValueError:
        mem = 0
    return tuple(Gpu(GpuUuid(f"{name}/gpu{i}"), model, mem, i) for i in range(n))


# -- bound pods ---------------------------------------------------------------------------

def assignment_of(pod: Obj) -> ann.GpuAssignment | None:
    text = (meta(pod).get("annotations") or {}).get(ann.ASSIGNMENT_ANNOTATION)
    return ann.decode_assignment(text) if text else None


def placement(pod: Obj, node: NodeInfo, spec: PodSpec) -> Placement:
    """What the bound `pod` holds on `node`; raises ModelError if its assignment does not fit the node."""
    a = assignment_of(pod)
    uid = spec.uid
    started = rfc3339_s((pod.get("status") or {}).get("startTime")) or spec.created_s
    if a is None or a.node != node.name:
        return Placement(uid, node.name, spec.cpu_milli, spec.mem_mib, pod_group=spec.pod_group, queue=spec.queue,
                         priority=spec.priority, preemptible=spec.preemptible, started_s=started)
    by_uuid: dict[str, int] = {g.uuid: j for j, g in enumerate(node.gpus)}
    where = f"pod {spec.key}: annotation {ann.ASSIGNMENT_ANNOTATION}"
    gpus = []
    for u in a.gpus:
        if u not in by_uuid:
            raise ModelError(where, f"GPU {u} is not on node {node.name}")
        gpus.append(by_uuid[u])
    slices = []
    offsets: dict[str, int] = {}
    at = 0
    for g in node.gpus:
        offsets[g.uuid] = at
        at += len(g.mig_slices)
    for ref in a.mig:
        j = by_uuid.get(ref.gpu)
        if j is None or not 0 <= ref.slice < len(node.gpus[j].mig_slices):
            raise ModelError(where, f"MIG slice {ref.slice} of GPU {ref.gpu} is not on node {node.name}")
        local = ref.slice
        if ref.uuid is not None and node.gpus[j].mig_uuids:  # the index may have moved in a layout change
            if ref.uuid not in node.gpus[j].mig_uuids:
                raise ModelError(where, f"MIG device {ref.uuid} is no longer on GPU {ref.gpu} of node {node.name}")
            local = node.gpus[j].mig_uuids.index(ref.uuid)
        slices.append(offsets[ref.gpu] + local)
    # Charged to the queue it was scheduled in: a label changed since (a tenant moving a running
    # pod into another queue of its namespace, with the admission policy off) moves nothing.
    return Placement(uid, node.name, spec.cpu_milli, spec.mem_mib, tuple(gpus), a.milli if gpus else 0,
                     a.mem_mib if gpus else 0, tuple(slices), spec.pod_group, a.queue or spec.queue, spec.priority,
                     spec.preemptible, started)


def assignment(p: Placement, node: NodeInfo) -> ann.GpuAssignment:
    """The annotation for a bind decision: device indices -> UUIDs, node-level slices -> (GPU, slice)."""
    refs = []
    flat = [(g.uuid, s) for g in node.gpus for s in range(len(g.mig_slices))]
    for s in p.mig_slices:
        uuid, local = flat[s]
        mig_uuids = node.gpus[[g.uuid for g in node.gpus].index(uuid)].mig_uuids
        refs.append(ann.MigSliceRef(uuid, local, mig_uuids[local] if mig_uuids else None))
    gpus = tuple(node.gpus[j].uuid for j in p.gpus)
    return ann.GpuAssignment(node.name, gpus, p.milli if gpus else 0, p.gpu_mem_mib if gpus else 0, tuple(refs),
                             p.queue)


# -- custom resources -----------------------------------------------------------------------

def pod_group(obj: Obj) -> PodGroup:
    """The PodGroup, with KAI-Scheduler's topology annotations (`model.pod`) when set; their
    values are checked against the profile's levels when the gang is placed (a level the
    profile lacks makes the gang wait with a reason naming the group and the annotation)."""
    m, spec = meta(obj), obj.get("spec") or {}
    notes = m.get("annotations") or {}
    required = notes.get(pod_model.REQUIRED_TOPOLOGY_ANNOTATION) or None
    preferred = notes.get(pod_model.PREFERRED_TOPOLOGY_ANNOTATION) or None
    return PodGroup(str(m.get("name", "")), spec.get("minMember", 1), str(m.get("namespace") or "default"),
                    required_topology=required, preferred_topology=preferred)


def queue(obj: Obj) -> Queue:
    """A `gpufleet.io/v1alpha1` Queue: quantities -> dims (cpu milli, memory MiB, gpu GPU-milli)."""
    m, spec = meta(obj), obj.get("spec") or {}
    name = str(m.get("name", ""))
    where = f"queue {name}"
    guaranteed = _dims(spec.get("guaranteed") or {}, f"{where}: spec.guaranteed")
    limit = _dims(spec.get("limit") or {}, f"{where}: spec.limit")
    for i, entry in enumerate(spec.get("gpuModels") or ()):
        model = str(entry.get("model", ""))
        for src, dst in (("guaranteed", guaranteed), ("limit", limit)):
            if entry.get(src) is not None:
                dst[queues.gpu_model_dim(model)] = units.count(entry[src], f"{where}: spec.gpuModels[{i}].{src}") * GPU_MILLI
    weight = spec.get("weight", 1)
    namespaces = spec.get("namespaces")
    if namespaces is not None and (not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces)):
        raise ModelError(f"{where}: spec.namespaces", f"must be a list of namespace names, got {namespaces!r}")
    return Queue(name, spec.get("parent") or None, float(weight) if isinstance(weight, (int, float)) else weight,
                 guaranteed, limit, bool(spec.get("borrow", True)),
                 frozenset(namespaces) if namespaces is not None else None)


def _dims(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in raw.items():
        if k == "cpu":
            out[queues.CPU] = units.cpu_milli(v, f"{where}.cpu")
        elif k == "memory":
            out[queues.MEMORY] = units.mem_mib(v, f"{where}.memory")
        elif k == ann.GPU_RESOURCE:
            out[queues.GPU] = units.count(v, f"{where}.{k}") * GPU_MILLI
        else:
            raise ModelError(f"{where}.{documents.printable(k)}",
                             f"unknown resource; expected cpu, memory or {ann.GPU_RESOURCE}")
    return out
