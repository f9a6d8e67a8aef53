"""Karpenter (`karpenter.sh/v1`): NodeClaims for what Karpenter cannot size.

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

Which NodePools gpufleet can size, and how a NodeClaim body is built (`pool_template`,
`limited`, `claim_body`), is in `kube/nodepools.py`. The GPU-aware consolidation guard each
`Provisioner` owns (`Provisioner.guard`, a `Guard`) is in `kube/consolidation.py`.
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from gpufleet.autoscale import NodeTemplate, plan
from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import Profile
from gpufleet.kube import translate
from gpufleet.kube.consolidation import Guard
from gpufleet.kube.errors import KubeError, TemporaryError
from gpufleet.kube.informer import Handler, Informer
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.nodepools import (GROUP_VERSION, NODEPOOL_LABEL, OWNER_LABEL, PODS_ANNOTATION, claim_body, limited,
                                     pool_template)
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier
from gpufleet.model import Cluster, ClusterSnapshot, GpuKind, ModelError, NodeInfo, NodeName, PodSpec, PodUid, Usage

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]

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
            created = [c.pool for c in self._created.values()]
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
                out[name] = limited(cached[1], obj, snapshot, claims, created)
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
        # No nodes at all (a cluster Karpenter alone grows): nothing to place on before planning.
        binds = schedule(aug, targets, profile, now=now, rng=random.Random(0)).binds if aug.cluster.n_nodes else ()
        covered: dict[PodUid, str] = {b.pod: b.node for b in binds if b.node in inflight}
        placed = {b.pod for b in binds}
        rest = [p for p in targets if p.uid not in placed]
        if rest:
            covered.update(self._provision(rest, templates, aug.apply(binds), profile, now))
        # A gang waits whole: its members that fit on existing nodes wait for its NodeClaim too, and
        # those nodes are kept from consolidation meanwhile.
        by_group: dict[str, str] = {}
        for p in targets:
            if p.pod_group and p.uid in covered:
                by_group.setdefault(p.pod_group, covered[p.uid])
        for p in targets:
            if p.uid not in covered and p.pod_group in by_group:
                covered[p.uid] = by_group[p.pod_group]
        self._reserved = {b.node for b in binds if b.pod in covered and b.node not in inflight}
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
