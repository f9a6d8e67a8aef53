"""`ClaimWriter`: a bind decision's DRA claims written to the API server before the Binding.

A secondary scheduler must do what kube-scheduler's DynamicResources PreBind does: "ensure
that claims are allocated and reserved before setting `pod.spec.nodeName`" (KEP-4381), since
the kubelet refuses a pod whose claim is not allocated, does not list it in `reservedFor`, or
is pinned to another node. For each of the pod's claims, in the pod's order:

1. a claim this decision allocated (`Placement.claims`):
   a. PUT the claim with the finalizer `resource.kubernetes.io/delete-protection` added
      (a normal update: finalizers are metadata), unless it is there;
   b. PUT `resourceclaims/status` with `status.allocation` (devices, `nodeSelector` pinning
      the node, `allocationTimestamp`) and the pod appended to `status.reservedFor`;
2. a claim already allocated (shared, or allocated by an earlier decision): the pod appended
   to `reservedFor` if it is not there. A claim whose allocation is still being written for
   another pod by this process (a shared claim two pods of one cycle use) is waited for.

Every write carries the claim's `resourceVersion`, so a claim changed meanwhile answers 409:
it is read again and the step decided anew. If it got allocated by someone else (devices or
node other than decided) nothing is overwritten: the pod goes back to the queue.

**Undo.** When a step fails, or the Binding certainly failed afterwards, what this decision
wrote is taken back, newest first, on the claim as read fresh from the API server (a write
whose reply was lost may have landed): the pod leaves `reservedFor`; an allocation it made is
cleared if nothing else reserves the claim; then the finalizer it added goes, once the claim
is unallocated. That is kube-scheduler's Unreserve plus what the resourceclaim controller
does for a claim nobody reserves. A failed undo is logged; the pod then finds its claim
allocated for it and is placed on that node (the allocation is valid), so nothing is lost.

Writes are requests like the binder's (one QPS budget, retried on 5xx/429/timeouts through
the `Retrier`), sent through a `send` function the binder provides; 409s come back as
`KubeError` of kind "HTTP 409". RBAC: update on resourceclaims and resourceclaims/status,
and, from Kubernetes 1.36, update on the synthetic resourceclaims/binding that kube-apiserver
checks for changes to `allocation` and `reservedFor` (deploy/scheduler/rbac.yaml).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Protocol, Sequence

from gpufleet.kube.errors import KubeError
from gpufleet.kube.rest import path
from gpufleet.kube.translate import meta
from gpufleet.model import Placement
from gpufleet.model.dra import DELETE_PROTECTION, ClaimAllocation, allocated_node, node_selector_for

log = logging.getLogger(__name__)
Obj = dict[str, Any]
RESOURCE_API = "resource.k8s.io/v1"
CONFLICT = "HTTP 409"
CONFLICT_TRIES = 5
"""Reads and writes of one claim step before its conflicts count as a failure."""


class ClaimWriteError(KubeError):
    """A claim cannot take this decision (allocated elsewhere meanwhile, being deleted, kept
    conflicting): the pod goes back to the queue."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "claim")


class ClaimCache(Protocol):
    def claim_object(self, key: str) -> Mapping[str, Any] | None: ...

    def upsert_claim(self, obj: Mapping[str, Any]) -> None: ...


class ClaimApi(Protocol):
    def get(self, url: str) -> Obj: ...

    def put(self, url: str, body: Obj) -> Obj: ...


Send = Callable[[str, Callable[[], Obj]], Obj]
"""`send(what, request)`: one request under the QPS budget and the retries; raises KubeError."""


@dataclass(slots=True)
class Written:
    """What this decision set out to write on one claim (recorded before each request: a
    request whose reply is lost may still have landed, and the undo only takes back what it
    finds)."""

    key: str
    finalizer: bool = False
    allocation: Obj | None = None
    """The `status.allocation` written (None: none)."""
    reserved: bool = False


class ClaimWriter:
    def __init__(self, api: ClaimApi, cache: ClaimCache, send: Send, *, wait_s: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._api, self._cache, self._send, self._clock = api, cache, send, clock
        self.wait_s = wait_s
        """How long a pod waits for another pod's allocation of a claim they share."""
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    # -- allocations being written, for the pods that share them --------------------------
    def expect(self, p: Placement) -> tuple[threading.Event, ...]:
        """Called when the bind is queued, in cycle order (so before any pod of the cycle that
        shares a claim with it): `p`'s allocations are in flight until `settled`."""
        events = tuple(threading.Event() for _ in p.claims)
        with self._lock:
            for a, e in zip(p.claims, events):
                self._inflight[a.claim] = e
        return events

    def settled(self, p: Placement, events: Sequence[threading.Event]) -> None:
        """`p`'s allocations are written or undone: the pods sharing them go on."""
        for e in events:
            e.set()
        with self._lock:
            for a, e in zip(p.claims, events):
                if self._inflight.get(a.claim) is e:
                    del self._inflight[a.claim]

    def _wait_for_others(self, key: str, mine: Sequence[threading.Event]) -> None:
        with self._lock:
            event = self._inflight.get(key)
        if event is not None and event not in mine and not event.wait(self.wait_s):
            raise ClaimWriteError(f"resourceclaim {key}: its allocation for another pod is still being written")

    # -- reserve ------------------------------------------------------------------------------
    def reserve(self, pod: Mapping[str, Any], p: Placement, keys: Sequence[str],
                mine: Sequence[threading.Event] = ()) -> list[Written]:
        """Write the pod's claims (see the module docstring); what was written, for `undo`.
        On failure, undoes its own writes and raises KubeError."""
        new = {a.claim: a for a in p.claims}
        ref = {"resource": "pods", "name": str(meta(pod).get("name", "")), "uid": str(meta(pod).get("uid", ""))}
        journal: list[Written] = []
        try:
            for key in keys:
                if key not in new:
                    self._wait_for_others(key, mine)
                journal.append(Written(key))
                self._reserve_one(journal[-1], ref, p.node, new.get(key))
        except KubeError:
            self.undo(ref["uid"], journal)
            raise
        return journal

    def _reserve_one(self, w: Written, ref: Mapping[str, str], node: str, alloc: ClaimAllocation | None) -> None:
        obj = self._cached(w.key)
        for _ in range(CONFLICT_TRIES):
            try:
                self._step(w, obj, ref, node, alloc)
                return
            except KubeError as exc:
                if exc.kind != CONFLICT:
                    raise
                obj = self._read(w.key)  # changed meanwhile: decide again on what it is now
        raise ClaimWriteError(f"resourceclaim {w.key}: still conflicting after {CONFLICT_TRIES} tries")

    def _step(self, w: Written, obj: Obj, ref: Mapping[str, str], node: str, alloc: ClaimAllocation | None) -> None:
        if meta(obj).get("deletionTimestamp"):
            raise ClaimWriteError(f"resourceclaim {w.key} is being deleted")
        status = obj.get("status") or {}
        current = status.get("allocation")
        if alloc is not None and current is None:
            if DELETE_PROTECTION not in (meta(obj).get("finalizers") or ()):
                w.finalizer = True
                obj = self._write(w.key, _with_finalizer(obj, add=True))
            w.allocation, w.reserved = allocation_status(alloc, self._clock()), True
            self._write(w.key, _with_status(obj, w.allocation, [*(status.get("reservedFor") or ()), dict(ref)]),
                        status=True)
            return
        if current is None:
            raise ClaimWriteError(f"resourceclaim {w.key} is not allocated (its allocation was undone meanwhile)")
        if alloc is not None and not same_devices(current, alloc):
            raise ClaimWriteError(f"resourceclaim {w.key} was allocated differently meanwhile; not overwritten")
        pinned = allocated_node(current.get("nodeSelector"))
        if pinned is not None and pinned != node:
            raise ClaimWriteError(f"resourceclaim {w.key} is allocated on node {pinned}, not {node}")
        reserved = list(status.get("reservedFor") or ())
        if not any(r.get("uid") == ref["uid"] for r in reserved):
            w.reserved = True
            self._write(w.key, _with_status(obj, current, [*reserved, dict(ref)]), status=True)

    # -- undo -----------------------------------------------------------------------------------
    def undo(self, uid: str, journal: Sequence[Written]) -> None:
        """Take back what `journal` wrote for the pod `uid`, newest first; never raises."""
        for w in reversed(journal):
            if not (w.finalizer or w.allocation is not None or w.reserved):
                continue
            try:
                self._undo_one(w, uid)
            except KubeError as exc:
                log.warning("resourceclaim %s: could not take back this scheduler's writes for pod %s: %s "
                            "(the pod finds its claim reserved for it when it is scheduled again)", w.key, uid, exc)

    def _undo_one(self, w: Written, uid: str) -> None:
        for _ in range(CONFLICT_TRIES):
            try:
                obj = self._read(w.key)
            except KubeError as exc:
                if exc.kind == "HTTP 404":
                    return  # the claim is gone: nothing to take back
                raise
            try:
                self._take_back(w, obj, uid)
                return
            except KubeError as exc:
                if exc.kind != CONFLICT:
                    raise
        raise ClaimWriteError(f"resourceclaim {w.key}: undo still conflicting after {CONFLICT_TRIES} tries")

    def _take_back(self, w: Written, obj: Obj, uid: str) -> None:
        status = obj.get("status") or {}
        allocation = status.get("allocation")
        reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != uid]
        if w.allocation is not None and not reserved and allocation is not None \
                and _results(allocation) == _results(w.allocation):
            allocation = None  # ours, and nothing else reserves the claim
        if allocation != status.get("allocation") or len(reserved) != len(status.get("reservedFor") or ()):
            obj = self._write(w.key, _with_status(obj, allocation, reserved), status=True)
        if w.finalizer and allocation is None and DELETE_PROTECTION in (meta(obj).get("finalizers") or ()):
            self._write(w.key, _with_finalizer(obj, add=False))

    # -- requests -------------------------------------------------------------------------------
    def _cached(self, key: str) -> Obj:
        found = self._cache.claim_object(key)
        return copy.deepcopy(dict(found)) if found is not None else self._read(key)

    def _read(self, key: str) -> Obj:
        return self._send(f"get resourceclaim {key}", lambda: self._api.get(claim_url(key)))

    def _write(self, key: str, body: Obj, *, status: bool = False) -> Obj:
        what = f"update {'status of ' if status else ''}resourceclaim {key}"
        result = self._send(what, lambda: self._api.put(claim_url(key, "status" if status else None), body))
        self._cache.upsert_claim(result)  # read your writes: the next snapshot shows it at once
        return result


def claim_url(key: str, sub: str | None = None) -> str:
    namespace, name = key.split("/", 1)
    return path(RESOURCE_API, "resourceclaims", name, namespace, sub)


def allocation_status(a: ClaimAllocation, now_s: float) -> Obj:
    """`status.allocation` for `a`, as kube-scheduler writes it."""
    results = []
    for d in a.devices:
        result: Obj = {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
        if d.consumed:
            prefix = f"{d.driver}/"
            result["consumedCapacity"] = {k.removeprefix(prefix): quantity(v) for k, v in d.consumed.items()}
        if d.share_id:
            result["shareID"] = d.share_id
        results.append(result)
    out: Obj = {"devices": {"results": results},
                "allocationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s))}
    if a.node is not None:
        out["nodeSelector"] = node_selector_for(a.node)
    return out


def quantity(value: Decimal) -> str:
    """A Kubernetes quantity string for an exact decimal (`40Gi` in bytes is `42949672960`)."""
    return format(value.normalize(), "f")


def same_devices(allocation: Mapping[str, Any], a: ClaimAllocation) -> bool:
    """Whether the claim's `status.allocation` is `a` (the same devices, the same node)."""
    ours = sorted((d.request, d.driver, d.pool, d.device) for d in a.devices)
    return _results(allocation) == ours and allocated_node(allocation.get("nodeSelector")) == a.node


def _results(allocation: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    return sorted((str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                  for r in (allocation.get("devices") or {}).get("results") or ())


def _with_finalizer(obj: Obj, *, add: bool) -> Obj:
    body = _body(obj)
    finalizers = [f for f in body["metadata"].get("finalizers") or () if f != DELETE_PROTECTION]
    body["metadata"]["finalizers"] = [*finalizers, DELETE_PROTECTION] if add else finalizers
    return body


def _with_status(obj: Obj, allocation: Mapping[str, Any] | None, reserved: Sequence[Mapping[str, Any]]) -> Obj:
    body = _body(obj)
    status = dict(body.get("status") or {})
    status["allocation"] = allocation
    status["reservedFor"] = list(reserved) or None
    body["status"] = {k: v for k, v in status.items() if v is not None}
    return body


def _body(obj: Obj) -> Obj:
    """The claim to PUT back: its resourceVersion kept (so a change meanwhile answers 409),
    managedFields left out (the server keeps them)."""
    body = copy.deepcopy(dict(obj))
    body["metadata"] = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return body
