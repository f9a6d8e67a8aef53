"""`EventRecorder`: `events.k8s.io/v1` Events, sent in the background and never in the way.

Events are for people (`kubectl describe pod`), not for correctness, so they never delay a
bind: `record()` queues one and returns; worker threads send them under their own token
bucket (not the binds' QPS budget, as kube-scheduler's event broadcaster has its own
client). When the queue is full the event is dropped and counted. A pod's repeated
`FailedScheduling` with the same message is let through once per `repeat_interval_s`
(a `PerKeyLimiter`), as client-go's event spam filter does.

Fields follow interfaces.md section 5: `eventTime` as MicroTime, `reportingController`,
`reportingInstance`, `action`, `reason`, `regarding`, `note`, `type`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping, NamedTuple

from gpufleet.kube.errors import KubeError, TemporaryError, api_errors
from gpufleet.kube.leader import micro_time
from gpufleet.kube.ratelimit import PerKeyLimiter, TokenBucket
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier

log = logging.getLogger(__name__)
CONTROLLER = "gpufleet.io/scheduler"
ROUTINE = frozenset({"Scheduled", "FailedScheduling"})
"""Reasons too common to keep among the recent events (the dashboard shows the others: preemptions,
evictions, faults)."""


def event_body(pod: Mapping[str, Any], *, reason: str, note: str, type_: str, action: str,
               instance: str, now: float, controller: str = CONTROLLER) -> dict[str, Any]:
    m = pod.get("metadata") or {}
    name = f"{m.get('name', '')}.{int(now * 1e9):x}"
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name, "namespace": m.get("namespace") or "default"},
            "eventTime": micro_time(now), "reportingController": controller, "reportingInstance": instance,
            "action": action, "reason": reason, "type": type_, "note": note[:1024],
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": m.get("name"),
                          "namespace": m.get("namespace") or "default", "uid": m.get("uid")}}


class _Event(NamedTuple):
    pod: Mapping[str, Any]
    reason: str
    note: str
    type_: str
    action: str
    now: float


class EventRecorder:
    def __init__(self, rest: Rest, retrier: Retrier, instance: str, *, qps: float = 50.0, burst: int = 100,
                 repeat_interval_s: float = 60.0, workers: int = 2, capacity: int = 10_000,
                 defer_to: Callable[[], bool] | None = None, max_defer_s: float = 10.0) -> None:
        self._rest, self._retrier, self.instance = rest, retrier, instance
        self._defer_to, self.max_defer_s = defer_to, max_defer_s
        """While `defer_to()` (binds waiting to be sent), an event waits, at most `max_defer_s`
        after it was recorded: on a busy API server each event create competes with the binds."""
        self._bucket = TokenBucket(qps, burst)
        self.limiter = PerKeyLimiter(repeat_interval_s)
        self._queue: queue.Queue[tuple[float, _Event] | None] = queue.Queue(capacity)
        self.dropped = 0
        self.sent = 0
        self._recent: deque[tuple[float, str, str, str]] = deque(maxlen=200)
        self.recorded = 0
        """How many events other than `ROUTINE` ones were recorded (sent or not)."""
        self._closing = False
        self._threads = [threading.Thread(target=self._run, name=f"events-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def record(self, pod: Mapping[str, Any], *, reason: str, note: str, warning: bool = False,
               action: str = "Scheduling", limit_key: str | None = None) -> bool:
        """Queue an event about `pod`; False if rate-limited or dropped."""
        if limit_key is not None and not self.limiter.allow(limit_key, note):
            return False
        now = time.time()
        type_ = "Warning" if warning else "Normal"
        if reason not in ROUTINE:
            m = pod.get("metadata") or {}
            self._recent.append((now, reason, f"{m.get('namespace') or 'default'}/{m.get('name')}", note))
            self.recorded += 1
        try:  # the body is built when it is sent: hundreds of binds a second each record one
            self._queue.put_nowait((time.monotonic(), _Event(pod, reason, note, type_, action, now)))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def recent(self) -> list[tuple[float, str, str, str]]:
        """The last 200 events other than `ROUTINE` ones: (time, reason, namespace/name, note), oldest first."""
        return list(self._recent)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            recorded, event = item
            while self._defer_to is not None and not self._closing and self._defer_to() \
                    and time.monotonic() < recorded + self.max_defer_s:
                time.sleep(0.02)
            body = event_body(event.pod, reason=event.reason, note=event.note, type_=event.type_,
                              action=event.action, instance=self.instance, now=event.now)
            ns = body["metadata"]["namespace"]
            self._bucket.acquire()
            try:
                self._retrier.call("create events", lambda: self._create(ns, body))
                self.sent += 1
            except KubeError:
                pass  # the Retrier logged it once per kind
            except RuntimeError:
                # httpx's "client has been closed": a send that outlived close() lost its
                # client at shutdown. The event is dropped; anything else is a bug.
                if not self._closing:
                    raise
                self.dropped += 1
                return

    def _create(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            with api_errors("create event"):
                self._rest.post(path("events.k8s.io/v1", "events", None, namespace), body)
        except TemporaryError as exc:
            if exc.kind != "HTTP 409":
                raise
            # AlreadyExists: an event's name is unique (pod and nanoseconds), so an earlier try
            # of this create landed and only its reply was lost. Sent; trying again cannot help.

    def close(self, timeout_s: float = 2.0) -> None:
        """Send what is queued (up to `timeout_s`), drop the rest (counted in `dropped`), then
        stop the workers and wait for them (up to another `timeout_s`), so that none is left
        sending when the caller closes the client."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._closing = True
        while True:
            try:
                if self._queue.get_nowait() is not None:
                    self.dropped += 1
            except queue.Empty:
                break
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:  # a capacity below the worker count: the rest are daemon threads
                break
        stop_by = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(stop_by - time.monotonic(), 0.0))
