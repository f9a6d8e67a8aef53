"""Client-side rate limits: a token bucket for API requests, and a per-pod limit for events.

`TokenBucket(qps, burst)` is client-go's flowcontrol limiter: `burst` requests may go at once,
then `qps` per second; `acquire()` blocks the calling thread until its token is due. Tokens
are handed out in order of request (a reservation model), so many threads sharing one bucket
get exactly `qps` together. `qps <= 0` means unlimited.

`PerKeyLimiter(interval_s)` lets one event per key through per interval (a pod's repeated
FailedScheduling), unless the message changed: a new reason is news, the same one is spam.
Both take an injected clock (and sleep) so tests run on virtual time.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps, self.burst = qps, max(1, burst)
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._last = clock()
        self.granted = 0
        """Tokens handed out so far (for the metrics)."""

    def reserve(self) -> float:
        """Take one token now and return how long to wait before using it."""
        with self._lock:
            self.granted += 1
            if self.qps <= 0:
                return 0.0
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)


class PerKeyLimiter:
    def __init__(self, interval_s: float, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 100_000) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._max_keys = max_keys

    def allow(self, key: str, message: str = "") -> bool:
        now = self._clock()
        with self._lock:
            seen = self._last.get(key)
            if seen is not None and seen[1] == message and now - seen[0] < self.interval_s:
                return False
            if len(self._last) >= self._max_keys:
                self._last.clear()  # bounded memory; at worst one repeated event per key
            self._last[key] = (now, message)
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)
