"""`SchedulerService`: the live scheduler, a loop of cycles over the informers' cache.

Threads: one informer each for pods, nodes, PodGroups and Queues, and for DRA's DeviceClasses,
ResourceSlices and ResourceClaims; the leader elector (when
enabled); a pool of binder workers; event senders; the HTTP server; and the main thread,
which runs the cycles. Sync threads rather than asyncio: the core is CPU-bound NumPy work
that would block an event loop anyway, lightkube's sync client is what the agent already
uses, and the concurrency needed (a few dozen requests in flight) is what a thread pool does
well.

A cycle, when the cache changed (and at least every `resync_s`), on the leader only:

1. pending pods: gated ones get `SchedulingGated`, invalid requests `Unschedulable` with the
   parse error, pods whose claims are not ready (a template's claim not created yet, one not
   made for the pod) `Unschedulable` with why, the rest go to the core;
2. `schedule(snapshot, pending, profile, now, rng)`;
3. binds are assumed in the cache and handed to the binder (which writes their DRA claims
   first, `kube/claims.py`); unschedulable pods get their
   condition (only when it changed) and a rate-limited `FailedScheduling` event; evictions go
   to the Eviction API;
4. PodGroup status and the gauges are refreshed.

Around the core: the `FaultFollower` (`kube/faults.py`) quarantines NotReady nodes in each
snapshot and evicts the pods (and gangs) of failed devices and nodes after a grace period;
with `--karpenter` the `Provisioner` (`kube/karpenter.py`) creates NodeClaims for the
unschedulable pods Karpenter cannot size (from the NodePools, `kube/nodepools.py`) and its
`Guard` (`kube/consolidation.py`) keeps `karpenter.sh/do-not-disrupt` on busy GPU nodes.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from gpufleet.core.cycle import schedule
from gpufleet.core.defrag import DefragSettings
from gpufleet.core.mig_demand import mig_requests
from gpufleet.core.result import Eviction
from gpufleet.framework.plugins.fragmentation import FragModel, TypicalTask, task_spec, typical_tasks, typical_tasks_of
from gpufleet.framework.profile import Profile, ProfileForMix, ProfileSettings
from gpufleet.kube import translate
from gpufleet.kube.binder import (GANG_UNSCHEDULABLE, GATED_MESSAGE, QUEUE_NOT_ALLOWED, UNSCHEDULABLE, Binder,
                                  status_is)
from gpufleet.kube.cache import Pending, SchedulerCache
from gpufleet.kube.defragmentation import Defragmenter
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.faults import FaultFollower, FaultSettings
from gpufleet.kube.heap import HeapKeeper
from gpufleet.kube.informer import Handler, Informer
from gpufleet.kube.karpenter import KarpenterSettings, Provisioner
from gpufleet.kube.leader import LeaderElector, LeaseSettings
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.mig_repartition import Repartitioner
from gpufleet.kube.pacing import CyclePacer
from gpufleet.kube.queues import QueueState, queue_refusal, queue_status
from gpufleet.kube.ratelimit import TokenBucket
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.model import ClusterSnapshot, GpuKind, Placement, PodSpec, PodUid
from gpufleet.model.annotations import SCHEDULER_NAME
from gpufleet.model.assignment_auth import KeyDir

log = logging.getLogger(__name__)
PODGROUPS = "scheduling.x-k8s.io/v1alpha1"
QUEUES = "gpufleet.io/v1alpha1"
RESOURCE = "resource.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    scheduler_name: str = SCHEDULER_NAME
    identity: str = "gpufleet"
    qps: float = 50.0
    """Client-side budget for binds, status writes and evictions (kube-scheduler's default)."""
    burst: int = 100
    workers: int = 64
    """Binder threads: requests in flight at once (kube-apiserver spends less CPU per bind the
    more it has in flight; docs/decisions.md)."""
    assign: str = "binding"
    """How the assignment annotation reaches the pod: in the Binding (one request) or by a
    PATCH before it ("patch", for API servers that do not copy a Binding's annotations)."""
    leader_election: LeaseSettings | None = None
    min_cycle_interval_s: float = 0.002
    """Changes arriving within this interval after a cycle are handled by one cycle."""
    cycle_share: float = 0.5
    """Cycles take at most this share of the process's time (the watch and the binds need the
    rest): under load the loop rests after a cycle, so cycles batch by their own cost
    (kube/pacing.py)."""
    cycle_burst_s: float = 0.1
    """Seconds of cycling that rest taken before (waiting for changes) pays for: a cycle after a
    quiet spell is not followed by a rest of its own length."""
    resync_s: float = 5.0
    """Run a cycle at least this often while pods are pending (assumptions may have expired)."""
    status_interval_s: float = 10.0
    """A pending pod's condition is rewritten at once when its reason changes, but at most this
    often when only the message does (the node counts in "0/200 nodes are available: ...")."""
    eviction_retry_s: float = 30.0
    """A victim whose eviction is under way is not asked for again before this."""
    seed: int = 0
    metrics_interval_s: float = 1.0
    """How often the gauges and the PodGroup status are recomputed."""
    usage_wait_s: float = 10.0
    """While binds are in flight, the GPU allocation and fragmentation gauges and the Queue status,
    which need a snapshot of the whole cluster, are recomputed at most this often, unless the cycle
    took a snapshot anyway: the first after thousands of binds holds the loop (and the GIL) for
    0.07-0.12 s at 5,000 nodes (0.2-0.26 s before the cache counted them node by node), in the
    middle of the binds."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    faults: FaultSettings = field(default_factory=FaultSettings)
    karpenter: KarpenterSettings | None = None
    """None: no Karpenter integration (`--karpenter` off)."""
    assignment_keys: Path | None = None
    """Where the assignment-signing key ring is (`--assignment-keys`, a mounted Secret); None: unsigned."""
    defrag: DefragSettings | None = None
    """Move small pods so big whole-GPU pods blocked only by fragmentation fit (`--defrag`,
    kube/defragmentation.py); None: off."""
    mig_repartition: bool = False
    """Change the MIG layouts of idle GPU instances for pods waiting for a MIG profile
    (`--mig-repartition`, kube/mig_repartition.py); the node agents apply them."""
    full_gc_interval_s: float | None = None
    """Take Python's full garbage collections over (kube/heap.py): one after the first lists,
    then one every this many seconds when the binder has sent its last bind (at most 60 s apart),
    each freezing what survives. None: Python's own schedule (which stalls a process holding a
    big cluster for a quarter second every few thousand pod updates). The command sets 5."""
    switch_interval_s: float | None = None
    """How long a thread may hold the GIL while others wait for it (`sys.setswitchinterval`),
    set when `run` starts. The binder's threads only wait on the API server, but each needs the
    GIL back to read its reply and send the next request; while a cycle or the watch's decoding
    holds it, each gets it only at the end of an interval. None: Python's 5 ms. The command
    sets 1 ms (docs/decisions.md)."""
    dra_drivers: tuple[str, ...] = ()
    """The DRA drivers whose pools gpufleet allocates devices from (`*`: every driver). Empty:
    none, so a claim can only be placed once someone else allocated it. Two allocators on one
    pool can give a device to two claims, so list only drivers whose DeviceClasses no other
    scheduler's pods use (docs/dra.md, "On the real control plane")."""


class SchedulerService:
    def __init__(self, rest: Rest, profile: ProfileSettings, settings: ServiceSettings,
                 metrics: Metrics | None = None) -> None:
        self.rest, self.settings, self.profile_settings = rest, settings, profile
        self.metrics = metrics or Metrics()
        self.cache = SchedulerCache(settings.scheduler_name, dra_drivers=settings.dra_drivers)
        self.stop_event = threading.Event()
        self.retrier = Retrier(settings.retry, logging.getLogger("gpufleet.kube.api"))
        self.bucket = TokenBucket(settings.qps, settings.burst)
        self.events = EventRecorder(rest, self.retrier, settings.identity, qps=max(settings.qps, 50.0),
                                    burst=settings.burst, defer_to=lambda: self.binder.busy())
        self.heap = (HeapKeeper(settings.full_gc_interval_s, max(60.0, settings.full_gc_interval_s))
                     if settings.full_gc_interval_s is not None else None)
        self.binder = Binder(rest, self.cache, self.bucket, self.retrier, self.events, self.metrics,
                             workers=settings.workers, assign=settings.assign, on_idle=self._binds_sent,
                             keys=KeyDir(settings.assignment_keys) if settings.assignment_keys else None)
        self.defrag = Defragmenter(settings.defrag, seed=settings.seed) if settings.defrag is not None else None
        self.informers = self._informers()
        self.elector = (LeaderElector(rest, settings.identity, settings.leader_election)
                        if settings.leader_election else None)
        self.cycles = 0
        self._profiles = ProfileForMix(profile)
        self._written: dict[str, tuple[str, float]] = {}
        """Pod key -> the reason/message last written, so an unchanged condition is not rewritten."""
        self._groups_written: dict[str, Mapping[str, Any]] = {}
        self._queues_written: dict[str, Mapping[str, object]] = {}
        self._last_gauges = 0.0
        self._last_usage = 0.0
        """When the gauges and Queue status that need a snapshot were last recomputed."""
        self._lost = threading.Event()
        self.queue_state = QueueState(profile.queueing)
        self._evicting: dict[PodUid, float] = {}
        self.faults = FaultFollower(settings.faults, self.events, self.metrics)
        self.karpenter = (Provisioner(rest, self.retrier, self.metrics, settings.karpenter)
                          if settings.karpenter is not None else None)
        self._covered: dict[PodUid, str] = {}
        """Pending pods -> the NodeClaim gpufleet provisioned for them (last provisioning)."""
        self.mig = Repartitioner(rest, self.retrier) if settings.mig_repartition else None
        self.pacer = CyclePacer(share=settings.cycle_share, burst_s=settings.cycle_burst_s,
                                min_rest_s=settings.min_cycle_interval_s)

    # -- lifecycle --------------------------------------------------------------------------
    def _informers(self) -> list[Informer]:
        c, stop = self.cache, self.stop_event
        return [
            Informer(self.rest, "pods", path("v1", "pods"), Handler(c.replace_pods, c.upsert_pod, c.delete_pod), stop),
            Informer(self.rest, "nodes", path("v1", "nodes"),
                     Handler(self._replace_nodes, self._upsert_node, self._delete_node), stop),
            Informer(self.rest, "podgroups", path(PODGROUPS, "podgroups"),
                     Handler(c.replace_groups, c.upsert_group, c.delete_group), stop),
            Informer(self.rest, "queues", path(QUEUES, "queues"),
                     Handler(c.replace_queues, c.upsert_queue, c.delete_queue), stop),
            Informer(self.rest, "deviceclasses", path(RESOURCE, "deviceclasses"),
                     Handler(c.replace_classes, c.upsert_class, c.delete_class), stop),
            Informer(self.rest, "resourceslices", path(RESOURCE, "resourceslices"),
                     Handler(c.replace_slices, c.upsert_slice, c.delete_slice), stop),
            Informer(self.rest, "resourceclaims", path(RESOURCE, "resourceclaims"),
                     Handler(c.replace_claims, c.upsert_claim, c.delete_claim), stop),
            *([Informer(self.rest, "poddisruptionbudgets", path("policy/v1", "poddisruptionbudgets"),
                        Handler(self.defrag.replace_pdbs, self.defrag.upsert_pdb, self.defrag.delete_pdb), stop)]
              if self.defrag is not None else []),
        ]

    # Nodes feed the cache and, as raw objects, the fault follower (conditions, taints) and the
    # consolidation guard (annotations). A fault starting or ending wakes a cycle.
    def _upsert_node(self, obj: Mapping[str, Any]) -> None:
        self.cache.upsert_node(obj)
        if self.karpenter is not None:
            self.karpenter.guard.upsert_node(obj)
        if self.mig is not None:
            self.mig.upsert_node(obj)
        if self.faults.upsert_node(obj):
            self.cache.poke()

    def _delete_node(self, obj: Mapping[str, Any]) -> None:
        self.cache.delete_node(obj)
        if self.karpenter is not None:
            self.karpenter.guard.delete_node(obj)
        if self.mig is not None:
            self.mig.delete_node(obj)
        if self.faults.delete_node(obj):
            self.cache.poke()

    def _replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        objs = list(objs)
        self.cache.replace_nodes(objs)
        if self.karpenter is not None:
            self.karpenter.guard.replace_nodes(objs)
        if self.mig is not None:
            self.mig.replace_nodes(objs)
        if self.faults.replace_nodes(objs):
            self.cache.poke()

    def synced(self) -> bool:
        """Pods and nodes listed, and the DRA objects unless the server does not serve them: a
        cycle without the allocated claims would count their devices (and linked GPUs) as free.
        The CRDs (PodGroups, Queues) may be absent: not required."""
        return all(i.synced.is_set() for i in self.informers[:2]) and \
            all(i.synced.is_set() or i.absent.is_set() for i in self.informers[4:7])

    def leading(self) -> bool:
        return self.elector is None or self.elector.leading.is_set()

    def ready(self) -> bool:
        """Informers synced and not stopping. A standby is ready too: it is doing its job, and a
        rolling update (maxSurge 0) waits for new replicas to be ready, which a standby never
        would be if readiness meant leading. Leadership is `/leaderz` and `gpufleet_leader`."""
        return self.synced() and not self.stop_event.is_set()

    def start(self) -> None:
        for i in self.informers:
            i.start()
        if self.karpenter is not None:
            self.karpenter.check_api()
            self.karpenter.start_informers(self.stop_event)
        if self.elector is not None:
            threading.Thread(target=self.elector.run, args=(self._on_lead, self._on_lose), name="leader",
                             daemon=True).start()
        else:
            self.metrics.leader.set(1)

    def _on_lead(self) -> None:
        self.metrics.leader.set(1)
        self._written.clear()  # another leader may have written conditions meanwhile
        self.cache.poke()

    def _on_lose(self) -> None:
        self.metrics.leader.set(0)
        self._lost.set()
        self.stop_event.set()
        self.cache.poke()

    def stop(self) -> None:
        self.stop_event.set()
        self.cache.poke()

    def shutdown(self) -> None:
        """After `run` returned: finish the requests in flight, release the lease, stop the helpers.

        Binds queued but not started are dropped (at 50 QPS a long queue would outlast the
        pod's grace period); they were only decisions, which the next leader makes again.
        """
        self.binder.close()
        if self.karpenter is not None:
            self.karpenter.close()
        if self.mig is not None:
            self.mig.close()
        if self.elector is not None:
            self.elector.stop()
            self.elector.release()
        self.events.close()

    @property
    def lost_lease(self) -> bool:
        return self._lost.is_set()

    # -- the loop ---------------------------------------------------------------------------
    def run(self, *, until: Callable[[], bool] = lambda: False) -> None:
        """Cycle until `stop()` (or `until()`); returns with binds possibly still in flight.
        The process's GIL switch interval is the settings' while it runs, what it was after."""
        before = sys.getswitchinterval()
        if self.settings.switch_interval_s is not None:
            sys.setswitchinterval(self.settings.switch_interval_s)
        try:
            self._run(until)
        finally:
            sys.setswitchinterval(before)

    def _run(self, until: Callable[[], bool]) -> None:
        self.start()
        while not self.stop_event.is_set() and not self.synced():
            self.stop_event.wait(0.05)
        log.info("informers synced: %d nodes, %d pending pods", len(self.cache.nodes()), len(self.cache.pending()))
        if self.heap is not None:
            self.heap.after_sync()
        seen = -1
        while not self.stop_event.is_set() and not until():
            if self.heap is not None:
                self.heap.tick()
            version = self.cache.wait_for_change(seen, self._wait_s())
            if self.stop_event.is_set():
                break
            if not self.leading():
                seen = version
                continue
            seen = version
            self.pacer.started()
            self.cycle()
            # Changes arriving meanwhile wait for the next cycle: at least `min_cycle_interval_s`,
            # and while cycles come back to back, long enough that they hold at most
            # `cycle_share` of the process, so they batch more when they cost more.
            self.stop_event.wait(self.pacer.finished())

    def _binds_sent(self) -> None:
        """On the binder's thread, its last bind just answered: a quiet moment for the heap."""
        if self.heap is not None:
            self.heap.quiet()

    def _wait_s(self) -> float:
        """Until the next cycle at the latest: the resync period, or sooner when a fault's grace ends."""
        deadline = self.faults.next_deadline()
        if deadline is None:
            return self.settings.resync_s
        return min(self.settings.resync_s, max(0.0, deadline - time.monotonic()) + 0.01)

    def _snapshot(self) -> ClusterSnapshot:
        """The cache's snapshot with NotReady nodes quarantined and fault times stamped."""
        return self.faults.apply(self.cache.snapshot())

    def cycle(self) -> None:
        """One scheduling cycle (see the module docstring)."""
        started = time.monotonic()
        pending = self.cache.pending()
        specs: list[PodSpec] = []
        by_uid: dict[PodUid, Pending] = {}
        queues = {q.name: q for q in self.cache.queues()}
        for p in pending:
            if p.gated:
                self._report(p, GATED_MESSAGE, "SchedulingGated")
            elif p.spec is None:
                self._report(p, p.error, UNSCHEDULABLE)
                self.metrics.attempts.labels("error").inc()
            elif (refused := queue_refusal(queues, p.spec)) is not None:
                self._report(p, refused, QUEUE_NOT_ALLOWED)
            elif (waiting := self.cache.claims_unready(p)) is not None:
                self._report(p, waiting, UNSCHEDULABLE)
            else:
                specs.append(p.spec)
                by_uid[p.spec.uid] = p
        if not specs:
            self._covered = {}
        snapshot = self._snapshot() if specs or self.faults.active() else None
        if snapshot is not None and self.mig is not None:
            self.mig.reserve(snapshot)  # instances a pending MIG layout destroys take no new pod
        if snapshot is not None and self.faults.active():
            self._follow_faults(snapshot)
        if specs and snapshot is not None and snapshot.cluster.n_nodes:
            wall = time.time()
            profile = self._build_profile(specs)
            result = schedule(snapshot, specs, profile, now=wall,
                              rng=random.Random(self.settings.seed + self.cycles),
                              queues=self.queue_state.context(tuple(queues.values()), snapshot, specs, wall))
            self.cycles += 1
            self.metrics.cycle.observe(time.monotonic() - started)
            nodes = {n.name: n for n in snapshot.cluster.nodes}
            for placement in result.binds:
                pod = by_uid[placement.pod]
                self._written.pop(pod.key, None)
                self.binder.bind(pod.key, pod.obj, placement, nodes[placement.node], pod.seen)
            self.metrics.attempts.labels("scheduled").inc(len(result.binds))
            self._covered = (self.karpenter.provision(snapshot, specs, self._provisionable(specs, result.unschedulable),
                                                      profile, wall)
                             if self.karpenter is not None and result.unschedulable else {})
            for uid, status in result.unschedulable.items():
                self._report_unschedulable(by_uid[uid], self._with_dra_hint(by_uid[uid], status.message))
            if self.defrag is not None and result.unschedulable and self.defrag.due():
                self._defragment(specs, result.unschedulable, profile, by_uid)
            if self.mig is not None and self.mig.due() and any(
                    s.gpu.kind is GpuKind.MIG and s.uid in result.unschedulable for s in specs):
                now_view = self._snapshot()  # the binds just made are in the cache's view
                self.mig.update(now_view, mig_requests(now_view, specs, result.unschedulable, profile, wall))
            self.metrics.attempts.labels("unschedulable").inc(len(result.unschedulable))
            self._evict(result.evictions)
            self._nominate(result.nominated, result.evictions, by_uid)
        elif specs and snapshot is not None:
            # No nodes at all: with Karpenter, a cluster often starts so; the provisioner plans from its NodePools.
            self._covered = (self.karpenter.provision(snapshot, specs, self._provisionable(specs, by_uid),
                                                      self._build_profile(specs), time.time())
                             if self.karpenter is not None else {})
            for p in by_uid.values():
                self._report_unschedulable(p, "0/0 nodes are available.")
        now = time.monotonic()
        if now - self._last_gauges >= self.settings.metrics_interval_s:
            # O(all pods): not on every cycle (while hundreds of binds echo back, cycles are 50 ms apart)
            self._last_gauges = now
            self._forget_gone(pending)
            self._pending_gauge(pending)
            self._groups()
            guard = self.karpenter is not None and self.karpenter.settings.guard
            if snapshot is not None or guard or not self.binder.busy() \
                    or now - self._last_usage >= self.settings.usage_wait_s:
                self._last_usage = now
                snapshot = snapshot or self._snapshot()
                self._gauges(snapshot, specs)
                self._queues(snapshot, specs)
                if self.karpenter is not None and guard:
                    self.karpenter.guard.update(snapshot, self.karpenter.waiting_nodes(self._covered))

    def _provisionable(self, specs: list[PodSpec], unschedulable: Iterable[PodUid]) -> set[PodUid]:
        """The unschedulable pods the provisioner may plan for: gang members only once the PodGroups
        are read (the PodGroup informer syncs apart from the pods'; without its minMember a gang
        would be planned as the members seen so far)."""
        if self.informers[2].synced.is_set():
            return set(unschedulable)
        gang = {p.uid for p in specs if p.pod_group}
        return {u for u in unschedulable if u not in gang}

    def _with_dra_hint(self, p: Pending, message: str) -> str:
        """The core's reason; for a pod with claims, which drivers' devices gpufleet does not
        allocate from, when there are any (a class of theirs matches nothing gpufleet sees)."""
        message = message or "no reason given"
        foreign = self.cache.foreign_drivers() if p.spec is not None and p.spec.claims else []
        if foreign and "resourceclaim" in message:
            message += (f" (ResourceSlices of {', '.join(foreign)} are not gpufleet's to allocate: "
                        "not among its DRA drivers)")
        return message

    def _report_unschedulable(self, p: Pending, message: str) -> None:
        """Unschedulable, or waiting for a NodeClaim of gpufleet's (`nominatedNodeName` set, which makes
        Karpenter leave the pod to gpufleet); a gang member gpufleet provisions for but has no NodeClaim
        for yet gets `GangUnschedulable`, not the `Unschedulable` Karpenter would provision for."""
        claim = self._covered.get(p.spec.uid) if p.spec is not None else None
        if claim is not None:
            self._report(p, f"waiting for NodeClaim {claim}, created by gpufleet: {message}", UNSCHEDULABLE,
                         nominated=claim)
        elif (self.karpenter is not None and p.spec is not None and p.spec.pod_group
              and "gangs" in self.karpenter.settings.provision):
            self._report(p, message, GANG_UNSCHEDULABLE)
        else:
            self._report(p, message, UNSCHEDULABLE)

    def _report(self, p: Pending, message: str, reason: str, nominated: str | None = None) -> None:
        """Write the pod's PodScheduled=False condition unless it shows it already.

        What the pod shows is compared with what it should show on every cycle, not only with
        what was last asked for: a write asked for `status_interval_s` ago that the pod still
        does not show is asked again (it failed, or another writer overwrote it: a killed
        leader's request still in flight can land after its successor's). While a write of
        ours may be in flight, the pod's cached status is not trusted: it can lag behind that
        write, and a condition it shows may be the one the write is about to replace (a
        nomination written one cycle, cleared the next)."""
        marker = f"{reason}\n{message}\n{nominated or ''}"
        written = self._written.get(p.key)
        now = time.monotonic()
        if written is not None and now - written[1] < self.settings.status_interval_s:
            if written[0] == marker:
                return  # asked for; its echo may not be back yet
            if written[0].startswith(reason + "\n") and written[0].endswith(f"\n{nominated or ''}"):
                return  # only the counts changed: rewrite at most every status_interval_s
        elif status_is(p.obj, reason, message, nominated):
            self._written[p.key] = (marker, now)
            return  # already shows it (written before a restart, by the previous leader, or by us)
        if written is not None and written[0] == marker:
            log.info("pod %s does not show the status asked for %.0f s ago; writing it again", p.key, now - written[1])
        self._written[p.key] = (marker, now)
        self.binder.mark_unschedulable(p.key, p.obj, message, reason, nominated)

    def _follow_faults(self, snapshot: ClusterSnapshot) -> None:
        """Evict the pods (and gangs) of devices and nodes failed for longer than their grace period."""
        objects = {PodUid(str(translate.meta(o).get("uid"))): o for o in self.cache.bound_objects()}
        self.faults.follow(snapshot, objects, lambda e: self._evict(e, preemption=False))

    def _defragment(self, specs: list[PodSpec], unschedulable: Mapping[PodUid, Any], profile: Profile,
                    by_uid: Mapping[PodUid, Pending]) -> None:
        """Carry out a defragmentation plan as preemption is carried out: evict, then nominate."""
        assert self.defrag is not None
        plan = self.defrag.plan(self._snapshot(), specs, set(unschedulable), profile, self.cache.bound_objects())
        if plan is not None:
            self._evict(plan.evictions, preemption=False, event="Defragmented")
            self._nominate(plan.placements, plan.evictions, by_uid, moved=True)

    def _evict(self, evictions: tuple[Eviction, ...], *, preemption: bool = True, event: str | None = None) -> None:
        """Victims go through the Eviction API (PDBs respected); each at most once per `eviction_retry_s`.
        Preemption victims count against their pods' hourly preemption cap; fault and defragmentation
        victims do not. `event`: the victim's event reason (preemption: `Preempted`)."""
        if not evictions:
            return
        now = time.monotonic()
        by_uid = {str(translate.meta(o).get("uid")): o for o in self.cache.bound_objects()}
        for e in evictions:
            obj = by_uid.get(str(e.pod))
            if obj is None or self._evicting.get(e.pod, 0.0) > now:
                continue
            self._evicting[e.pod] = now + self.settings.eviction_retry_s
            future = self.binder.evict(translate.key_of(obj), obj, e.reason,
                                       event="Preempted" if preemption else event)
            if preemption:
                future.add_done_callback(self._evicted(e.pod))

    def _evicted(self, uid: PodUid) -> Callable[[Future[bool]], None]:
        def done(f: Future[bool]) -> None:
            if not f.cancelled() and f.exception() is None and f.result():
                self.queue_state.evicted(uid, time.time())
        return done

    def _nominate(self, nominated: tuple[Placement, ...], evictions: tuple[Eviction, ...],
                  by_uid: Mapping[PodUid, Pending], *, moved: bool = False) -> None:
        """A preemptor waits for its victims: its node is nominated, as kube-scheduler does (`moved`:
        the victims were moved for defragmentation, not preempted)."""
        victims: dict[str, int] = {}
        for e in evictions:
            if e.preemptor is not None:
                victims[e.preemptor] = victims.get(e.preemptor, 0) + 1
        for p in nominated:
            pod = by_uid.get(p.pod)
            if pod is not None:
                self._report(pod, f"waiting for {victims.get(p.pod, 0)} {'moved' if moved else 'preempted'} pod(s) "
                                  f"to leave node {p.node}",
                             UNSCHEDULABLE, nominated=p.node)

    def _build_profile(self, specs: list[PodSpec]) -> Profile:
        """The built profile; rebuilt when the typical-task mix FGD-style scorers read has drifted.
        The mix is of the bound pods and `specs`, from the cache's counts per shape: a cycle
        costs the pods it schedules, not every bound pod."""
        def mix() -> tuple[TypicalTask, ...]:
            shapes = self.cache.bound_shapes()
            shapes.update(task_spec(p) for p in specs)
            return typical_tasks_of(shapes)
        return self._profiles.get_for(mix)

    # -- status of groups and gauges --------------------------------------------------------
    def _groups(self) -> None:
        """PodGroup status as scheduler-plugins writes it: phase, running, succeeded, failed."""
        counts: dict[str, dict[str, int]] = {}

        def of(key: str) -> dict[str, int]:
            return counts.setdefault(key, {"running": 0, "scheduled": 0, "succeeded": 0, "failed": 0})
        for obj in self.cache.bound_group_members():
            group = (translate.meta(obj).get("labels") or {}).get(translate.POD_GROUP_LABEL)
            if group:
                c = of(f"{translate.meta(obj).get('namespace') or 'default'}/{group}")
                c["scheduled"] += 1
                c["running"] += (obj.get("status") or {}).get("phase") == "Running"
        for key, phase in self.cache.finished_members():
            of(key)["succeeded" if phase == "Succeeded" else "failed"] += 1
        for p in self.cache.pending():
            if p.spec is not None and p.spec.pod_group:
                of(p.spec.pod_group)
        for key, c in counts.items():
            group = self.cache.group(key)
            if group is None:
                continue
            phase = ("Finished" if c["succeeded"] >= group.min_member else
                     "Running" if c["running"] >= group.min_member else
                     "Scheduling" if c["scheduled"] else "Pending")
            status: dict[str, Any] = {"phase": phase, "running": c["running"], "succeeded": c["succeeded"],
                                      "failed": c["failed"]}
            if self._groups_written.get(key) != status:
                if key not in self._groups_written and c["scheduled"]:
                    status = {**status, "scheduleStartTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                self._groups_written[key] = remembered = {k: v for k, v in status.items() if k != "scheduleStartTime"}
                self.binder.group_status(group.namespace, group.name, status).add_done_callback(
                    _forget_unless_written(self._groups_written, key, remembered))

    def _queues(self, snapshot: ClusterSnapshot, specs: list[PodSpec]) -> None:
        """Each Queue's status (allocated, fairShare, pending), written when it changed."""
        queues = self.cache.queues()
        if not queues or not snapshot.cluster.n_nodes:
            return
        tree = self.queue_state.tree(queues)
        for name, status in queue_status(tree, snapshot, specs).items():
            if name in tree.queues and any(q.name == name for q in queues) \
                    and self._queues_written.get(name) != status:
                self._queues_written[name] = status
                self.binder.queue_status(name, dict(status)).add_done_callback(
                    _forget_unless_written(self._queues_written, name, status))

    def _forget_gone(self, pending: list[Pending]) -> None:
        """Drop what is remembered of pods no longer pending (deleted, or bound by someone else)."""
        keys = {p.key for p in pending}
        for key in [k for k in self._written if k not in keys]:
            del self._written[key]

    def _pending_gauge(self, pending: list[Pending]) -> None:
        counts: dict[tuple[str, str], int] = {}
        for p in pending:
            queue = p.spec.queue if p.spec else (translate.meta(p.obj).get("labels") or {}).get(
                "gpufleet.io/queue", "default")
            written = self._written.get(p.key)
            reason = ("SchedulingGated" if p.gated else "InvalidRequest" if p.spec is None else
                      QUEUE_NOT_ALLOWED if written and written[0].startswith(QUEUE_NOT_ALLOWED + "\n") else
                      "Unschedulable" if written else "Waiting")
            counts[(queue, reason)] = counts.get((queue, reason), 0) + 1
        self.metrics.pending.clear()
        for (queue, reason), n in counts.items():
            self.metrics.pending.labels(queue, reason).set(n)
        self.metrics.pending.labels("", "Binding").set(self.cache.assumed_count())

    def _gauges(self, snapshot: ClusterSnapshot, specs: list[PodSpec]) -> None:
        capacity = snapshot.gpu_capacity_milli()
        if not capacity:
            return
        self.metrics.allocation.set(snapshot.gpu_allocated_milli() / capacity)
        tasks = typical_tasks(specs) or typical_tasks_of(self.cache.bound_shapes())
        if tasks:
            frag = FragModel(snapshot.cluster, tasks).nodes(snapshot.usage, np.arange(snapshot.cluster.n_nodes))
            self.metrics.fragmentation.set(float(frag.sum()) / capacity)


def _forget_unless_written(memory: dict[str, Any], key: str, value: object) -> Callable[[Future[bool]], None]:
    """A status write that failed (or that a newer one overtook) is forgotten, so the next round
    asks for it again instead of believing the object shows it."""
    def done(f: Future[bool]) -> None:
        if f.cancelled() or f.exception() is not None or not f.result():
            if memory.get(key) is value:
                memory.pop(key, None)
    return done
