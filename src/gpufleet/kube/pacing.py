"""`CyclePacer`: how long the scheduler's loop rests after a cycle before it starts the next.

A cycle holds the GIL that the pod watch's decoding and the binders' requests also need, so
cycles may take at most `share` of the process's time (half, by default): a cycle that took
`d` seconds owes `d * (1 - share) / share` seconds of rest. Owed rest is paid only when it is
not already paid: idle time before a cycle (waiting for a change) counts as rest taken in
advance, up to `burst_s` seconds of cycling. So a cycle that follows a quiet spell is followed
at once by the next when pods arrived meanwhile, and the rest is taken only when cycles come
back to back, as when thousands of pods are pending or a few hundred cannot be placed and are
tried again on every change.

Resting a whole cycle's length after every cycle (`burst_s=0`, what the loop did before)
held each pod that arrived during a cycle for that cycle's rest as well: at 5,000 nodes and
50 pods/s, 11 ms of its median 14 ms from seen to scheduled (docs/performance.md).
"""

from __future__ import annotations

import time
from typing import Callable


class CyclePacer:
    def __init__(self, *, share: float = 0.5, burst_s: float = 0.1, min_rest_s: float = 0.002,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 < share < 1.0:
            raise ValueError(f"share must be between 0 and 1 (exclusive), got {share}")
        if burst_s < 0.0 or min_rest_s < 0.0:
            raise ValueError(f"burst_s and min_rest_s must not be negative, got {burst_s} and {min_rest_s}")
        self._per_idle_s = share / (1.0 - share)
        """Seconds of cycling that one second of rest pays for."""
        self._burst_s, self._min_rest_s, self._clock = burst_s, min_rest_s, clock
        self._credit = burst_s
        """Seconds of cycling the loop may still do without resting; negative: rest owed."""
        self._idle_since: float | None = None
        self._busy_since = 0.0

    def started(self) -> None:
        """A cycle starts: the time since the last one ended is rest taken."""
        now = self._clock()
        if self._idle_since is not None:
            self._credit = min(self._burst_s, self._credit + (now - self._idle_since) * self._per_idle_s)
        self._busy_since = now

    def finished(self) -> float:
        """The cycle ended: seconds to rest before the next (at least `min_rest_s`)."""
        now = self._clock()
        self._credit -= now - self._busy_since
        self._idle_since = now
        return max(self._min_rest_s, -self._credit / self._per_idle_s)
