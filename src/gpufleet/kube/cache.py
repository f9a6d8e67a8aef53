"""`SchedulerCache`: the cluster as the informers last saw it, plus the scheduler's own assumptions.

Informers call `upsert_*`/`delete_*`/`replace_*` from their threads; the scheduling loop calls
`snapshot()` and `pending()`. One lock guards everything; `wait_for_change` lets the loop sleep
until something happened.

**Assumed pods** (kube-scheduler's assume cache). A placement counts in every snapshot from
the moment the cycle decides it (`assume`) until the watch echo shows the pod bound with its
assignment (then the bound pod's own placement takes over), or until `forget` (the bind failed
or found the pod already bound), or until it expires `assume_ttl_s` after the bind call
returned without an echo. So between a bind and its echo nothing is double-booked, and a pod
is never offered to two cycles at once.

**Restart.** Nothing is persisted: a new process lists every pod, and each bound pod's
`gpufleet.io/gpu-assignment` annotation says which devices it holds. The annotation is written
before the Binding, so a pod the old process bound has one; a pod it annotated but did not
bind is still pending and is simply scheduled again (the annotation is overwritten).

Bound pods that carry no assignment (placed by another scheduler through NVIDIA's device
plugin, say) still hold GPUs: the snapshot gives them the lowest free devices of their node
(whole GPUs or MIG slices), so gpufleet never counts those GPUs as free.

**DRA** (`dra_cache`): the devices of the complete pools of gpufleet's drivers join the
`Cluster` (rebuilt when slices change, as when nodes do). A bound pod's placement carries its
allocated claims reserved for it alone, so evicting it frees them; every other allocated claim
is held by the snapshot itself. The claims of assumed placements show as allocated until the
writes echo back, so no later cycle allocates them again.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from gpufleet.framework.plugins.fragmentation import TaskSpec, task_spec
from gpufleet.kube import translate
from gpufleet.kube.dra_cache import DraCache
from gpufleet.model import (GPU_MILLI, Cluster, ClusterSnapshot, GpuKind, ModelError, NodeInfo, Placement,
                            PodGroup, PodSpec, PodUid, Queue, Usage)
from gpufleet.model.annotations import SCHEDULER_NAME
from gpufleet.model.dra import DraState

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Pending:
    """A pod waiting for gpufleet: its spec, or why it cannot be scheduled as written."""

    key: str
    obj: Obj
    spec: PodSpec | None
    error: str = ""
    gated: bool = False
    seen: float = 0.0
    """When the pod was created, on this process's monotonic clock: when its watch event
    arrived, or for pods found by a list, estimated from `creationTimestamp`."""
    claims: translate.PodClaims = translate.PodClaims()


@dataclass(slots=True)
class _Bound:
    obj: Obj
    spec: PodSpec
    placement: Placement | None
    """None while its node is unknown; recomputed when the node appears."""
    needs_devices: bool = False
    """Holds GPUs but carries no assignment: devices are chosen when a snapshot is built."""


@dataclass(slots=True)
class _Counted:
    """The usage of the placements counted in the last snapshot, kept for the next one."""

    cluster: Cluster
    usage: Usage
    placements: dict[PodUid, Placement]
    by_key: dict[str, PodUid] = field(default_factory=dict)
    """Pod key -> the uid its counted placement is under."""
    with_claims: set[PodUid] = field(default_factory=set)
    """The counted placements that hold DRA claims."""
    refused: bool = False


@dataclass(slots=True)
class _Assumed:
    placement: Placement
    obj: Obj
    """The pod as last seen, to queue it again if the assumption is dropped."""
    seen: float
    expires: float | None = None
    """None while the bind is in flight; set when the bind call returned."""
    spec: PodSpec | None = None
    """`obj` translated (the echo of the bind reuses it when nothing else changed)."""


class SchedulerCache:
    def __init__(self, scheduler_name: str = SCHEDULER_NAME, *, assume_ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, dra_drivers: Iterable[str] = ()) -> None:
        self.scheduler_name = scheduler_name
        self.assume_ttl_s = assume_ttl_s
        self._clock = clock
        self._cond = threading.Condition()
        self.version = 0
        self._nodes: dict[str, NodeInfo] = {}
        self._cluster: Cluster | None = None
        self._pending: dict[str, Pending] = {}
        self._bound: dict[str, _Bound] = {}
        self._assumed: dict[str, _Assumed] = {}
        self._groups: dict[str, PodGroup] = {}
        self._queues: dict[str, Queue] = {}
        self._bad: set[str] = set()
        self._finished: dict[str, tuple[str, str]] = {}
        """Terminal gang members: pod key -> (group key, phase), for the PodGroup status."""
        self._counted: _Counted | None = None
        self._dirty: set[str] = set()
        """Pods whose bound or assumed placement may have changed since the last snapshot."""
        self._unassigned: set[str] = set()
        """Bound pods holding GPUs without an assignment (their devices are chosen per snapshot)."""
        self._claimed: set[str] = set()
        """Bound pods with DRA claims: what they hold depends on the claims, so every snapshot looks again."""
        self._grouped: set[str] = set()
        """Bound pods labelled with a PodGroup, so the groups' status needs no pass over every pod."""
        self._shapes: Counter[TaskSpec] = Counter()
        """Bound pods per shape (`task_spec`), for the typical-task mix without a pass over every pod."""
        self._dra = DraCache(dra_drivers, self._once)
        self._dra_problems: tuple[str, ...] = ()

    # -- change notification --------------------------------------------------------------
    def _changed(self) -> None:
        self.version += 1
        self._cond.notify_all()

    def wait_for_change(self, version: int, timeout_s: float) -> int:
        """Block until the cache version differs from `version` (or the timeout); the new version."""
        with self._cond:
            if self.version == version:
                self._cond.wait(timeout_s)
            return self.version

    def poke(self) -> None:
        with self._cond:
            self._changed()

    # -- nodes ------------------------------------------------------------------------------
    def upsert_node(self, obj: Obj) -> None:
        name = str(translate.meta(obj).get("name", ""))
        try:
            info = translate.node_info(obj)
        except ModelError as exc:
            self._once(f"node/{name}", f"ignoring node {name}: {exc}")
            info = None
        with self._cond:
            if info is None:
                self._nodes.pop(name, None)
            elif self._nodes.get(name) == info:
                return
            else:
                self._nodes[name] = info
            self._cluster = None
            self._reattach(name)
            self._changed()

    def delete_node(self, obj: Obj) -> None:
        name = str(translate.meta(obj).get("name", ""))
        with self._cond:
            if self._nodes.pop(name, None) is not None:
                self._cluster = None
                self._reattach(name)
                self._changed()

    def replace_nodes(self, objs: Iterable[Obj]) -> None:
        objs = list(objs)
        names = {str(translate.meta(o).get("name", "")) for o in objs}
        with self._cond:
            gone = [n for n in self._nodes if n not in names]
        for o in objs:
            self.upsert_node(o)
        for n in gone:
            self.delete_node({"metadata": {"name": n}})

    def _reattach(self, node: str) -> None:
        for key, b in list(self._bound.items()):
            if translate.node_name(b.obj) == node:
                self._set_bound(key, self._make_bound(key, b.obj, b.spec))

    # -- pods -------------------------------------------------------------------------------
    def upsert_pod(self, obj: Obj, *, listed: bool = False) -> None:
        """Add or update a pod. A cycle is woken only when the update can change a decision:
        a pending pod that is new or asks differently, capacity that frees up, a new holding.
        A bound pod turning Running, or our own condition on a pending pod echoing back, does not."""
        key = translate.key_of(obj)
        with self._cond:
            held = self._bound.get(key)
            same_spec = held is not None and translate.same_pod_spec(held.obj, obj)  # once: it is not cheap
            if held is not None and same_spec and not translate.is_terminal(obj) and \
                    translate.same_start(held.obj, obj):
                held.obj = obj  # a bound pod's status update (`same_placement`): it holds what it held
                return
            before = self._pending.pop(key, None)
            held = self._pop_bound(key)
            m = translate.meta(obj)
            relevant = True
            if translate.is_terminal(obj):
                self._pop_assumed(key)
                group = (m.get("labels") or {}).get(translate.POD_GROUP_LABEL)
                if group:
                    self._finished[key] = (f"{m.get('namespace') or 'default'}/{group}",
                                           str((obj.get("status") or {}).get("phase")))
            elif translate.node_name(obj):
                # Bound, and holding its devices until it is gone: a terminating pod (an
                # evicted victim in its grace period) still runs.
                echo = self._pop_assumed(key)  # the echo: the bound pod's own placement takes over
                if held is not None and same_spec:  # `held` is what `_pop_bound` gave back
                    spec = held.spec
                elif echo is not None and echo.spec is not None and \
                        translate.same_pod_spec(echo.obj, obj, bound_since=True):
                    spec = echo.spec  # the echo of our bind: the pod as it was scheduled
                else:
                    spec = self._lenient_spec(obj)
                now_held = self._make_bound(key, obj, spec)
                self._set_bound(key, now_held)
                # The echo of our own bind, holding what was assumed, changes no decision.
                before_held = held.placement if held is not None else echo.placement if echo is not None else None
                relevant = before_held is None or not _same_holding(before_held, now_held.placement)
            elif key in self._assumed:
                a = self._assumed[key]  # still binding: not offered to another cycle
                if a.spec is not None and not translate.same_pod_spec(a.obj, obj):
                    a.spec = None  # what was scheduled is not what the echo will show
                a.obj = obj
                relevant = False
            elif m.get("deletionTimestamp"):
                pass  # being deleted before it was bound: nothing to schedule
            elif (obj.get("spec") or {}).get("schedulerName") == self.scheduler_name:
                if before is not None and translate.same_pod_spec(before.obj, obj):
                    # a status update, such as our own PodScheduled=False echoing back: it asks
                    # what it asked, so what was read from it holds (one echo per pod that fits nowhere)
                    now_pending = dataclasses.replace(before, obj=obj)
                else:
                    seen = before.seen if before is not None else self._seen(obj, listed)
                    now_pending = self._make_pending(key, obj, seen)
                self._pending[key] = now_pending
                relevant = before is None or (before.spec, before.error, before.gated) != (
                    now_pending.spec, now_pending.error, now_pending.gated)
            else:
                relevant = False  # another scheduler's pending pod
            if relevant:
                self._changed()

    def delete_pod(self, obj: Obj) -> None:
        key = translate.key_of(obj)
        with self._cond:
            self._finished.pop(key, None)
            found = [self._pending.pop(key, None), self._pop_bound(key), self._pop_assumed(key)]
            if any(f is not None for f in found):
                self._changed()

    def replace_pods(self, objs: Iterable[Obj]) -> None:
        objs = list(objs)
        keys = {translate.key_of(o) for o in objs}
        with self._cond:
            for d in (self._pending, self._finished):  # deleted while we were not watching
                for k in [k for k in d if k not in keys]:
                    del d[k]
            for k in [k for k in self._bound if k not in keys]:
                self._pop_bound(k)
            for k in [k for k in self._assumed if k not in keys]:
                self._pop_assumed(k)
        for o in objs:
            self.upsert_pod(o, listed=True)

    def _seen(self, obj: Obj, listed: bool) -> float:
        now = self._clock()
        created = translate.created_s(obj)
        if not listed or not created:
            return now
        return now - max(0.0, time.time() - created)

    # Every change to a bound or assumed pod goes through these (under the lock), so the next
    # snapshot knows which placements to look at again.
    def _set_bound(self, key: str, b: _Bound) -> None:
        old = self._bound.get(key)
        if old is not None:
            self._shapes[task_spec(old.spec)] -= 1
        self._shapes[task_spec(b.spec)] += 1
        self._bound[key] = b
        self._dirty.add(key)
        _mark(self._unassigned, key, b.placement is not None and b.needs_devices)
        _mark(self._claimed, key, bool(b.spec.claims))
        _mark(self._grouped, key, translate.POD_GROUP_LABEL in (translate.meta(b.obj).get("labels") or {}))

    def _pop_bound(self, key: str) -> _Bound | None:
        b = self._bound.pop(key, None)
        if b is not None:
            self._shapes[task_spec(b.spec)] -= 1
            self._dirty.add(key)
            self._unassigned.discard(key)
            self._claimed.discard(key)
            self._grouped.discard(key)
        return b

    def _pop_assumed(self, key: str) -> _Assumed | None:
        a = self._assumed.pop(key, None)
        if a is not None:
            self._dirty.add(key)
        return a

    def _make_pending(self, key: str, obj: Obj, seen: float) -> Pending:
        if translate.scheduling_gated(obj):
            return Pending(key, obj, None, "", gated=True, seen=seen)
        try:
            return Pending(key, obj, translate.pod_spec(obj), seen=seen, claims=translate.pod_claims(obj))
        except ModelError as exc:
            return Pending(key, obj, None, str(exc), seen=seen)

    def _lenient_spec(self, obj: Obj) -> PodSpec:
        """A bound pod's spec; a request the scheduler would reject still holds its CPU and memory."""
        try:
            return translate.pod_spec(obj)
        except ModelError:
            m = translate.meta(obj)
            return PodSpec(PodUid(str(m.get("uid") or translate.key_of(obj))), str(m.get("name", "")),
                           str(m.get("namespace") or "default"))

    def _make_bound(self, key: str, obj: Obj, spec: PodSpec) -> _Bound:
        node = self._nodes.get(translate.node_name(obj))
        if node is None:
            return _Bound(obj, spec, None)
        try:
            p = translate.placement(obj, node, spec)
        except ModelError as exc:
            self._once(f"pod/{key}", f"pod {key}: {exc}; counting its CPU and memory only")
            p = Placement(spec.uid, node.name, spec.cpu_milli, spec.mem_mib, pod_group=spec.pod_group)
        needs = spec.gpu.kind is not GpuKind.NONE and not p.gpus and not p.mig_slices
        return _Bound(obj, spec, p, needs)

    # -- pod groups and queues --------------------------------------------------------------
    def upsert_group(self, obj: Obj) -> None:
        try:
            g = translate.pod_group(obj)
        except ModelError as exc:
            self._once(f"pg/{translate.key_of(obj)}", f"ignoring {exc}")
            return
        with self._cond:
            self._groups[g.key] = g
            self._changed()

    def delete_group(self, obj: Obj) -> None:
        with self._cond:
            self._groups.pop(translate.key_of(obj), None)
            self._changed()

    def replace_groups(self, objs: Iterable[Obj]) -> None:
        with self._cond:
            self._groups.clear()
        for o in objs:
            self.upsert_group(o)

    def upsert_queue(self, obj: Obj) -> None:
        try:
            q = translate.queue(obj)
        except ModelError as exc:
            self._once(f"queue/{translate.key_of(obj)}", f"ignoring {exc}")
            return
        with self._cond:
            self._queues[q.name] = q
            self._changed()

    def delete_queue(self, obj: Obj) -> None:
        with self._cond:
            self._queues.pop(translate.key_of(obj), None)
            self._changed()

    def replace_queues(self, objs: Iterable[Obj]) -> None:
        with self._cond:
            self._queues.clear()
        for o in objs:
            self.upsert_queue(o)

    def queues(self) -> tuple[Queue, ...]:
        with self._cond:
            return tuple(self._queues.values())

    # -- DRA objects (the informers' handlers; see dra_cache) --------------------------------
    def upsert_slice(self, obj: Obj) -> None:
        self._dra_event(self._dra.upsert_slice, obj, pools=True)

    def delete_slice(self, obj: Obj) -> None:
        self._dra_event(self._dra.delete_slice, obj, pools=True)

    def replace_slices(self, objs: Iterable[Obj]) -> None:
        self._dra_event(self._dra.replace_slices, list(objs), pools=True)

    def upsert_class(self, obj: Obj) -> None:
        self._dra_event(self._dra.upsert_class, obj)

    def delete_class(self, obj: Obj) -> None:
        self._dra_event(self._dra.delete_class, obj)

    def replace_classes(self, objs: Iterable[Obj]) -> None:
        self._dra_event(self._dra.replace_classes, list(objs))

    def upsert_claim(self, obj: Obj) -> None:
        """From the informer, and from the claim writer with what the API server returned."""
        self._dra_event(self._dra.upsert_claim, obj)

    def delete_claim(self, obj: Obj) -> None:
        self._dra_event(self._dra.delete_claim, obj)

    def replace_claims(self, objs: Iterable[Obj]) -> None:
        self._dra_event(self._dra.replace_claims, list(objs))

    def _dra_event(self, handle: Callable[[Any], bool], arg: Any, *, pools: bool = False) -> None:
        with self._cond:
            if handle(arg):
                if pools:
                    self._cluster = None
                self._changed()

    def claim_object(self, key: str) -> Obj | None:
        """The claim as the API server last returned it (None if unknown)."""
        with self._cond:
            return self._dra.claim_object(key)

    def claims_unready(self, p: Pending) -> str | None:
        """Why `p`'s claims keep it from the core now (see `DraCache.unready`), or None."""
        if p.spec is None or not (p.claims.keys or p.claims.missing):
            return None
        with self._cond:
            return self._dra.unready(p.key, p.spec.uid, p.claims)

    def foreign_drivers(self) -> list[str]:
        """Drivers with ResourceSlices whose pools are not gpufleet's."""
        with self._cond:
            return sorted(self._dra.foreign)

    def group(self, key: str) -> PodGroup | None:
        with self._cond:
            return self._groups.get(key)

    # -- assumptions ------------------------------------------------------------------------
    def assume(self, key: str, placement: Placement) -> None:
        with self._cond:
            pending = self._pending.pop(key, None)
            obj = pending.obj if pending is not None else {}
            self._assumed[key] = _Assumed(placement, obj, pending.seen if pending is not None else self._clock(),
                                          spec=pending.spec if pending is not None else None)
            self._dirty.add(key)
            self._changed()

    def finish_binding(self, key: str) -> None:
        """The bind call returned, or its outcome is unknown (a timeout, a 409 "already bound"):
        the assumption keeps the devices until the watch shows the pod, at most `assume_ttl_s`."""
        with self._cond:
            a = self._assumed.get(key)
            if a is not None:
                a.expires = self._clock() + self.assume_ttl_s

    def forget(self, key: str) -> None:
        """Drop an assumption whose bind certainly failed; the pod is queued again."""
        with self._cond:
            a = self._pop_assumed(key)
            if a is not None:
                self._requeue(key, a)
            self._changed()

    def _requeue(self, key: str, a: _Assumed) -> None:
        if a.obj and key not in self._bound and not translate.node_name(a.obj):
            self._pending[key] = self._make_pending(key, a.obj, a.seen)

    def assumed_count(self) -> int:
        with self._cond:
            return len(self._assumed)

    # -- reads for the cycle --------------------------------------------------------------
    def pending(self) -> list[Pending]:
        with self._cond:
            return list(self._pending.values())

    def finished_members(self) -> list[tuple[str, str]]:
        with self._cond:
            return list(self._finished.values())

    def bound_specs(self) -> list[PodSpec]:
        """Specs of the bound pods (those whose request parses; others count CPU and memory only)."""
        with self._cond:
            return [b.spec for b in self._bound.values()]

    def bound_shapes(self) -> Counter[TaskSpec]:
        """How many bound pods have each shape (`task_spec`); shapes no pod has any more count 0."""
        with self._cond:
            return self._shapes.copy()

    def bound_objects(self) -> list[Obj]:
        with self._cond:
            return [b.obj for b in self._bound.values()]

    def bound_group_members(self) -> list[Obj]:
        """The bound pods labelled with a PodGroup (`bound_objects` narrowed, without a pass over all)."""
        with self._cond:
            return [self._bound[k].obj for k in self._grouped]

    def nodes(self) -> list[NodeInfo]:
        with self._cond:
            return list(self._nodes.values())

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, bound and assumed pods, pod groups. Placements that would overcommit are skipped (logged once).

        The usage of the placements that carry their devices (assigned bound pods, assumed
        pods) is kept from one snapshot to the next and brought up to date with the pods that
        changed since (`_sync_counted`); each snapshot gets a copy. Rebuilding it from every
        pod was most of a cycle's cost at thousands of nodes (0.25-0.4 s at 5,000 nodes and
        10,000 pods), comparing every pod's placement with the kept one still 12 ms; now a
        snapshot costs what changed (about 1 ms). Unchanged nodes keep their usage stamps, so
        the scorers' per-node memos stay valid across cycles.
        """
        with self._cond:
            self._expire()
            if self._cluster is None:
                self._cluster = self._build_cluster()
            cluster = self._cluster
            claims = self._dra.view(a for x in self._assumed.values() for a in x.placement.claims)
            groups = dict(self._groups)
            counted = self._sync_counted(cluster, claims)
            usage = counted.usage.copy()
            placements = dict(counted.placements)
            held = self._dra.held(claims, {a.claim for uid in counted.with_claims for a in placements[uid].claims})
            dra = DraState(self._dra.classes(), claims, self._dra_problems)
            unassigned = [self._bound[k] for k in sorted(self._unassigned)]
        for b in unassigned:
            assert b.placement is not None
            p = _claim_devices(cluster, usage, b.placement, b.spec)
            self._hold(cluster, usage, placements, p)
        if held:
            for line in usage.hold_claims(held):
                self._once(f"held/{line}", f"{line}: not counted")
        return ClusterSnapshot(cluster, usage, MappingProxyType(placements), MappingProxyType(groups), dra)

    def _build_cluster(self) -> Cluster:
        """The nodes and the devices of the complete pools of gpufleet's drivers; each pool left
        out is logged once (called under the lock)."""
        complete, problems = self._dra.pools()
        cluster = Cluster(list(self._nodes.values()), complete)
        self._dra_problems = (*problems, *cluster.devices.problems)
        for line in self._dra_problems:
            self._once(f"pool/{line}", line)
        return cluster

    def _sync_counted(self, cluster: Cluster, claims: Mapping[str, Any]) -> _Counted:
        """The usage of exactly the placements of the bound and assumed pods, as a rebuild gives.

        Only the pods that changed since the last snapshot (`_dirty`) and those whose holding
        depends on their DRA claims are looked at again: what changed is taken out, then what
        is new put in, so a cycle costs what changed, not every pod. A rebuild instead when the
        nodes changed, or when a placement was refused as overcommitting (which ones a rebuild
        refuses depends on the order they come in: bound pods first, then assumed ones)."""
        c = self._counted
        dirty, self._dirty = self._dirty | self._claimed, set()
        if c is not None and c.cluster is cluster and not c.refused:
            changes: list[tuple[str, Placement | None, Placement | None]] = []
            for key in dirty:
                uid = c.by_key.get(key)
                old = c.placements.get(uid) if uid is not None else None
                new = self._bound_placement(key, claims) or self._assumed_placement(key)
                if old == new:
                    continue
                if old is not None and new is not None and _same_holding(old, new):
                    c.placements[old.pod] = new  # the start time set (the echo, the pod running): usage stands
                else:
                    changes.append((key, old, new))
            # Each node's aggregates are recomputed once, for all of its changes together, and
            # overcommitment is looked for once at the end: usage only grows after the removals,
            # so the end state is overcommitted exactly when some addition on the way would be.
            # (After a fill of 10,000 pods at 5,000 nodes: 0.2 s one by one.)
            touched: set[int] = set()
            try:
                for key, old, _ in changes:
                    if old is not None:
                        i = cluster.index[old.node]
                        c.usage.place(old, i, sign=-1, refresh=False)
                        touched.add(i)
                        del c.placements[old.pod], c.by_key[key]
                        c.with_claims.discard(old.pod)
                for key, _, new in changes:
                    if new is not None and (new.pod in c.placements or not self._count(cluster, c, key, new, touched)):
                        c.refused = True  # (a uid under two keys: the rebuild's order decides)
                        break
            finally:
                rows = np.fromiter(sorted(touched), dtype=np.int64, count=len(touched))
                c.usage.refresh_rows(rows)
            if not c.refused and len(c.usage.overcommitted_rows(rows)):
                c.refused = True  # the rebuild refuses one by one, in its order, and logs each
            if not c.refused:
                return c
        c = _Counted(cluster, Usage(cluster), {})
        for key in self._bound:
            if (p := self._bound_placement(key, claims)) is not None and not self._count(cluster, c, key, p):
                c.refused = True
        for key in self._assumed:
            if (p := self._assumed_placement(key)) is not None and not self._count(cluster, c, key, p):
                c.refused = True
        self._counted = c
        return c

    def _bound_placement(self, key: str, claims: Mapping[str, Any]) -> Placement | None:
        """What a bound pod holds by its assignment (None: not bound, node unknown, or unassigned)."""
        b = self._bound.get(key)
        if b is None or b.placement is None or b.needs_devices:
            return None
        if b.spec.claims:
            return dataclasses.replace(b.placement, claims=self._dra.held_by(b.spec.uid, b.spec.claims, claims))
        return b.placement

    def _assumed_placement(self, key: str) -> Placement | None:
        a = self._assumed.get(key)
        return a.placement if a is not None else None

    def _count(self, cluster: Cluster, c: _Counted, key: str, p: Placement, batch: set[int] | None = None) -> bool:
        """`_hold` into the kept usage, remembering under which key it was counted."""
        if p.pod in c.placements:
            return True  # counted already (a rebuild's setdefault: the first one wins)
        if not self._hold(cluster, c.usage, c.placements, p, batch):
            return False
        if p.pod in c.placements:
            c.by_key[key] = p.pod
            if p.claims:
                c.with_claims.add(p.pod)
        return True

    def _hold(self, cluster: Cluster, usage: Usage, placements: dict[PodUid, Placement], p: Placement,
              batch: set[int] | None = None) -> bool:
        """Count `p` in `usage`; False if it was refused (overcommitting, or devices its node lacks).
        With `batch`, the node's aggregates are left for the caller to refresh and its
        overcommitment for the caller to look for: its index is added to `batch`."""
        i = cluster.index.get(p.node)
        if i is None or p.pod in placements:
            return True
        start = int(cluster.slice_start[i])
        if any(not 0 <= s < int(cluster.slice_end[i]) - start or usage.slice_used[start + s] for s in p.mig_slices) \
                or any(not 0 <= j < int(cluster.gpu_count[i]) for j in p.gpus):
            self._once(f"hold/{p.pod}", f"pod {p.pod} on {p.node}: its MIG slices or GPUs are not free; not counted")
            return False
        if batch is not None:
            usage.place(p, i, refresh=False)
            batch.add(i)
            placements[p.pod] = p
            return True
        usage.place(p, i)
        problem = usage.overcommitted(i)
        if problem:
            usage.place(p, i, sign=-1)
            self._once(f"hold/{p.pod}", f"pod {p.pod} on {p.node} would overcommit {problem}; not counted")
            return False
        placements[p.pod] = p
        return True

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, a in self._assumed.items() if a.expires is not None and a.expires < now]:
            log.warning("pod %s: no watch event %.0f s after its binding; assumption dropped", key, self.assume_ttl_s)
            a = self._pop_assumed(key)
            assert a is not None
            self._requeue(key, a)

    def _once(self, key: str, message: str) -> None:
        if key not in self._bad:
            self._bad.add(key)
            log.warning("%s", message)


def _mark(keys: set[str], key: str, member: bool) -> None:
    if member:
        keys.add(key)
    else:
        keys.discard(key)


_HOLDING = operator.attrgetter(*(f.name for f in dataclasses.fields(Placement) if f.name != "started_s"))
"""A placement's every field but its start time, as one tuple."""


def _same_holding(a: Placement | None, b: Placement | None) -> bool:
    """The same devices and resources (the start time, set when the pod starts, aside)."""
    if a is None or b is None:
        return a is b
    return bool(_HOLDING(a) == _HOLDING(b))


def _claim_devices(cluster: Cluster, usage: Usage, p: Placement, spec: PodSpec) -> Placement:
    """Give a bound pod without assignment the lowest free devices of its kind on its node."""
    i = cluster.index.get(p.node)
    g = spec.gpu
    if i is None:
        return p
    if g.kind is GpuKind.MIG and g.mig_profile in cluster.mig_profile_id:
        prof = cluster.mig_profile_id[g.mig_profile]
        start, end = int(cluster.slice_start[i]), int(cluster.slice_end[i])
        free = [s - start for s in range(start, end) if cluster.slice_prof[s] == prof and not usage.slice_used[s]]
        return dataclasses.replace(p, mig_slices=tuple(free[:g.count]))
    if g.kind in (GpuKind.WHOLE, GpuKind.FRACTION):
        n = int(cluster.gpu_count[i])
        ok = cluster.gpu_whole_ok[i, :n]
        used = usage.gpu_used_milli[i, :n]
        free = [int(j) for j in np.flatnonzero(ok & (used + g.milli <= GPU_MILLI))]
        mem = g.mem_mib if g.kind is GpuKind.FRACTION else int(cluster.gpu_mem[i, free[0]]) if free else 0
        return dataclasses.replace(p, gpus=tuple(free[:g.count]), milli=g.milli, gpu_mem_mib=mem)
    return p
