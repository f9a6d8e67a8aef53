"""A small YAML format for hand-written clusters and workloads (documented in docs/scenarios.md).

Decisions:

- Requests use the names and quantities a Kubernetes pod would (`cpu: 500m`,
  `memory: 4Gi`, `nvidia.com/gpu`, `gpufleet.io/gpu-milli`, `nvidia.com/mig-1g.10gb`,
  nodeSelector, tolerations, required node affinity), parsed once by `model.units`, so a
  scenario reads like the manifests it stands for. `gpufleet.io/gpu-memory` counts MiB, as
  the extended resource does in a cluster (`model.annotations`).
- Allowed GPU models come from required node affinity on `nvidia.com/gpu.product`, as
  DESIGN.md specifies: when every term has an `In` on that label, the union of its values.
- A node entry with `count` is a node group: `count` identical nodes `<name>-<i>`.
- A job with `replicas` > 1 and a `gang` is one gang job (PodGroup named after the job);
  without a gang its replicas are independent single-pod jobs `<name>-<i>`, because a
  `Job` is either one pod or a gang.
- `requestsAs: claims` (top level) makes the jobs' whole GPUs and GPU shares DRA
  ResourceClaims when the scenario is replayed or packed (`Workload.claims`, `sim.claims`):
  the jobs are written the same way, so one scenario runs both ways.
- Unknown keys, duplicate keys and wrong types are errors naming file, line and key
  (`_yaml.Loc`); a scenario is never half-read.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from gpufleet.model import (GPU_PRODUCT_LABEL, NO_GPU, Gpu, GpuRequest, GpuUuid, ModelError, NodeInfo,
                            NodeName, NodeSelectorRequirement, NodeSelectorTerm, Operator, PodGroup, PodSpec,
                            PodUid, Taint, TaintEffect, Toleration, TolerationOperator, gpu_fraction,
                            mig_slices, units, whole_gpus)
from gpufleet.model import pod as pod_model
from gpufleet.model.annotations import (GPU_MEMORY_RESOURCE, GPU_MILLI_RESOURCE, GPU_RESOURCE,
                                        mig_profile_of)
from gpufleet.sim.traces._yaml import Loc, compose
from gpufleet.sim.workload import Job, Workload

NODE_KEYS = ("name", "count", "cpu", "memory", "maxPods", "labels", "taints", "gpus")
GPU_KEYS = ("model", "count", "memory", "nvlinkDomains", "numaNodes", "mig")
JOB_KEYS = ("name", "namespace", "arrival", "duration", "replicas", "gang", "priority", "queue", "preemptible",
            "resources", "nodeSelector", "tolerations", "affinity")
REQUESTS_AS = ("extendedResources", "claims")
"""Values of the top-level `requestsAs`: how the jobs' GPU requests reach the scheduler."""
MAX_GROUP_NODES = 100_000
"""Nodes one `count` may expand to (20x Kubernetes' 5,000-node scalability limit): a typo such
as an extra zero is an error, not a run that never finishes building its cluster."""
MAX_GPUS_PER_NODE = 64
MAX_REPLICAS = 100_000
"""Pods one job may expand to: a million took 16 s to build, and a fuzzed `replicas: 1:2:3:4` (YAML
1.1 reads it in base 60: 223,384) passed the old bound of 1,000,000."""
MAX_PRIORITY = 2**31 - 1
"""Pod priority is an int32 in Kubernetes."""
GPU_RESOURCES = (GPU_RESOURCE, GPU_MILLI_RESOURCE)

E = TypeVar("E", bound=Enum)


def load(path: Path) -> Workload:
    """The scenario in `path`, jobs ordered by arrival (ties in file order)."""
    top = compose(path).mapping(("name", "description", "requestsAs", "nodes", "jobs"), required=("nodes",))
    nodes: list[NodeInfo] = []
    node_names: set[str] = set()
    for loc in top["nodes"].sequence():
        group = _nodes(loc)
        _claim([n.name for n in group], node_names, loc, "node")
        nodes.extend(group)
    if not nodes:
        raise top["nodes"].error("a scenario needs at least one node")
    jobs: list[Job] = []
    pod_uids: set[str] = set()
    for loc in top["jobs"].sequence() if "jobs" in top else []:
        expanded = _jobs(loc, path.name)
        _claim([p.uid for j in expanded for p in j.pods], pod_uids, loc, "pod")
        jobs.extend(expanded)
    jobs.sort(key=lambda job: job.arrival_s)
    return Workload(top["name"].text() if "name" in top else path.stem, tuple(nodes), tuple(jobs),
                    top["description"].text() if "description" in top else "",
                    claims=_requests_as(top["requestsAs"]) == "claims" if "requestsAs" in top else False)


def _requests_as(loc: Loc) -> str:
    value = loc.text()
    if value not in REQUESTS_AS:
        raise loc.error(f"expected one of {', '.join(REQUESTS_AS)}, got {value!r}")
    return value


def _nodes(loc: Loc) -> list[NodeInfo]:
    spec = loc.mapping(NODE_KEYS, required=("name", "cpu", "memory"))
    name = spec["name"].text()
    count = spec["count"].integer(minimum=1, maximum=MAX_GROUP_NODES) if "count" in spec else None
    names = [f"{name}-{i}" for i in range(count)] if count is not None else [name]
    labels = spec["labels"].strings() if "labels" in spec else {}
    taints = tuple(_taint(t) for t in spec["taints"].sequence()) if "taints" in spec else ()
    cpu = units.cpu_milli(spec["cpu"].quantity(), spec["cpu"].where)
    mem = units.mem_mib(spec["memory"].quantity(), spec["memory"].where)
    max_pods = spec["maxPods"].integer() if "maxPods" in spec else 110
    result = []
    for node_name in names:
        gpus = _gpus(spec["gpus"], node_name) if "gpus" in spec else ()
        model = gpus[0].model if gpus else None
        if model is not None and labels.get(GPU_PRODUCT_LABEL, model) != model:
            raise spec["labels"].error(f"{GPU_PRODUCT_LABEL} must match gpus.model {model!r}")
        node_labels = {**labels, GPU_PRODUCT_LABEL: model} if model is not None else labels
        try:
            result.append(NodeInfo(NodeName(node_name), cpu, mem, max_pods, MappingProxyType(node_labels),
                                   taints, gpus))
        except ModelError as exc:
            raise loc.error(str(exc)) from exc
    return result


def _gpus(loc: Loc, node: str) -> tuple[Gpu, ...]:
    spec = loc.mapping(GPU_KEYS, required=("model", "count", "memory"))
    model, count = spec["model"].text(), spec["count"].integer(minimum=1, maximum=MAX_GPUS_PER_NODE)
    mem = units.mem_mib(spec["memory"].quantity(), spec["memory"].where)
    domains = spec["nvlinkDomains"].integer(maximum=count) if "nvlinkDomains" in spec else 0
    numa = spec["numaNodes"].integer(minimum=1, maximum=count) if "numaNodes" in spec else 1
    layouts = _mig_layouts(spec["mig"], count) if "mig" in spec else {}
    per_domain, per_numa = -(-count // max(domains, 1)), -(-count // numa)
    return tuple(Gpu(GpuUuid(f"GPU-{node}-{i}"), model, mem, i,
                     nvlink_domain=f"nvl{i // per_domain}" if domains else None, numa_node=i // per_numa,
                     mig_slices=layouts.get(i, ()))
                 for i in range(count))


def _mig_layouts(loc: Loc, count: int) -> dict[int, tuple[str, ...]]:
    """`mig: {all: [...]}` or `{<gpu index>: [...]}`: the GPU instances carved on each GPU."""
    layouts: dict[int, tuple[str, ...]] = {}
    for key, profiles_loc in loc.mapping().items():
        profiles = tuple(p.text() for p in profiles_loc.sequence())
        if key == "all":
            layouts.update({i: profiles for i in range(count)})
        elif key.isascii() and key.isdigit() and len(key) <= 3 and int(key) < count:  # not '²', not 10**5000
            layouts[int(key)] = profiles
        else:
            raise profiles_loc.error(f"expected 'all' or a GPU index 0..{count - 1}")
    return layouts


def _taint(loc: Loc) -> Taint:
    spec = loc.mapping(("key", "value", "effect"), required=("key",))
    effect = _enum(spec["effect"], TaintEffect) if "effect" in spec else TaintEffect.NO_SCHEDULE
    return Taint(spec["key"].text(), _optional_text(spec, "value"), effect)


def _jobs(loc: Loc, file: str) -> list[Job]:
    spec = loc.mapping(JOB_KEYS, required=("name",))
    name = spec["name"].text()
    replicas = spec["replicas"].integer(minimum=1, maximum=MAX_REPLICAS) if "replicas" in spec else 1
    namespace = spec["namespace"].text() if "namespace" in spec else "default"
    arrival = spec["arrival"].seconds() if "arrival" in spec else 0.0
    duration = _duration(spec["duration"]) if "duration" in spec else None
    group = _gang(spec["gang"], name, namespace, replicas) if "gang" in spec else None
    source = f"{file}:{loc.node.start_mark.line + 1}"

    # Parsed once and copied per replica: 200,000 replicas (`replicas: 1:2:3:4`, YAML 1.1's base 60)
    # took a fuzzed scenario past the hang limit when every copy parsed the resources again.
    template = _pod(spec, name, namespace, arrival, group)

    def pod(pod_name: str) -> PodSpec:
        return dataclasses.replace(template, uid=PodUid(f"{namespace}/{pod_name}"), name=pod_name)

    if group is not None:
        pods = tuple(pod(f"{name}-{i}") for i in range(replicas))
        return [Job(pods, arrival, duration, group, source)]
    names = [f"{name}-{i}" for i in range(replicas)] if replicas > 1 else [name]
    return [Job((pod(n),), arrival, duration, None, source) for n in names]


def _pod(spec: dict[str, Loc], name: str, namespace: str, arrival: float, group: PodGroup | None) -> PodSpec:
    cpu, mem, gpu = _resources(spec["resources"]) if "resources" in spec else (0, 0, NO_GPU)
    affinity = _affinity(spec["affinity"]) if "affinity" in spec else ()
    selector = spec["nodeSelector"].strings() if "nodeSelector" in spec else {}
    tolerations = tuple(_toleration(t) for t in spec["tolerations"].sequence()) if "tolerations" in spec else ()
    priority = spec["priority"].integer(minimum=-MAX_PRIORITY - 1, maximum=MAX_PRIORITY) if "priority" in spec else 0
    queue = spec["queue"].text() if "queue" in spec else "default"
    preemptible = spec["preemptible"].boolean() if "preemptible" in spec else True
    try:
        return PodSpec(PodUid(f"{namespace}/{name}"), name, namespace, cpu, mem, gpu, _gpu_models(affinity),
                       MappingProxyType(selector), affinity, tolerations, priority, queue,
                       group.key if group else None, preemptible, arrival)
    except ModelError as exc:  # e.g. a MIG profile that no allowed GPU model has
        raise spec["name"].error(str(exc)) from exc


def _resources(loc: Loc) -> tuple[int, int, GpuRequest]:
    """(milli-CPU, MiB, GPU request) from `requests`/`limits`; requests win for CPU and memory."""
    parts = loc.mapping(("requests", "limits"))
    merged: dict[str, Loc] = {}
    for part in ("limits", "requests"):
        for key, value in (parts[part].mapping() if part in parts else {}).items():
            if key not in ("cpu", "memory") and key in merged and _amount(merged[key]) != _amount(value):
                raise value.error("requests and limits of an extended resource must be equal")
            merged[key] = value
    cpu = units.cpu_milli(merged["cpu"].quantity(), merged["cpu"].where) if "cpu" in merged else 0
    mem = units.mem_mib(merged["memory"].quantity(), merged["memory"].where) if "memory" in merged else 0
    return cpu, mem, _gpu_request({k: v for k, v in merged.items() if k not in ("cpu", "memory")})


def _amount(loc: Loc) -> Decimal:
    return units.parse_quantity(loc.quantity(), loc.where)


def _gpu_request(extended: dict[str, Loc]) -> GpuRequest:
    for key, value in extended.items():
        if key not in (*GPU_RESOURCES, GPU_MEMORY_RESOURCE) and mig_profile_of(key) is None:
            raise value.error(f"unknown resource; known: cpu, memory, {', '.join(GPU_RESOURCES)}, "
                              f"{GPU_MEMORY_RESOURCE}, nvidia.com/mig-<profile>")
    kinds = [k for k in extended if k != GPU_MEMORY_RESOURCE]
    if len(kinds) > 1:
        raise extended[kinds[1]].error(f"a pod asks for one kind of GPU, but also has {kinds[0]}")
    memory = extended.get(GPU_MEMORY_RESOURCE)
    if memory is not None and kinds != [GPU_MILLI_RESOURCE]:
        raise memory.error(f"a GPU-memory cap applies only to a {GPU_MILLI_RESOURCE} fraction")
    if not kinds:
        return NO_GPU
    value = extended[kinds[0]]
    amount = units.count(value.quantity(), value.where)
    mem = _gpu_memory_mib(memory) if memory is not None else 0
    try:
        if kinds[0] == GPU_RESOURCE:
            return whole_gpus(amount)
        if kinds[0] == GPU_MILLI_RESOURCE:
            return gpu_fraction(amount, mem)
        return mig_slices(str(mig_profile_of(kinds[0])), amount)
    except ModelError as exc:
        raise value.error(exc.problem) from exc


def _gpu_memory_mib(loc: Loc) -> int:
    """The extended resource counts MiB, so `4Gi` would mean 4Gi MiB: require a plain number."""
    value = loc.scalar()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise loc.error(f"counts MiB as a whole number (10240 for 10 GiB), got {value!r}")
    return value


def _affinity(loc: Loc) -> tuple[NodeSelectorTerm, ...]:
    """Kubernetes `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` terms (ORed)."""
    node_affinity = loc.mapping(("nodeAffinity",), required=("nodeAffinity",))["nodeAffinity"]
    required = node_affinity.mapping(("requiredDuringSchedulingIgnoredDuringExecution",),
                                     required=("requiredDuringSchedulingIgnoredDuringExecution",))
    selector = required["requiredDuringSchedulingIgnoredDuringExecution"].mapping(
        ("nodeSelectorTerms",), required=("nodeSelectorTerms",))
    return tuple(_term(term) for term in selector["nodeSelectorTerms"].sequence())


def _term(loc: Loc) -> NodeSelectorTerm:
    expressions = loc.mapping(("matchExpressions",), required=("matchExpressions",))["matchExpressions"]
    return NodeSelectorTerm(tuple(_requirement(r) for r in expressions.sequence()))


def _requirement(loc: Loc) -> NodeSelectorRequirement:
    spec = loc.mapping(("key", "operator", "values"), required=("key", "operator"))
    operator = _enum(spec["operator"], Operator)
    values = tuple(v.label() for v in spec["values"].sequence()) if "values" in spec else ()
    try:
        return NodeSelectorRequirement(spec["key"].text(), operator, values)
    except ModelError as exc:
        raise loc.error(exc.problem) from exc


def _gpu_models(terms: tuple[NodeSelectorTerm, ...]) -> frozenset[str]:
    """Models allowed by every term's `In` on nvidia.com/gpu.product; empty = any model."""
    per_term = [{v for r in t.requirements if r.key == GPU_PRODUCT_LABEL and r.operator is Operator.IN
                 for v in r.values} for t in terms]
    return frozenset().union(*per_term) if per_term and all(per_term) else frozenset()


def _toleration(loc: Loc) -> Toleration:
    spec = loc.mapping(("key", "operator", "value", "effect"))
    return Toleration(_optional_text(spec, "key"),
                      _enum(spec["operator"], TolerationOperator) if "operator" in spec else TolerationOperator.EQUAL,
                      _optional_text(spec, "value"), _enum(spec["effect"], TaintEffect) if "effect" in spec else None)


def _gang(loc: Loc, name: str, namespace: str, replicas: int) -> PodGroup | None:
    """`gang: true` (all replicas), `gang: false`, or `gang: {minMember: n, annotations: {...}}`:
    the PodGroup's topology annotations, in KAI-Scheduler's names, as on the live object."""
    if loc.is_scalar():
        return PodGroup(name, replicas, namespace) if loc.boolean() else None
    spec = loc.mapping(("minMember", "annotations"))
    min_member = replicas
    if "minMember" in spec:
        min_member = spec["minMember"].integer(minimum=1)
        if min_member > replicas:
            raise spec["minMember"].error(f"minMember {min_member} exceeds replicas {replicas}")
    notes = spec["annotations"].mapping((pod_model.TOPOLOGY_ANNOTATION, pod_model.REQUIRED_TOPOLOGY_ANNOTATION,
                                         pod_model.PREFERRED_TOPOLOGY_ANNOTATION)) if "annotations" in spec else {}
    required, preferred = (notes[k].text() if k in notes else None for k in (
        pod_model.REQUIRED_TOPOLOGY_ANNOTATION, pod_model.PREFERRED_TOPOLOGY_ANNOTATION))
    return PodGroup(name, min_member, namespace, required_topology=required or None,
                    preferred_topology=preferred or None)


def _duration(loc: Loc) -> float | None:
    if loc.scalar() is None:
        return None
    seconds = loc.seconds()
    if seconds == 0:
        raise loc.error("a duration must be positive; omit it (or write null) for a job that never ends")
    return seconds


def _enum(loc: Loc, kind: type[E]) -> E:
    text = loc.text()
    for member in kind:
        if member.value == text:
            return member
    raise loc.error(f"unknown value {text!r}; expected one of {', '.join(m.value for m in kind)}")


def _optional_text(spec: dict[str, Loc], key: str) -> str:
    return spec[key].label() if key in spec else ""


def _claim(names: list[str], seen: set[str], loc: Loc, what: str) -> None:
    for name in names:
        if name in seen:
            raise loc.error(f"duplicate {what} name {name!r}")
        seen.add(name)
