"""GPU workloads as Kubernetes manifests, and checks of a cluster's state read back from the API.

For end-to-end tests and `bench/e2e.py`, against any API server (the local control plane of
`gpufleet.testing.cluster` or a real cluster; the high-priority pods need `priority_class_manifests()`):

* `pod_manifests(nodes, n, seed=...)`: a reproducible mix of whole GPUs (1, 2, 4, 8),
  fractions (with and without a memory cap), MIG slices of the profiles the nodes carve,
  gangs (with their PodGroups, `group_manifests`), CPU-only pods, several queues, and a few
  pods that fit nowhere (16 GPUs; a GPU model no node has).
* `check_assignments(pods, nodes)`: every bound gpufleet pod carries an assignment that
  matches its node and its request, and no device is overcommitted (a whole GPU held by
  one pod, fractions summing to at most 1000 milli and the GPU's memory, a MIG slice held
  once). Returns the problems as readable lines (empty = all good).
* `check_pending(pods)`: every pending gpufleet pod shows PodScheduled=False with reason
  `Unschedulable` (or `SchedulingGated`), a message, and no nominatedNodeName.
* `placeable(pods, nodes, groups)`: pods the core would still place on the state read back
  (should be none once the scheduler has settled: "every pod that fits is bound").
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import build_for
from gpufleet.framework.profiles import builtin
from gpufleet.kube import translate
from gpufleet.kube.cache import SchedulerCache
from gpufleet.model import Gpu, ModelError, NodeInfo
from gpufleet.model import annotations as ann
from gpufleet.testing.cluster.cluster import DURATION_ANNOTATION

Obj = Mapping[str, Any]
QUEUES = ("team-a", "team-b", "research")
HIGH_PRIORITY_CLASS = "gpufleet-test-high"
"""The PriorityClass (value 100) of the mix's high-priority pods. A real API server's Priority
admission plugin refuses a pod that sets `spec.priority` itself; it takes the value from the class."""


def queue_manifests() -> list[dict[str, Any]]:
    return [{"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": q},
             "spec": {"weight": w, "guaranteed": {"nvidia.com/gpu": g}}}
            for q, w, g in zip(QUEUES, (2, 1, 1), (64, 32, 16))]


def priority_class_manifests() -> list[dict[str, Any]]:
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": HIGH_PRIORITY_CLASS},
             "value": 100, "description": "gpufleet's test workloads: the high-priority pods of the mix"}]


def _mig_profiles(nodes: Iterable[Obj]) -> list[str]:
    found: set[str] = set()
    for n in nodes:
        text = (translate.meta(n).get("annotations") or {}).get(ann.INVENTORY_ANNOTATION)
        if text:
            for g in ann.decode_inventory(text):
                found.update(g.mig)
    return sorted(found)


def _pod(name: str, namespace: str, limits: Mapping[str, Any], rng: random.Random, *,
         labels: Mapping[str, str] | None = None, scheduler: str = ann.SCHEDULER_NAME,
         duration_s: float | None = None, extra_spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {"gpufleet.io/queue": rng.choice(QUEUES), **(labels or {})}}
    if duration_s is not None:
        meta["annotations"] = {DURATION_ANNOTATION: f"{duration_s:g}s"}
    high = rng.choice((False, False, False, True))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, **({"priorityClassName": HIGH_PRIORITY_CLASS} if high else {}),
                     "containers": [{"name": "main", "image": "registry.example/train:1",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                   "limits": dict(limits)}}],
                     **(extra_spec or {})}}


def pod_manifests(nodes: Sequence[Obj], n: int, *, seed: int = 0, namespace: str = "default",
                  prefix: str = "p", duration_s: float | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`n` pods (and the PodGroups their gangs need), in creation order; gang members come together."""
    rng = random.Random(seed)
    migs = _mig_profiles(nodes) or ["1g.10gb"]
    pods: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    i = 0
    while len(pods) < n:
        roll = rng.random()
        name = f"{prefix}-{i:05d}"
        i += 1
        if roll < 0.06 and n - len(pods) >= 4:
            size, gpus = rng.choice(((4, 1), (4, 2), (8, 8), (2, 4)))
            size = min(size, n - len(pods))
            groups.append({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                           "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": size}})
            for m in range(size):
                pods.append(_pod(f"{name}-{m}", namespace, {ann.GPU_RESOURCE: gpus}, rng,
                                 labels={translate.POD_GROUP_LABEL: name}, duration_s=duration_s))
            continue
        if roll < 0.40:
            limits: dict[str, Any] = {ann.GPU_RESOURCE: rng.choice((1, 1, 1, 2, 2, 4, 8))}
        elif roll < 0.62:
            limits = {ann.GPU_MILLI_RESOURCE: rng.choice((100, 250, 300, 500, 700))}
            if rng.random() < 0.3:
                limits[ann.GPU_MEMORY_RESOURCE] = rng.choice((4096, 8192))
        elif roll < 0.80:
            limits = {ann.mig_resource(rng.choice(migs)): 1}
        elif roll < 0.95:
            limits = {}
        elif roll < 0.975:
            limits = {ann.GPU_RESOURCE: 16}  # fits no node
        else:
            affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                       "values": ["NVIDIA-B200"]}]}]}}}
            pods.append(_pod(name, namespace, {ann.GPU_RESOURCE: 1}, rng, extra_spec={"affinity": affinity},
                             duration_s=duration_s))
            continue
        pods.append(_pod(name, namespace, limits, rng, duration_s=duration_s))
    return pods, groups


def check_assignments(pods: Iterable[Obj], nodes: Iterable[Obj], scheduler: str = ann.SCHEDULER_NAME) -> list[str]:
    infos: dict[str, NodeInfo] = {}
    for n in nodes:
        parsed = translate.node_info(n)
        infos[parsed.name] = parsed
    milli: dict[tuple[str, str], int] = defaultdict(int)
    mem: dict[tuple[str, str], int] = defaultdict(int)
    whole: dict[tuple[str, str], list[str]] = defaultdict(list)
    slices: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    problems: list[str] = []
    for p in pods:
        if (p.get("spec") or {}).get("schedulerName") != scheduler or not translate.node_name(p) \
                or translate.is_terminal(p):
            continue
        key, node = translate.key_of(p), translate.node_name(p)
        try:
            spec = translate.pod_spec(p)
            a = translate.assignment_of(p)
        except ModelError as exc:
            problems.append(f"{key}: bound, but {exc}")
            continue
        g = spec.gpu
        if g.kind.value == "none":
            continue
        if a is None:
            problems.append(f"{key}: bound to {node} without an assignment")
            continue
        if a.node != node:
            problems.append(f"{key}: bound to {node} but assigned on {a.node}")
            continue
        info = infos.get(node)
        if info is None:
            problems.append(f"{key}: bound to unknown node {node}")
            continue
        by_uuid: dict[str, Gpu] = {gpu.uuid: gpu for gpu in info.gpus}
        if g.kind.value == "mig":
            if len(a.mig) != g.count or a.gpus:
                problems.append(f"{key}: asked {g.count} MIG {g.mig_profile}, assigned {a}")
            for ref in a.mig:
                gpu = by_uuid.get(ref.gpu)
                if gpu is None or not 0 <= ref.slice < len(gpu.mig_slices) or gpu.mig_slices[ref.slice] != g.mig_profile:
                    problems.append(f"{key}: MIG slice {ref.gpu}#{ref.slice} is not a {g.mig_profile} on {node}")
                slices[(node, ref.gpu, ref.slice)].append(key)
            continue
        if len(a.gpus) != g.count or a.milli != g.milli:
            problems.append(f"{key}: asked {g.count} x {g.milli} milli, assigned {len(a.gpus)} x {a.milli}")
        for u in a.gpus:
            gpu = by_uuid.get(u)
            if gpu is None or gpu.mig_enabled:
                problems.append(f"{key}: GPU {u} is not a whole-GPU device on {node}")
                continue
            if g.kind.value == "whole":
                whole[(node, u)].append(key)
            milli[(node, u)] += a.milli
            mem[(node, u)] += a.mem_mib
            if mem[(node, u)] > gpu.mem_mib:
                problems.append(f"{node} GPU {u}: {mem[(node, u)]} MiB of GPU memory assigned, it has {gpu.mem_mib}")
    for (node, u), total in milli.items():
        if total > 1000:
            problems.append(f"{node} GPU {u}: {total} milli assigned")
    for (node, u), holders in whole.items():
        if len(holders) > 1 or milli[(node, u)] > 1000:
            problems.append(f"{node} GPU {u}: held whole by {holders} (and {milli[(node, u)]} milli in all)")
    for (node, u, s), holders in slices.items():
        if len(holders) > 1:
            problems.append(f"{node} MIG {u}#{s}: held by {holders}")
    return problems


def check_pending(pods: Iterable[Obj], scheduler: str = ann.SCHEDULER_NAME) -> list[str]:
    problems = []
    for p in pods:
        if (p.get("spec") or {}).get("schedulerName") != scheduler or translate.node_name(p) \
                or translate.is_terminal(p):
            continue
        key = translate.key_of(p)
        status = p.get("status") or {}
        cond = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None)
        expected = "SchedulingGated" if translate.scheduling_gated(p) else "Unschedulable"
        if cond is None or cond.get("status") != "False" or cond.get("reason") != expected:
            problems.append(f"{key}: pending without PodScheduled=False/{expected}: {cond}")
        elif not cond.get("message"):
            problems.append(f"{key}: {expected} without a message")
        if status.get("nominatedNodeName"):
            problems.append(f"{key}: nominatedNodeName {status['nominatedNodeName']!r}")
    return problems


def placeable(pods: Iterable[Obj], nodes: Iterable[Obj], groups: Iterable[Obj] = (),
              scheduler: str = ann.SCHEDULER_NAME) -> list[str]:
    """Pending pods that one more cycle of the default profile would place on the state read back."""
    cache = SchedulerCache(scheduler)
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)
    cache.replace_groups(groups)
    pending = {p.spec.uid: p.key for p in cache.pending() if p.spec is not None}
    if not pending:
        return []
    specs = [p.spec for p in cache.pending() if p.spec is not None]
    profile = build_for(builtin("default"), [*cache.bound_specs(), *specs])   # as the live scheduler builds it
    result = schedule(cache.snapshot(), specs, profile, now=0.0, rng=random.Random(0))
    return [f"{pending[b.pod]} fits on {b.node}" for b in result.binds]
