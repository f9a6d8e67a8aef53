"""Leader election on a `coordination.k8s.io/v1` Lease (client-go's leaderelection, reduced).

* Every `retry_period_s` a candidate reads the Lease (a standby also right when the holder's
  lease runs out, so the take-over comes within the lease duration of the last renewal). It takes the lease when there is none
  (create), when it holds it already (renew), or when the holder's `renewTime +
  leaseDurationSeconds` is in the past, or the holder is empty (a released lease). Every
  write is a PUT carrying the `resourceVersion` just read, so of two candidates racing for an
  expired lease exactly one wins (the other gets 409 and reads again).
  `leaseTransitions` is bumped when the holder changes; `acquireTime` is set then.
* The leader renews every `retry_period_s`; if no renewal succeeded for `renew_deadline_s`
  it stops leading (`on_stop`), before the lease can expire for the others
  (renew deadline < lease duration), so two leaders never act at once.
* `release()` on shutdown: holder emptied, `leaseDurationSeconds` 1, so a standby takes
  over at its next retry instead of waiting out the lease.
* `acquireTime`/`renewTime` are MicroTime: the API server accepts exactly six fractional
  digits, which `isoformat()` omits when the microseconds are 0; `micro_time` always writes them.

Defaults are kube-scheduler's (15 s / 10 s / 2 s). Time is injected (`clock` returns Unix
seconds, `wait` sleeps), so tests drive elections on virtual time.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from gpufleet.kube.errors import KubeError, PermanentError, api_errors
from gpufleet.kube.rest import Rest, path

log = logging.getLogger(__name__)
GROUP_VERSION = "coordination.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    namespace: str = "gpufleet-system"
    name: str = "gpufleet-scheduler"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration, got "
                             f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s} s")


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(self, rest: Rest, identity: str, settings: LeaseSettings = LeaseSettings(), *,
                 clock: Callable[[], float] = time.time, wait: Callable[[float], bool] | None = None) -> None:
        self._rest, self.identity, self.settings = rest, identity, settings
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self.leading = threading.Event()
        self._last_renew = 0.0
        self._url = path(GROUP_VERSION, "leases", None, settings.namespace)
        self._lease_url = path(GROUP_VERSION, "leases", settings.name, settings.namespace)
        self.transitions_seen = 0
        self.held_until: float | None = None
        """When the other holder's lease runs out, as last read (None: not held by another)."""

    # -- one attempt ----------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One read-and-write; True if this candidate holds the lease afterwards."""
        now = self._clock()
        s = self.settings
        self.held_until = None
        try:
            with api_errors(f"get lease {s.namespace}/{s.name}"):
                lease = self._get()
            if lease is None:
                body = self._body(None, now, transitions=0, acquire=now)
                with api_errors(f"create lease {s.namespace}/{s.name}"):
                    self._rest.post(self._url, body)
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != self.identity:
                renewed = parse_time(spec.get("renewTime")) or 0.0
                duration = float(spec.get("leaseDurationSeconds") or s.lease_duration_s)
                if renewed + duration >= now:
                    self.held_until = renewed + duration
                    return False  # held by a live leader
            transitions = int(spec.get("leaseTransitions") or 0)
            mine = holder == self.identity
            if not mine:
                transitions += 1
            acquire = parse_time(spec.get("acquireTime")) if mine else now
            body = self._body(lease, now, transitions, acquire or now)
            with api_errors(f"update lease {s.namespace}/{s.name}"):
                self._rest.put(self._lease_url, body)
            self.transitions_seen = transitions
            return True
        except KubeError as exc:
            level = logging.DEBUG if exc.kind == "HTTP 409" else logging.WARNING
            log.log(level, "leader election: %s", exc)
            if isinstance(exc, PermanentError) and exc.kind in ("HTTP 401", "HTTP 403"):
                log.error("leader election needs get/create/update on leases in %s", s.namespace)
            return False

    def _get(self) -> dict[str, Any] | None:
        try:
            return self._rest.get(self._lease_url)
        except Exception as exc:  # 404 -> no lease yet; everything else is the caller's
            code = getattr(getattr(exc, "response", None), "status_code", None)
            if code == 404:
                return None
            raise

    def _body(self, lease: dict[str, Any] | None, now: float, transitions: int, acquire: float) -> dict[str, Any]:
        s = self.settings
        metadata: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
        if lease is not None:
            metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": GROUP_VERSION, "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(round(s.lease_duration_s)),
                         "acquireTime": micro_time(acquire), "renewTime": micro_time(now),
                         "leaseTransitions": transitions}}

    # -- the loop -------------------------------------------------------------------------
    def run(self, on_start: Callable[[], None], on_stop: Callable[[], None]) -> None:
        """Campaign until stopped; call `on_start` on becoming leader, `on_stop` on losing it."""
        s = self.settings
        while not self._stop.is_set():
            ok = self.try_acquire_or_renew()
            now = self._clock()
            if ok:
                self._last_renew = now
                if not self.leading.is_set():
                    log.info("%s became the leader (lease %s/%s)", self.identity, s.namespace, s.name)
                    self.leading.set()
                    on_start()
            elif self.leading.is_set() and now - self._last_renew > s.renew_deadline_s:
                log.error("%s lost the lease: no renewal for %.1f s", self.identity, now - self._last_renew)
                self.leading.clear()
                on_stop()
            if self._wait(self._next_try(s)):
                break

    def _next_try(self, s: LeaseSettings) -> float:
        """The retry period, or less: a standby tries again right when the holder's lease runs
        out, so it takes over within the lease duration of the leader's last renewal (client-go
        waits for its next retry, up to a retry period later)."""
        if self.held_until is None:
            return s.retry_period_s
        return max(0.005, min(s.retry_period_s, self.held_until - self._clock() + 0.005))

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        """Give the lease up if held (at shutdown), so a standby takes over at once."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        s = self.settings
        try:
            with api_errors(f"release lease {s.namespace}/{s.name}"):
                lease = self._get()
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                now = self._clock()
                body = self._body(lease, now, int((lease.get("spec") or {}).get("leaseTransitions") or 0), now)
                body["spec"]["holderIdentity"] = ""
                body["spec"]["leaseDurationSeconds"] = 1
                self._rest.put(self._lease_url, body)
            log.info("%s released the lease", self.identity)
        except KubeError as exc:
            log.warning("leader election: %s", exc)
