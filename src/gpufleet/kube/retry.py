"""Retrying API calls: bounded exponential backoff, a cool-down for writes, and logs once per kind.

* **Within a call**, a `TemporaryError` is retried after 0.25 s, 0.5 s, 1 s, … (or the
  server's Retry-After), up to `attempts` tries and never starting a try after `budget_s`.
  A `PermanentError` is raised at once.
* **Across calls**, an operation marked `cooldown` that failed is not sent again until a
  cool-down has passed; each further failure doubles it, continuing the same backoff up to
  `cooldown_max_s`. The agent asks to write its node every 0.25 s until a write succeeds,
  and a thousand nodes doing that during an API outage would keep the server down. Calls
  made during the cool-down fail at once with the error that started it. Reads are not cooled down:
  an Allocate that needs the pod list deserves a real try.
* **Logging**: the first failure of each kind (operation and `KubeError.kind`, e.g. "list
  pods on node n1" and "HTTP 500") is a warning; repeats are debug lines until the episode
  ends: the operation succeeds `episode_quiet_s` or more after its last failure, which is
  logged once at info. So an outage during which every pod's Allocate fails gives one
  warning, not one per pod. The quiet time matters when calls run concurrently (the
  scheduler's bind workers, 64 by default): during a partial outage failures and successes
  interleave, and ending the episode at any success would log a warning for nearly every failure.

Time is injected (`sleep`, `clock`, `rng`), so tests run the backoff on virtual time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from gpufleet.kube.errors import KubeError, PermanentError, TemporaryError, api_errors

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    """Tries per call, the first included."""
    first_delay_s: float = 0.25
    """Backoff before the second try; it doubles for each further try."""
    max_delay_s: float = 2.0
    """Cap of one backoff step within a call."""
    budget_s: float = 3.0
    """No retry starts later than this after the first try (the kubelet waits on Allocate)."""
    cooldown_max_s: float = 60.0
    """Cap of the cool-down between failed calls of a cooled-down operation."""
    jitter: float = 0.2
    """Each wait is scaled by a random factor in [1 - jitter, 1 + jitter], so that nodes that
    failed together do not retry together."""
    episode_quiet_s: float = 5.0
    """A failure episode ends at the first success at least this long after its last failure
    (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class _Cooldown:
    until: float
    wait_s: float
    error: KubeError
    """What calls during the cool-down raise (a fresh copy each)."""


class Retrier:
    """Runs API calls under one `RetryPolicy`; safe to use from several threads."""

    def __init__(self, policy: RetryPolicy, log: logging.Logger, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.policy, self._log = policy, log
        self._sleep, self._clock, self._rng = sleep, clock, rng or random.Random()
        self._reported: dict[tuple[str, str], float] = {}
        """(operation, kind) of each failure episode not over -> when it last failed."""
        self._cooldowns: dict[str, _Cooldown] = {}
        self._lock = threading.Lock()

    def call(self, operation: str, fn: Callable[[], T], *, cooldown: bool = False) -> T:
        """`fn()`, with its lightkube/httpx errors translated and retried; raises KubeError.

        `operation` ("patch node n1") prefixes error messages and keys logging and cool-down.
        """
        if cooldown:
            self._check_cooldown(operation)
        start = self._clock()
        for attempt in range(1, self.policy.attempts + 1):
            try:
                with api_errors(operation):
                    result = fn()
            except TemporaryError as exc:
                delay = exc.delay_s if exc.delay_s is not None else self._backoff(attempt)
                retry = attempt < self.policy.attempts and self._clock() - start + delay <= self.policy.budget_s
                self._report(operation, exc, retry)
                if retry:
                    self._sleep(delay)
                elif cooldown:
                    raise self._cool_down(operation, exc) from exc
                else:
                    raise
            except PermanentError as exc:
                self._report(operation, exc, False)
                if cooldown:
                    raise self._cool_down(operation, exc) from exc
                raise
            else:
                self._succeeded(operation)
                return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def failed(self, operation: str, exc: KubeError) -> None:
        """A failure of a call the caller made and handles itself, logged as `call` logs its
        own: once per episode and kind."""
        self._report(operation, exc, False)

    def succeeded(self, operation: str) -> None:
        """A success of such a call: it may end the operation's failure episode."""
        self._succeeded(operation)

    def _backoff(self, attempt: int) -> float:
        return self._jittered(min(self.policy.max_delay_s, self.policy.first_delay_s * 2 ** (attempt - 1)))

    def _jittered(self, seconds: float) -> float:
        return seconds * (1 + self.policy.jitter * (2 * self._rng.random() - 1))

    def _check_cooldown(self, operation: str) -> None:
        with self._lock:
            state = self._cooldowns.get(operation)
        if state is not None and self._clock() < state.until:
            raise _same(state.error)

    def _cool_down(self, operation: str, exc: KubeError) -> KubeError:
        """Start or double the operation's cool-down; the error to raise, which names it.

        Every call refused during one cool-down raises the same message, so a caller that
        logs each distinct failure once writes one line per cool-down.
        """
        p = self.policy
        with self._lock:
            previous = self._cooldowns.get(operation)
            # continue the in-call backoff sequence where the call's own retries stopped
            wait = previous.wait_s * 2 if previous else p.first_delay_s * 2 ** p.attempts
            asked = exc.delay_s if isinstance(exc, TemporaryError) and exc.delay_s is not None else 0.0
            wait = min(p.cooldown_max_s, max(wait, asked))
            error = _same(exc, f"{exc} (not sent again for {wait:.1f} s)")
            self._cooldowns[operation] = _Cooldown(self._clock() + self._jittered(wait), wait, error)
        return error

    def _report(self, operation: str, exc: KubeError, retrying: bool) -> None:
        key = (operation, exc.kind)
        with self._lock:
            first = key not in self._reported
            self._reported[key] = self._clock()
        if first:
            self._log.warning("%s%s", exc, "; retrying with backoff" if retrying else "")
        else:
            self._log.debug("%s (again)", exc)

    def _succeeded(self, operation: str) -> None:
        now = self._clock()
        with self._lock:
            self._cooldowns.pop(operation, None)
            failing = [k for k in self._reported if k[0] == operation]
            if not failing or any(now - self._reported[k] < self.policy.episode_quiet_s for k in failing):
                return  # no episode, or a call that overlapped a recent failure: not over yet
            for k in failing:
                del self._reported[k]
        self._log.info("%s: works again", operation)


def _same(exc: KubeError, message: str | None = None) -> KubeError:
    """A new error of the same retry semantics as `exc`, with `message` or the same one."""
    kind = TemporaryError if isinstance(exc, TemporaryError) else PermanentError
    return kind(str(exc) if message is None else message, exc.kind)
