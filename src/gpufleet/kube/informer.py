"""Informers: list, then watch from the list's resourceVersion, forever, on a thread each.

The loop of one informer (client-go's Reflector, simplified):

1. LIST (one request, no paging) -> `handler.replace(items)`, remember `resourceVersion`;
   the first successful list marks the informer synced.
2. WATCH from that version with bookmarks; ADDED/MODIFIED -> `upsert`, DELETED -> `delete`,
   BOOKMARK and every event advance the version. When the server ends the stream (its
   timeout), watch again from the last version.
3. 410 Gone (as the reply to the WATCH or as an ERROR event in the stream): the version is
   too old, so LIST again (step 1).
4. Any other failure (5xx, timeouts, refused connections): wait with exponential backoff
   (0.25 s doubling to 30 s, jittered) and watch again; after three failures in a row,
   relist. The first failure of an episode is one warning, repeats are debug lines, and
   recovery is one info line: an outage gives a handful of lines, not one per pod.
5. A LIST answered 404 means the API server does not serve the resource (a CRD not
   installed, `resource.k8s.io/v1` before Kubernetes 1.34): `absent` is set, so a caller may
   treat the resource as empty, and the list is retried with backoff in case it appears.

Every object reaches the handler without `metadata.managedFields`, as kube-scheduler's pod
informer and kube-controller-manager's informers keep them (a transform that drops them,
pkg/scheduler/scheduler.go `newPodInformer`): nothing here reads them, they are a quarter of a
pod's JSON, and in this process they were a third of the containers each pod event left for
the garbage collector to scan. A write of an object read here that leaves them out keeps the
server's (kube-apiserver replaces managedFields only when a request sets them).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from gpufleet.kube.errors import KubeError, TemporaryError, api_errors
from gpufleet.kube.rest import Rest

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Handler:
    replace: Callable[[Iterable[Obj]], None]
    upsert: Callable[[Obj], None]
    delete: Callable[[Obj], None]


@dataclass(frozen=True, slots=True)
class Settings:
    watch_timeout_s: int = 300
    """Server-side timeout of one WATCH request (`timeoutSeconds`)."""
    first_backoff_s: float = 0.25
    max_backoff_s: float = 30.0


class Informer:
    def __init__(self, rest: Rest, what: str, url: str, handler: Handler, stop: threading.Event, *,
                 params: Mapping[str, str] | None = None, settings: Settings = Settings(),
                 rng: random.Random | None = None) -> None:
        self.what, self.url, self.handler = what, url, handler
        self._rest, self._stop, self._params = rest, stop, dict(params or {})
        self.settings = settings
        self.synced = threading.Event()
        self.absent = threading.Event()
        """Set when a LIST was answered 404: the server does not serve this resource (yet)."""
        self.relists = 0
        self._rng = rng or random.Random()
        self._version: str | None = None
        self._failures = 0
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self.run, name=f"informer-{what}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                with api_errors(f"{'watch' if self._version else 'list'} {self.what}"):
                    if self._version is None:
                        self._list()
                    else:
                        self._watch()
            except KubeError as exc:
                self._failed(exc)
            except Exception as exc:  # a bug or a malformed reply: keep the informer alive, loudly
                log.exception("%s informer: unexpected error", self.what)
                self._failed(TemporaryError(f"{self.what}: {exc}", type(exc).__name__))

    def _list(self) -> None:
        body = self._rest.list(self.url, self._params)
        items = body.get("items") or []
        for item in items:
            _drop_managed_fields(item)
        self.handler.replace(items)
        self._version = str((body.get("metadata") or {}).get("resourceVersion") or "") or None
        self.relists += 1
        self._failures = 0  # the backoff restarts, but the episode ends only with a working watch
        self.synced.set()

    def _watch(self) -> None:
        started, events = time.monotonic(), 0
        try:
            events = self._stream()
        finally:
            if not events and time.monotonic() - started < 1.0:
                # A server that ends every watch at once (shutting down, a proxy) must not spin us.
                self._stop.wait(self.settings.first_backoff_s * (1 + self._rng.random()))

    def _stream(self) -> int:
        """One WATCH request; the number of events it delivered."""
        events = 0
        params = dict(self._params)
        params["resourceVersion"] = self._version or ""
        params["timeoutSeconds"] = str(self.settings.watch_timeout_s)
        for event in self._rest.watch(self.url, params, timeout_s=self.settings.watch_timeout_s + 30):
            events += 1
            if self._stop.is_set():
                break
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                raise TemporaryError(f"watch {self.what}: {code} {obj.get('reason', '')}: {obj.get('message', '')}",
                                     f"HTTP {code}")
            _drop_managed_fields(obj)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "ADDED" or kind == "MODIFIED":
                self.handler.upsert(obj)
            elif kind == "DELETED":
                self.handler.delete(obj)
            if version:
                self._version = str(version)
            self._recovered()
        return events

    def _failed(self, exc: KubeError) -> None:
        gone = exc.kind == "HTTP 410"
        if exc.kind == "HTTP 404" and self._version is None:
            self.absent.set()
        self._failures += 1
        if gone or self._failures >= 3:
            self._version = None  # relist: 410 says our version is too old; after errors, be safe
        if exc.kind not in self._reported:
            self._reported.add(exc.kind)
            if gone:
                log.info("%s; relisting", exc)
            else:
                log.warning("%s; retrying with backoff", exc)
        else:
            log.debug("%s (again)", exc)
        if gone and self._failures == 1:
            return  # a plain 410 relists at once
        delay = min(self.settings.max_backoff_s, self.settings.first_backoff_s * 2 ** (self._failures - 1))
        self._stop.wait(delay * (0.8 + 0.4 * self._rng.random()))

    def _recovered(self) -> None:
        self._failures = 0
        if self._reported:
            if self._reported - {"HTTP 410"}:
                log.info("%s informer: works again", self.what)
            self._reported.clear()


def _drop_managed_fields(obj: Obj) -> None:
    m = obj.get("metadata")
    if isinstance(m, dict):
        m.pop("managedFields", None)
