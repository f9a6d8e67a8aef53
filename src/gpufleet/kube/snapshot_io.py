"""A cluster snapshot as JSON, for `gpufleet snapshot dump` and offline `replay` (KAI's snapshot tool).

Pure: model objects to and from plain JSON (no API access here). The document:

    {"version": 1, "nodes": [NodeInfo...], "running": [Placement...], "podGroups": [PodGroup...],
     "queues": [Queue...], "pending": [PodSpec...], "invalid": [{"pod": "ns/name", "error": "..."}]}

Every field of the model types is written, with the model's names; reading validates through
the model constructors, so a hand-edited dump fails with a `ModelError` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from gpufleet.model import (Gpu, GpuKind, GpuRequest, GpuUuid, ModelError, NodeInfo, NodeName,
                            NodeSelectorRequirement, NodeSelectorTerm, Operator, Placement, PodGroup, PodSpec,
                            PodUid, Queue, Taint, TaintEffect, Toleration, TolerationOperator)

VERSION = 1


@dataclass(frozen=True, slots=True)
class Dump:
    nodes: tuple[NodeInfo, ...]
    running: tuple[Placement, ...]
    pod_groups: tuple[PodGroup, ...] = ()
    queues: tuple[Queue, ...] = ()
    pending: tuple[PodSpec, ...] = ()
    invalid: Mapping[str, str] = field(default_factory=dict)
    """Pending pods whose request cannot be parsed: pod key -> message."""


def dumps(d: Dump) -> str:
    return json.dumps({
        "version": VERSION,
        "nodes": [_node(n) for n in d.nodes],
        "running": [_placement(p) for p in d.running],
        "podGroups": [{"name": g.name, "namespace": g.namespace, "minMember": g.min_member,
                       "maxMember": g.max_member, "requiredTopology": g.required_topology,
                       "preferredTopology": g.preferred_topology} for g in d.pod_groups],
        "queues": [{"name": q.name, "parent": q.parent, "weight": q.weight, "borrow": q.borrow,
                    "guaranteed": dict(q.guaranteed), "limit": dict(q.limit),
                    "namespaces": sorted(q.namespaces) if q.namespaces is not None else None} for q in d.queues],
        "pending": [_pod(p) for p in d.pending],
        "invalid": [{"pod": k, "error": v} for k, v in sorted(d.invalid.items())],
    }, indent=1, sort_keys=False)


def loads(text: str, source: str = "snapshot") -> Dump:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(source, f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ModelError(source, f"not a gpufleet snapshot (version {VERSION})")
    try:
        return Dump(
            tuple(_read_node(n) for n in doc.get("nodes", [])),
            tuple(_read_placement(p) for p in doc.get("running", [])),
            tuple(PodGroup(g["name"], g["minMember"], g.get("namespace", "default"), g.get("maxMember"),
                           g.get("requiredTopology"), g.get("preferredTopology"))
                  for g in doc.get("podGroups", [])),
            tuple(Queue(q["name"], q.get("parent"), q.get("weight", 1.0), q.get("guaranteed", {}), q.get("limit", {}),
                        q.get("borrow", True), _names(q.get("namespaces"))) for q in doc.get("queues", [])),
            tuple(_read_pod(p) for p in doc.get("pending", [])),
            {i["pod"]: i["error"] for i in doc.get("invalid", [])})
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(source, f"malformed: {type(exc).__name__}: {exc}") from None


def _node(n: NodeInfo) -> dict[str, Any]:
    return {"name": n.name, "cpuMilli": n.cpu_milli, "memMiB": n.mem_mib, "maxPods": n.max_pods,
            "labels": dict(n.labels), "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value}
                                                 for t in n.taints],
            "gpus": [{"uuid": g.uuid, "model": g.model, "memMiB": g.mem_mib, "index": g.index,
                      "nvlinkDomain": g.nvlink_domain, "numaNode": g.numa_node, "healthy": g.healthy,
                      "mig": list(g.mig_slices), "migMode": g.mig_mode, "migUuids": list(g.mig_uuids),
                      "migStarts": list(g.mig_starts)}
                     for g in n.gpus]}


def _read_node(d: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(NodeName(d["name"]), d["cpuMilli"], d["memMiB"], d.get("maxPods", 110),
                    MappingProxyType(dict(d.get("labels", {}))),
                    tuple(Taint(t["key"], t.get("value", ""), TaintEffect(t.get("effect", "NoSchedule")))
                          for t in d.get("taints", [])),
                    tuple(Gpu(GpuUuid(g["uuid"]), g["model"], g["memMiB"], g.get("index", 0), g.get("nvlinkDomain"),
                              g.get("numaNode", 0), g.get("healthy", True), tuple(g.get("mig", [])),
                              bool(g.get("migMode", False)), tuple(g.get("migUuids", [])), tuple(g.get("migStarts", [])))
                          for g in d.get("gpus", [])))


def _placement(p: Placement) -> dict[str, Any]:
    return {"pod": p.pod, "node": p.node, "cpuMilli": p.cpu_milli, "memMiB": p.mem_mib, "gpus": list(p.gpus),
            "milli": p.milli, "gpuMemMiB": p.gpu_mem_mib, "migSlices": list(p.mig_slices), "podGroup": p.pod_group}


def _read_placement(d: Mapping[str, Any]) -> Placement:
    return Placement(PodUid(d["pod"]), NodeName(d["node"]), d.get("cpuMilli", 0), d.get("memMiB", 0),
                     tuple(d.get("gpus", [])), d.get("milli", 0), d.get("gpuMemMiB", 0),
                     tuple(d.get("migSlices", [])), d.get("podGroup"))


def _pod(p: PodSpec) -> dict[str, Any]:
    g = p.gpu
    return {"uid": p.uid, "name": p.name, "namespace": p.namespace, "cpuMilli": p.cpu_milli, "memMiB": p.mem_mib,
            "gpu": {"kind": g.kind.value, "count": g.count, "milli": g.milli, "memMiB": g.mem_mib,
                    "migProfile": g.mig_profile},
            "gpuModels": sorted(p.gpu_models), "nodeSelector": dict(p.node_selector),
            "affinity": [[{"key": r.key, "operator": r.operator.value, "values": list(r.values)}
                          for r in term.requirements] for term in p.affinity],
            "tolerations": [{"key": t.key, "operator": t.operator.value, "value": t.value,
                             "effect": t.effect.value if t.effect else None} for t in p.tolerations],
            "priority": p.priority, "queue": p.queue, "podGroup": p.pod_group, "preemptible": p.preemptible,
            "createdS": p.created_s}


def _read_pod(d: Mapping[str, Any]) -> PodSpec:
    g = d.get("gpu", {})
    return PodSpec(
        PodUid(d["uid"]), d["name"], d.get("namespace", "default"), d.get("cpuMilli", 0), d.get("memMiB", 0),
        GpuRequest(GpuKind(g.get("kind", "none")), g.get("count", 0), g.get("milli", 0), g.get("memMiB", 0),
                   g.get("migProfile")),
        frozenset(d.get("gpuModels", [])), MappingProxyType(dict(d.get("nodeSelector", {}))),
        tuple(NodeSelectorTerm(tuple(NodeSelectorRequirement(r["key"], Operator(r["operator"]), tuple(r["values"]))
                                     for r in term)) for term in d.get("affinity", [])),
        tuple(Toleration(t.get("key", ""), TolerationOperator(t.get("operator", "Equal")), t.get("value", ""),
                         TaintEffect(t["effect"]) if t.get("effect") else None) for t in d.get("tolerations", [])),
        d.get("priority", 0), d.get("queue", "default"), d.get("podGroup"), d.get("preemptible", True),
        d.get("createdS", 0.0))


def _names(raw: Any) -> frozenset[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise ValueError(f"namespaces must be a list of names, got {raw!r}")
    return frozenset(raw)
