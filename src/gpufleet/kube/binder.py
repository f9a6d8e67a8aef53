"""`Binder`: carries out a cycle's intents against the API, concurrently, under one QPS budget.

Per bind, each request taking a token of the client's `TokenBucket`:

0. a pod with DRA claims: the claims' finalizer, allocation and reservation
   (`claims.ClaimWriter`); if that fails, what it wrote is taken back and the pod returns to
   the queue. A Binding that certainly failed later takes them back too; one that may have
   been applied (a lost reply, 409 already bound) leaves them, as the pod may run.
1. (`assign="patch"` only) PATCH the pod (JSON merge patch) with its
   `gpufleet.io/gpu-assignment` annotation and the `resourceVersion` the cycle saw, so a pod
   changed meanwhile (bound by someone else, recreated) answers 409 and is not touched.
2. POST `pods/{name}/binding` with the pod's UID (a recreated pod of the same name is not
   bound by mistake) and the annotation in the Binding's metadata: the API server copies a
   Binding's annotations onto the pod in the same write that sets `nodeName`
   (`BindingREST.setPodHostAndAnnotations`). So by default (`assign="binding"`) a bind is
   one request, and the annotation and the node can never disagree. 409 = already bound:
   the assumption is dropped, nothing is retried, and the pod waits for its watch event
   instead of returning to the queue.

5xx, 429 and timeouts are retried with backoff by the `Retrier` (logged once per kind);
a bind that still fails returns the pod to the queue. The cache learns each outcome.

Status writes (PodScheduled=False, reason Unschedulable, the core's message, no
nominatedNodeName), evictions and PodGroup status go through the same pool and budget.
The status writes of one object (pod, PodGroup, Queue) land in the order they were asked
for: one at a time per object, and a write that a newer one for the same object overtook in
the queue is dropped (`_InOrder`). Without that, a slow or retried old write (a pod's
"waiting for preempted pods" with nominatedNodeName set) could land after the newer one
that cleared it, and stay, since the scheduler does not write a status it has already asked
for (and Karpenter ignores a pod with a nominatedNodeName). A pod's bind is ordered with its
status writes the same way, and is never dropped: it waits for the status write in flight,
and the ones queued before it are dropped. Otherwise a PodScheduled=False asked just before
the bind could land after it and sit on a bound pod, or, carrying a nominatedNodeName, be
refused (422: "may not be set on pods that are already bound to a node").
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, TypeVar

from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.claims import ClaimWriteError, ClaimWriter, Written
from gpufleet.kube.errors import KubeError, TemporaryError, api_errors
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.ratelimit import TokenBucket
from gpufleet.kube.rest import STRATEGIC, Rest, path
from gpufleet.kube.retry import Retrier
from gpufleet.kube.translate import assignment, meta, pod_claims
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION, KeyDir, sign
from gpufleet.model import NodeInfo, Placement
from gpufleet.model import annotations as ann

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
T = TypeVar("T")
UNSCHEDULABLE = "Unschedulable"
GANG_UNSCHEDULABLE = "GangUnschedulable"
"""With `--karpenter` (gangs provisioned by gpufleet): a gang member without a NodeClaim of gpufleet's
to wait for (its gang incomplete, beyond the NodePools' limits, the NodePools not read yet). Any
reason but `Unschedulable` keeps Karpenter away: it provisions for pods one by one, which would
add nodes for part of a gang."""
QUEUE_NOT_ALLOWED = "QueueNotAllowed"
"""The queue the pod names does not admit pods of its namespace (the Queue's `spec.namespaces`):
no node would help, so Karpenter is kept away too."""
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def pod_url(obj: Obj, sub: str | None = None) -> str:
    m = meta(obj)
    return path("v1", "pods", str(m.get("name", "")), str(m.get("namespace") or "default"), sub)


def scheduled_condition(obj: Obj) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            result: Obj = c
            return result
    return None


def status_is(obj: Obj, reason: str, message: str, nominated: str | None = None) -> bool:
    """Whether the pod already shows PodScheduled=False with this reason, message and nominated node."""
    c = scheduled_condition(obj)
    return (c is not None and c.get("status") == "False" and c.get("reason") == reason
            and c.get("message") == message and ((obj.get("status") or {}).get("nominatedNodeName") or None) == nominated)


class Binder:
    def __init__(self, rest: Rest, cache: SchedulerCache, bucket: TokenBucket, retrier: Retrier,
                 events: EventRecorder, metrics: Metrics, *, workers: int = 16, assign: str = "binding",
                 clock: Callable[[], float] = time.monotonic, keys: KeyDir | None = None,
                 on_idle: Callable[[], None] = lambda: None) -> None:
        if assign not in ("binding", "patch"):
            raise ValueError(f"assign must be 'binding' or 'patch', got {assign!r}")
        self.assign = assign
        self._rest, self._cache, self._bucket, self._retrier = rest, cache, bucket, retrier
        self._events, self._metrics, self._clock = events, metrics, clock
        self._keys = keys
        """Signs each assignment for its pod (`model.assignment_auth`); None: unsigned."""
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bind")
        self._on_idle = on_idle
        """Called on the binder's thread when the last bind in flight has finished."""
        self._binding = 0
        """Binds submitted and not finished."""
        self._count = threading.Lock()
        self._in_order = _InOrder(self._pool)
        self.claims = ClaimWriter(rest, cache, lambda what, fn: self._call("write resourceclaims", what, fn,
                                                                            binding=False))

    def close(self) -> None:
        """Wait for the requests in flight; drop those not started."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- binds ------------------------------------------------------------------------------
    def bind(self, key: str, obj: Obj, p: Placement, node: NodeInfo, first_seen: float) -> Future[bool]:
        self._cache.assume(key, p)
        inflight = self.claims.expect(p)  # before any later pod of the cycle that shares one of its claims
        with self._count:
            self._binding += 1
        # in order with the pod's status writes: one queued before the bind is dropped, one in flight
        # finishes first (a PodScheduled=False landing after the bind would sit on a bound pod, and one
        # with a nominatedNodeName is refused: 422)
        future = self._in_order.submit(f"pod {key}", lambda: self._bind_with_claims(key, obj, p, node, first_seen,
                                                                                  inflight), droppable=False)
        future.add_done_callback(self._dropped)
        return future

    def _dropped(self, future: Future[bool]) -> None:
        if future.cancelled():  # never run (dropped at shutdown): `_bind_with_claims` did not count it
            self._bound_one()

    def _bound_one(self) -> None:
        with self._count:
            self._binding -= 1
            idle = self._binding == 0
        if idle:
            self._on_idle()

    def busy(self) -> bool:
        """Binds are waiting or in flight (events wait for them: `EventRecorder`'s `defer_to`)."""
        return self._binding > 0

    def _bind_with_claims(self, key: str, obj: Obj, p: Placement, node: NodeInfo, first_seen: float,
                          inflight: tuple[threading.Event, ...]) -> bool:
        """Step 0 (the claims), then the bind; the claims taken back if the bind certainly failed."""
        try:
            written: list[Written] = []
            if _has_claims(obj):
                try:
                    written = self.claims.reserve(obj, p, pod_claims(obj).keys, inflight)
                except KubeError as exc:
                    self._metrics.bind_errors.labels("claims").inc()
                    if isinstance(exc, ClaimWriteError):
                        log.info("pod %s: %s; scheduling it again", key, exc)
                    else:
                        self._retrier.failed("write resourceclaims", exc)  # an outage: once per kind
                    self._cache.forget(key)
                    return False
                except Exception:  # a bug or an object shaped unlike the API's: never a stuck assumption
                    log.exception("pod %s: writing its resourceclaims failed; scheduling it again", key)
                    self._cache.forget(key)
                    return False
            bound = self._bind(key, obj, p, node, first_seen)
            if bound is None:
                self.claims.undo(str(meta(obj).get("uid", "")), written)
                self._cache.forget(key)  # queued again only once its claims are as before
            return bool(bound)
        finally:
            self.claims.settled(p, inflight)
            self._bound_one()

    def _bind(self, key: str, obj: Obj, p: Placement, node: NodeInfo, first_seen: float) -> bool | None:
        """True when bound; False when it may be bound (the devices stay assumed until the watch
        shows it); None when it certainly is not (the caller takes the claims back and requeues)."""
        m = meta(obj)
        devices = assignment(p, node)
        text = ann.encode_assignment(devices)
        annotations = {ann.ASSIGNMENT_ANNOTATION: text}
        if self._keys is not None:
            annotations[SIGNATURE_ANNOTATION] = sign(self._keys.ring(), str(m.get("uid") or ""), key, p.node, text)
        failed: list[str] = []  # the kinds of the bind's failed tries
        try:
            body: dict[str, Any] = {"metadata": {"annotations": dict(annotations)}}
            if m.get("resourceVersion"):
                body["metadata"]["resourceVersion"] = m["resourceVersion"]
            if self.assign == "patch":
                self._call("annotate pods", f"annotate pod {key}", lambda: self._rest.patch(pod_url(obj), body),
                           binding=False)
            binding = {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": m.get("name"), "namespace": m.get("namespace") or "default",
                                    "uid": m.get("uid"), "annotations": dict(annotations)},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": p.node}}
            self._call("bind pods", f"bind pod {key} to {p.node}", lambda: self._rest.post(pod_url(obj, "binding"), binding),
                       failed=failed)
        except _Conflict as exc:
            self._metrics.bind_errors.labels("conflict").inc()
            if exc.binding:
                # Already bound: by an earlier try of ours whose reply was lost, or by someone
                # else. Not retried; the devices stay assumed until the watch shows the truth.
                self._cache.finish_binding(key)
                return False
            return None  # the pod changed before we touched it: schedule it again
        except KubeError as exc:
            self._metrics.bind_errors.labels(exc.kind).inc()
            # An earlier try whose reply was lost may have bound the pod, whatever the last try
            # got (kube-apiserver killed mid-bind, then 403s while its RBAC cache fills).
            if any(_reply_lost(kind) for kind in failed) or self._maybe_bound(key, obj, exc):
                self._cache.finish_binding(key)  # the server may have bound it: wait for the watch
                return False
            return None
        self._cache.finish_binding(key)
        self._metrics.binds.inc()
        self._metrics.e2e.observe(max(0.0, self._clock() - first_seen))
        self._events.record(obj, reason="Scheduled", action="Binding",
                            note=f"Successfully assigned {key} to {p.node}" + _devices(devices))
        return True

    def _maybe_bound(self, key: str, obj: Obj, exc: KubeError) -> bool:
        """Whether a failed bind may have been applied after all.

        No for errors raised before the request left (refused connections). For an error
        reply (5xx), the server has finished with the request: read the pod and see. For a
        lost reply (a timeout) the write may still land after any read, so yes: the devices
        stay assumed until the watch shows the pod, at most the assumption's TTL.
        """
        if exc.kind in CLEAN_FAILURES or exc.kind.startswith("HTTP 4"):
            return False
        if not exc.kind.startswith("HTTP "):
            return True
        try:
            with api_errors(f"get pod {key}"):
                current = self._rest.get(pod_url(obj))
        except KubeError:
            return True
        return bool((current.get("spec") or {}).get("nodeName"))

    def _call(self, kind: str, what: str, fn: Callable[[], T], *, binding: bool = True,
              failed: list[str] | None = None) -> T:
        """One request under the QPS budget; retried on 5xx/429/timeouts, never on 409.

        `kind` ("bind pods") keys the Retrier's logging, so an outage during which every bind
        fails is one warning, not one per pod; `what` names the pod in the message. The kind
        of each retried failure is appended to `failed`.
        """
        def once() -> T:
            self._bucket.acquire()
            try:
                with api_errors(what):
                    return fn()
            except TemporaryError as exc:
                if exc.kind == "HTTP 409":
                    raise _Conflict(str(exc), binding) from exc
                if failed is not None:
                    failed.append(exc.kind)
                raise
        return self._retrier.call(kind, once)

    # -- unschedulable pods -----------------------------------------------------------------
    def mark_unschedulable(self, key: str, obj: Obj, message: str, reason: str = UNSCHEDULABLE,
                           nominated: str | None = None) -> Future[bool]:
        """PodScheduled=False with `reason` and `message`; `nominatedNodeName` set only for a
        preemptor waiting for its victims (Karpenter ignores such pods, rightly). Writes for
        one pod land in the order asked; one overtaken by a newer write is dropped (False)."""
        return self._in_order.submit(f"pod {key}", lambda: self._status(key, obj, message, reason, nominated))

    def _status(self, key: str, obj: Obj, message: str, reason: str, nominated: str | None) -> bool:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason,
                                           "message": message, "lastProbeTime": None, "lastTransitionTime": now}],
                           "nominatedNodeName": nominated}}
        try:
            self._call("update pod status", f"update status of pod {key}",
                       lambda: self._rest.patch(pod_url(obj, "status"), body, STRATEGIC))
        except (_Conflict, KubeError):
            return False
        if reason in (UNSCHEDULABLE, GANG_UNSCHEDULABLE, QUEUE_NOT_ALLOWED):
            self._events.record(obj, reason="FailedScheduling", note=message, warning=True, limit_key=key)
        return True

    # -- evictions --------------------------------------------------------------------------
    def evict(self, key: str, obj: Obj, why: str, *, attempts: int = 5,
              event: str | None = "Preempted") -> Future[bool]:
        """Evict through the Eviction API; on success record a Normal event `event` (None: the
        caller records its own, as the fault follower does)."""
        return self._pool.submit(self._evict, key, obj, why, attempts, event)

    def _evict(self, key: str, obj: Obj, why: str, attempts: int, event: str | None) -> bool:
        """POST pods/{name}/eviction; a 429 (a PodDisruptionBudget says not now) waits and retries."""
        m = meta(obj)
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": m.get("name"), "namespace": m.get("namespace") or "default"}}
        delay = 1.0
        for attempt in range(attempts):
            self._bucket.acquire()
            try:
                with api_errors(f"evict pod {key}"):
                    self._rest.post(pod_url(obj, "eviction"), body)
            except TemporaryError as exc:
                if exc.kind == "HTTP 429" and attempt + 1 < attempts:
                    self._metrics.evictions.labels("blocked").inc()
                    log.info("eviction of %s blocked (%s); retrying in %.0f s", key, exc, exc.delay_s or delay)
                    time.sleep(exc.delay_s or delay)
                    delay = min(delay * 2, 30.0)
                    continue
                self._metrics.evictions.labels("failed").inc()
                self._retrier.failed("evict pods", exc)  # an outage: one warning, not one per victim
                return False
            except KubeError as exc:
                self._metrics.evictions.labels("failed").inc()
                self._retrier.failed("evict pods", exc)
                return False
            self._retrier.succeeded("evict pods")
            self._metrics.evictions.labels("evicted").inc()
            if event is not None:
                self._events.record(obj, reason=event, note=why, action="Preempting")
            return True
        return False

    # -- PodGroup and Queue status ----------------------------------------------------------
    def group_status(self, namespace: str, name: str, status: dict[str, Any]) -> Future[bool]:
        url = path("scheduling.x-k8s.io/v1alpha1", "podgroups", name, namespace, "status")
        what = f"podgroup {namespace}/{name}"
        return self._in_order.submit(what, lambda: self._status_patch("update podgroup status", what, url, status))

    def queue_status(self, name: str, status: dict[str, Any]) -> Future[bool]:
        url = path("gpufleet.io/v1alpha1", "queues", name, None, "status")
        what = f"queue {name}"
        return self._in_order.submit(what, lambda: self._status_patch("update queue status", what, url, status))

    def _status_patch(self, kind: str, what: str, url: str, status: dict[str, Any]) -> bool:
        try:
            self._call(kind, f"update status of {what}", lambda: self._rest.patch(url, {"status": status}))
            return True
        except (_Conflict, KubeError):
            return False


class _InOrder:
    """Writes of one object land in the order they were asked for: they run one at a time per
    object, and a droppable one (a status write) that a newer write for the same object
    overtook in the queue is dropped (its future says False). The callers write a status only
    when it differs from the last one they asked for, so a slow or retried old write landing
    last would stay. A write that is not droppable (a pod's bind) always runs, after the
    object's write in flight; the status writes queued before it are dropped."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[int, threading.Lock]] = {}
        """Per object with a write asked for and not done: the newest write's number, and
        the lock its writes take one at a time."""
        self._count = 0

    def submit(self, key: str, write: Callable[[], bool], *, droppable: bool = True) -> Future[bool]:
        with self._lock:
            self._count += 1
            number = self._count
            found = self._latest.get(key)
            self._latest[key] = (number, found[1] if found else threading.Lock())
        return self._pool.submit(self._run, key, number, write, droppable)

    def _run(self, key: str, number: int, write: Callable[[], bool], droppable: bool) -> bool:
        with self._lock:
            found = self._latest.get(key)
        if found is None or found[0] != number:
            if droppable:
                return False  # a newer write for this object was asked for: it says what is true now
            if found is None:
                return write()  # a newer write overtook it and has finished
        with found[1]:
            with self._lock:
                if droppable and self._newest(key) != number:
                    return False
            try:
                return write()
            finally:
                with self._lock:
                    if self._newest(key) == number:
                        del self._latest[key]

    def _newest(self, key: str) -> int | None:
        found = self._latest.get(key)
        return found[0] if found else None


class _Conflict(KubeError):
    def __init__(self, message: str, binding: bool) -> None:
        super().__init__(message, "HTTP 409")
        self.binding = binding


CLEAN_FAILURES = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol"})
"""Transport errors raised before the request reached the server: it certainly was not applied."""


def _reply_lost(kind: str) -> bool:
    """A transport failure after the request may have reached the server (a timeout, a reset)."""
    return not kind.startswith("HTTP ") and kind not in CLEAN_FAILURES


def _has_claims(obj: Obj) -> bool:
    return bool((obj.get("spec") or {}).get("resourceClaims"))


def _devices(a: ann.GpuAssignment) -> str:
    if a.mig:
        return f" (MIG {', '.join(f'{m.gpu}#{m.slice}' for m in a.mig)})"
    if a.gpus:
        share = "" if a.milli >= ann.WHOLE_MILLI else f", {a.milli} milli"
        return f" (GPUs {', '.join(a.gpus)}{share})"
    return ""
