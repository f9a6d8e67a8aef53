"""Karpenter (`karpenter.sh/v1`): NodeClaims for what Karpenter cannot size, and a GPU-aware consolidation guard.

**Who provisions what.** Every pod gpufleet cannot place gets `PodScheduled=False`, reason
`Unschedulable`, no `nominatedNodeName`: exactly what Karpenter provisions for. Karpenter
sizes whole-GPU pods well (`nvidia.com/gpu` is in its instance types), so those are left to
it. It cannot size three kinds, and those gpufleet provisions itself (`KarpenterSettings.provision`):

* **gang members**: Karpenter sees pods one by one and may add capacity for some members
  only (or decide in-flight capacity suffices), which leaves the gang unplaceable;
* **GPU fractions** (`gpufleet.io/gpu-milli`) and **MIG slices** (`nvidia.com/mig-*`): no
  instance type advertises these resources, so Karpenter launches nothing (unless a
  NodeOverlay adds them, see docs/autoscaling.md).

For those, once per change, the `Provisioner` builds `NodeTemplate`s from the NodePools
(`pool_template`), adds the not-yet-usable NodeClaims it created earlier to the snapshot as
in-flight nodes, runs `schedule()` there (pods that fit on in-flight capacity need nothing
new) and `autoscale.plan()` for the rest, and creates one NodeClaim per planned node: the
NodePool's template (nodeClassRef, requirements narrowed to the shape's instance type,
labels, taints), owned by the NodePool, labelled `karpenter.sh/nodepool`, with the planned
pods' requests. Every pod it provisions for, or finds in-flight capacity for, is reported
with `nominatedNodeName` set to that NodeClaim's name, which makes Karpenter ignore it
(`IsProvisionable` requires an empty `nominatedNodeName`): the two never provision for the
same pod. A gang is planned only once all its members exist, so a gang that fits nowhere
gets one plan covering all of it. NodeClaims just created are remembered until the informer
shows them, so a cycle in between does not create them again.

**A NodePool gpufleet can size** says what one node is, from, in this order: the NodePool
annotation `gpufleet.io/node-shape` (JSON), single-valued `In` requirements of the
well-known labels (`node.kubernetes.io/instance-type`, `karpenter.k8s.aws/instance-cpu`,
`-memory`, `-gpu-count`, `-gpu-name`, `-gpu-memory`), and the template's labels
(`nvidia.com/gpu.product`, `.count`, `.memory`). Limits come from `spec.limits`
(`nvidia.com/gpu`, `cpu`, `memory`, `nodes`) against the pool's nodes and unregistered
NodeClaims. NodePools without any GPU hint are CPU pools and are skipped.

**Consolidation guard** (`Guard`): Karpenter consolidates by what pods request, so a GPU node
running one long training job on few CPUs looks underutilized. gpufleet annotates each GPU
node of a NodePool whose GPUs are in use (from the snapshot: GPU-milli, MIG slices) or that
pending pods are waiting for with `karpenter.sh/do-not-disrupt: "true"` (which blocks
consolidation and drift of a Node), marked `gpufleet.io/do-not-disrupt: gpus-busy`, and
removes both when its GPUs are idle, so Karpenter may consolidate it. An annotation someone
else set (without the marker) is never touched.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from math import ceil
from types import MappingProxyType
from typing import Any, Collection, Iterable, Mapping, Sequence

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate, plan
from gpufleet.autoscale.removal import gpu_use
from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import Profile
from gpufleet.kube import translate
from gpufleet.kube.errors import KubeError, TemporaryError
from gpufleet.kube.informer import Handler, Informer
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier
from gpufleet.model import (GPU_MILLI, GPU_PRODUCT_LABEL, Cluster, ClusterSnapshot, GpuKind, ModelError, NodeInfo,
                            NodeName, PodSpec, PodUid, Taint, TaintEffect, Usage)
from gpufleet.model import annotations as ann
from gpufleet.model import units

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]

GROUP_VERSION = "karpenter.sh/v1"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SHAPE_ANNOTATION = "gpufleet.io/node-shape"
"""On a NodePool: JSON describing one node of it (see `Shape`)."""
OWNER_LABEL = "gpufleet.io/provisioner"
"""On NodeClaims gpufleet created: `gpufleet`."""
PODS_ANNOTATION = "gpufleet.io/planned-pods"
"""On NodeClaims gpufleet created: the pods it was planned for (`ns/name ...`), for people."""
GUARD_ANNOTATION = "gpufleet.io/do-not-disrupt"
"""On nodes: marks a `karpenter.sh/do-not-disrupt` that gpufleet set (and may remove)."""
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
AWS = "karpenter.k8s.aws/"
KINDS = ("gangs", "fractions", "mig")


@dataclass(frozen=True, slots=True)
class KarpenterSettings:
    provision: frozenset[str] = frozenset(KINDS)
    """Which unschedulable pods gpufleet creates NodeClaims for: `gangs`, `fractions`, `mig`.
    Drop `fractions` and `mig` when a NodeOverlay advertises those resources to Karpenter."""
    guard: bool = True
    """Keep `karpenter.sh/do-not-disrupt` on GPU nodes whose GPUs are busy."""
    release_after_s: float = 30.0
    """A guarded node loses the annotation once its GPUs have been idle this long: a job restarting
    (its pods evicted and recreated, a gang waiting for its last node) does not lose its nodes."""
    replan_s: float = 30.0
    """Plan again at least this often while pods wait, even if nothing seemed to change."""
    claim_ttl_s: float = 60.0
    """A NodeClaim just created counts as in flight for this long before the informer shows it."""

    def __post_init__(self) -> None:
        unknown = set(self.provision) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kind(s) to provision for: {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(KINDS)}")


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


# -- the provisioner ----------------------------------------------------------------------

@dataclass(slots=True)
class _Created:
    pool: str
    at: float
    pods: tuple[PodUid, ...]


@dataclass(slots=True)
class _State:
    key: object = None
    at: float = 0.0
    covered: dict[PodUid, str] = field(default_factory=dict)


class Provisioner:
    """NodeClaims for unschedulable pods Karpenter cannot size; the informers feed it from their threads."""

    def __init__(self, rest: Rest, retrier: Retrier, metrics: Metrics, settings: KarpenterSettings, *,
                 clock: Any = time.monotonic, workers: int = 2) -> None:
        self.settings = settings
        self._rest, self._retrier, self._metrics, self._clock = rest, retrier, metrics, clock
        self._lock = threading.Lock()
        self._pools: dict[str, Obj] = {}
        self._claims: dict[str, Obj] = {}
        self._created: dict[str, _Created] = {}
        self._templates: dict[str, tuple[object, NodeTemplate | None]] = {}
        self._bad: dict[str, str] = {}
        self._said: set[tuple[PodUid, str]] = set()
        self._warned_no_pools = False
        self._reserved: set[str] = set()
        self._state = _State()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="nodeclaim")
        self.informers: list[Informer] = []
        self.guard = Guard(rest, retrier, metrics, release_after_s=settings.release_after_s, clock=clock)

    # -- informers --------------------------------------------------------------------------
    def start_informers(self, stop: threading.Event) -> list[Informer]:
        self.informers = [
            Informer(self._rest, "nodepools", path(GROUP_VERSION, "nodepools"),
                     Handler(self._replace(self._pools), self._upsert(self._pools), self._delete(self._pools)), stop),
            Informer(self._rest, "nodeclaims", path(GROUP_VERSION, "nodeclaims"),
                     Handler(self._replace(self._claims), self._upsert(self._claims), self._delete(self._claims)), stop)]
        for i in self.informers:
            i.start()
        return self.informers

    def _upsert(self, into: dict[str, Obj]) -> Any:
        def upsert(obj: Obj) -> None:
            with self._lock:
                name = str(translate.meta(obj).get("name", ""))
                into[name] = obj
                self._created.pop(name, None)
        return upsert

    def _delete(self, into: dict[str, Obj]) -> Any:
        def delete(obj: Obj) -> None:
            with self._lock:
                into.pop(str(translate.meta(obj).get("name", "")), None)
        return delete

    def _replace(self, into: dict[str, Obj]) -> Any:
        def replace_all(objs: Iterable[Obj]) -> None:
            with self._lock:
                into.clear()
                for o in objs:
                    name = str(translate.meta(o).get("name", ""))
                    into[name] = o
                    self._created.pop(name, None)
        return replace_all

    def synced(self) -> bool:
        return bool(self.informers) and all(i.synced.is_set() for i in self.informers)

    def check_api(self) -> bool:
        """Whether the API server serves karpenter.sh/v1; logs an error naming the problem when not."""
        try:
            self._retrier.call("discover karpenter.sh/v1", lambda: self._rest.get(f"/apis/{GROUP_VERSION}"))
            return True
        except KubeError as exc:
            if exc.kind == "HTTP 404":
                log.error("--karpenter: the API server does not serve %s (the NodePool and NodeClaim CRDs): is "
                          "Karpenter v1 installed? Scheduling goes on; gpufleet creates NodeClaims once they appear",
                          GROUP_VERSION)
            else:
                log.error("--karpenter: cannot check for %s: %s", GROUP_VERSION, exc)
            return False

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.guard.close()

    # -- each cycle ---------------------------------------------------------------------------
    def provision(self, snapshot: ClusterSnapshot, pending: Sequence[PodSpec], unschedulable: Collection[PodUid],
                  profile: Profile, now: float) -> dict[PodUid, str]:
        """Pods gpufleet provisions for -> the NodeClaim each waits for (creating claims as planned)."""
        if not self.synced():
            return {}
        targets = self.targets(snapshot, pending, unschedulable)
        if not targets:
            self._state = _State()
            return {}
        templates = self._pool_templates(snapshot)
        inflight = self.in_flight(snapshot, templates)
        key = (frozenset(p.uid for p in targets), tuple(sorted(inflight)), tuple(sorted(templates)))
        mono = self._clock()
        if key == self._state.key and mono - self._state.at < self.settings.replan_s:
            return dict(self._state.covered)
        covered = self._plan(snapshot, targets, templates, inflight, profile, now)
        self._state = _State(key, mono, covered)
        return dict(covered)

    def targets(self, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
                unschedulable: Collection[PodUid]) -> list[PodSpec]:
        """The unschedulable pods gpufleet provisions for (gangs only once all their members exist)."""
        want = self.settings.provision
        members: dict[str, int] = {}
        for key in [p.pod_group for p in pending] + [p.pod_group for p in snapshot.placements.values()]:
            if key:
                members[key] = members.get(key, 0) + 1
        out = []
        for p in pending:
            if p.uid not in unschedulable:
                continue
            if p.pod_group:
                group = snapshot.pod_groups.get(p.pod_group)
                if "gangs" in want and members[p.pod_group] >= (group.min_member if group else 1):
                    out.append(p)
            elif (p.gpu.kind is GpuKind.FRACTION and "fractions" in want) or (p.gpu.kind is GpuKind.MIG and "mig" in want):
                out.append(p)
        return out

    def _pool_templates(self, snapshot: ClusterSnapshot) -> dict[str, NodeTemplate]:
        """NodePool name -> its template, pool limits applied (what exists or is in flight counted)."""
        with self._lock:
            pools = dict(self._pools)
            claims = list(self._claims.values())
            created = dict(self._created)
        out: dict[str, NodeTemplate] = {}
        for name, obj in sorted(pools.items()):
            version = translate.meta(obj).get("resourceVersion")
            cached = self._templates.get(name)
            if cached is None or cached[0] != version:
                try:
                    cached = (version, pool_template(obj))
                    self._bad.pop(name, None)
                except ModelError as exc:
                    if self._bad.get(name) != str(exc):
                        log.error("%s; gpufleet does not provision from it", exc)
                    self._bad[name] = str(exc)
                    cached = (version, None)
                self._templates[name] = cached
            if cached[1] is not None:
                out[name] = _limited(cached[1], obj, snapshot, claims, created)
        return out

    def in_flight(self, snapshot: ClusterSnapshot, templates: Mapping[str, NodeTemplate]) -> dict[str, str]:
        """gpufleet's NodeClaims whose node is not yet usable (claim name -> NodePool)."""
        now = self._clock()
        with self._lock:
            for name in [n for n, c in self._created.items() if now - c.at > self.settings.claim_ttl_s]:
                log.warning("NodeClaim %s: created %.0f s ago but never seen; no longer counted", name,
                            now - self._created[name].at)
                del self._created[name]
            out = {n: c.pool for n, c in self._created.items()}
            claims = list(self._claims.values())
        index = snapshot.cluster.index
        for c in claims:
            m = translate.meta(c)
            labels = m.get("labels") or {}
            if labels.get(OWNER_LABEL) != "gpufleet" or m.get("deletionTimestamp"):
                continue
            node = str((c.get("status") or {}).get("nodeName") or "")
            i = index.get(NodeName(node))
            if i is None or not snapshot.cluster.nodes[i].gpus:
                out[str(m.get("name"))] = str(labels.get(NODEPOOL_LABEL, ""))
        return {n: pool for n, pool in out.items() if pool in templates and NodeName(n) not in index}

    def waiting_nodes(self, covered: Mapping[PodUid, str]) -> set[str]:
        """Nodes pending pods wait for (kept from consolidation): the registered nodes of their
        NodeClaims, and the existing nodes their gang mates are to use."""
        names = set(covered.values())
        with self._lock:
            registered = {str((c.get("status") or {}).get("nodeName")) for n, c in self._claims.items()
                          if n in names and (c.get("status") or {}).get("nodeName")}
        return registered | (self._reserved if covered else set())

    def _plan(self, snapshot: ClusterSnapshot, targets: list[PodSpec], templates: Mapping[str, NodeTemplate],
              inflight: Mapping[str, str], profile: Profile, now: float) -> dict[PodUid, str]:
        if not templates:
            if not self._warned_no_pools:
                log.warning("%d pod(s) need capacity Karpenter cannot size, but no NodePool describes GPU nodes "
                            "gpufleet can plan for (docs/autoscaling.md)", len(targets))
                self._warned_no_pools = True
            return {}
        self._warned_no_pools = False
        aug = with_nodes(snapshot, [templates[pool].node_info(name) for name, pool in sorted(inflight.items())])
        first = schedule(aug, targets, profile, now=now, rng=random.Random(0))
        covered: dict[PodUid, str] = {b.pod: b.node for b in first.binds if b.node in inflight}
        placed = {b.pod for b in first.binds}
        rest = [p for p in targets if p.uid not in placed]
        if rest:
            covered.update(self._provision(rest, templates, aug.apply(first.binds), profile, now))
        # A gang waits whole: its members that fit on existing nodes wait for its NodeClaim too, and
        # those nodes are kept from consolidation meanwhile.
        by_group: dict[str, str] = {}
        for p in targets:
            if p.pod_group and p.uid in covered:
                by_group.setdefault(p.pod_group, covered[p.uid])
        for p in targets:
            if p.uid not in covered and p.pod_group in by_group:
                covered[p.uid] = by_group[p.pod_group]
        self._reserved = {b.node for b in first.binds if b.pod in covered and b.node not in inflight}
        return covered

    def _provision(self, pods: list[PodSpec], templates: Mapping[str, NodeTemplate], snapshot: ClusterSnapshot,
                   profile: Profile, now: float) -> dict[PodUid, str]:
        """Plan new nodes for `pods` and create their NodeClaims; pod -> claim name."""
        result = plan(pods, list(templates.values()), snapshot, profile=profile, max_removals=0, max_removal_checks=0,
                      now=now)
        spec = {p.uid: p for p in pods}
        covered: dict[PodUid, str] = {}
        for add in result.add:
            for planned in add.pods:
                if planned:
                    name = self._create(add.template, [spec[u] for u in planned if u in spec])
                    covered.update((u, name) for u in planned)
        for uid, why in result.unplaceable.items():
            if (uid, why) not in self._said:
                self._said.add((uid, why))
                log.info("pod %s: no NodeClaim planned: %s", spec[uid].key if uid in spec else uid, why)
        if result.add:
            log.info("plan for %d pod(s): %s", len(pods), result.summary().replace("\n", ";"))
        return covered

    def _create(self, template: NodeTemplate, pods: list[PodSpec]) -> str:
        name = f"{template.name}-gf-{secrets.token_hex(3)}"[:253]
        with self._lock:
            pool = self._pools[template.name]
            self._created[name] = _Created(template.name, self._clock(), tuple(p.uid for p in pods))
        body = claim_body(pool, template, name, pods)
        self._pool.submit(self._post, name, template.name, body, len(pods))
        return name

    def _post(self, name: str, pool: str, body: dict[str, Any], n: int) -> None:
        try:
            self._retrier.call("create nodeclaims", lambda: self._rest.post(path(GROUP_VERSION, "nodeclaims"), body))
        except TemporaryError as exc:
            if exc.kind == "HTTP 409":  # an earlier try of ours landed and its reply was lost
                return
            self._failed(name, exc)
            return
        except KubeError as exc:
            self._failed(name, exc)
            return
        self._metrics.nodeclaims.labels(pool).inc()
        log.info("created NodeClaim %s (NodePool %s) for %d pod(s): %s", name, pool, n,
                 body["metadata"]["annotations"][PODS_ANNOTATION])

    def _failed(self, name: str, exc: KubeError) -> None:
        self._metrics.nodeclaim_errors.labels(exc.kind).inc()
        log.warning("NodeClaim %s not created: %s; planned again next cycle", name, exc)
        with self._lock:
            self._created.pop(name, None)
        self._state = _State()


def _limited(t: NodeTemplate, pool: Obj, snapshot: ClusterSnapshot, claims: Iterable[Obj],
             created: Mapping[str, _Created]) -> NodeTemplate:
    """`t` with the pool's `spec.limits` as node and GPU limits (in the planner's terms: counting the
    snapshot's nodes labelled with the template, plus the headroom the limits leave)."""
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
    k = len(unseen) + sum(1 for c in created.values() if c.pool == t.name)
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


def with_nodes(snapshot: ClusterSnapshot, extra: Sequence[NodeInfo]) -> ClusterSnapshot:
    """`snapshot` plus empty `extra` nodes, keeping readiness, device health and fault times."""
    if not extra:
        return snapshot
    old = snapshot.cluster
    cluster = Cluster([*old.nodes, *extra])
    usage = Usage(cluster)
    usage.place_all((p, cluster.index[p.node]) for p in snapshot.placements.values())
    for name, i in old.index.items():
        j = cluster.index[name]
        usage.fault_at[j] = snapshot.usage.fault_at[i]
        n = int(old.gpu_count[i])
        if not snapshot.usage.node_ready[i] or not (usage.gpu_healthy[j, :n] == snapshot.usage.gpu_healthy[i, :n]).all():
            usage.gpu_healthy[j, :n] = snapshot.usage.gpu_healthy[i, :n]
            usage.set_ready(j, bool(snapshot.usage.node_ready[i]))
    return ClusterSnapshot(cluster, usage, snapshot.placements, snapshot.pod_groups)


# -- consolidation guard ------------------------------------------------------------------

class Guard:
    """Keeps `karpenter.sh/do-not-disrupt` on Karpenter GPU nodes whose GPUs are busy."""

    def __init__(self, rest: Rest, retrier: Retrier, metrics: Metrics, *, release_after_s: float = 30.0,
                 clock: Any = time.monotonic) -> None:
        self._rest, self._retrier, self._metrics = rest, retrier, metrics
        self.release_after_s, self._clock = release_after_s, clock
        self._idle_since: dict[str, float] = {}
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[str | None, str | None]] = {}
        """Node -> (do-not-disrupt value, gpufleet marker) as the node informer last showed."""
        self._writing: dict[str, bool] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="do-not-disrupt")

    def upsert_node(self, obj: Obj) -> None:
        m = translate.meta(obj)
        a = m.get("annotations") or {}
        with self._lock:
            self._seen[str(m.get("name", ""))] = (a.get(DO_NOT_DISRUPT), a.get(GUARD_ANNOTATION))

    def delete_node(self, obj: Obj) -> None:
        with self._lock:
            self._seen.pop(str(translate.meta(obj).get("name", "")), None)

    def replace_nodes(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._seen.clear()
        for o in objs:
            self.upsert_node(o)

    def desired(self, snapshot: ClusterSnapshot, waiting: Collection[str] = ()) -> dict[str, bool]:
        """Karpenter GPU nodes -> whether gpufleet wants them kept (GPUs in use, or pods waiting for them)."""
        c = snapshot.cluster
        return {n.name: n.name in waiting or gpu_use(snapshot, i) > 0
                for i, n in enumerate(c.nodes) if n.gpus and NODEPOOL_LABEL in n.labels}

    def update(self, snapshot: ClusterSnapshot, waiting: Collection[str] = ()) -> None:
        want = self.desired(snapshot, waiting)
        now = self._clock()
        self._futures = [f for f in self._futures if not f.done()]
        for node in [n for n in self._idle_since if want.get(n, True)]:
            del self._idle_since[node]
        with self._lock:
            seen = dict(self._seen)
            writing = dict(self._writing)
        kept = 0
        for node, busy in want.items():
            value, ours = seen.get(node, (None, None))
            if not busy and ours and now - self._idle_since.setdefault(node, now) < self.release_after_s:
                busy = True  # idle only briefly: keep it a while longer
            kept += busy
            if busy and value != "true":
                patch: dict[str, str | None] = {DO_NOT_DISRUPT: "true", GUARD_ANNOTATION: "gpus-busy"}
            elif not busy and ours:
                patch = {DO_NOT_DISRUPT: None, GUARD_ANNOTATION: None} if value == "true" else {GUARD_ANNOTATION: None}
            else:
                continue
            if writing.get(node) == busy:
                continue
            with self._lock:
                self._writing[node] = busy
            self._futures.append(self._pool.submit(self._patch, node, busy, patch))
        self._metrics.do_not_disrupt.set(kept)

    def _patch(self, node: str, busy: bool, annotations: dict[str, str | None]) -> None:
        try:
            self._retrier.call(f"annotate node {node}",
                               lambda: self._rest.patch(path("v1", "nodes", node),
                                                        {"metadata": {"annotations": annotations}}),
                               cooldown=True)
            log.info("node %s: %s", node, "GPUs busy: karpenter.sh/do-not-disrupt set" if busy else
                     "GPUs idle: karpenter.sh/do-not-disrupt removed, Karpenter may consolidate it")
        except KubeError:
            pass  # the Retrier logged it; the next update tries again after its cool-down
        finally:
            with self._lock:
                self._writing.pop(node, None)

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for the annotation writes under way (tests)."""
        futures, self._futures = self._futures, []
        wait(futures, timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
