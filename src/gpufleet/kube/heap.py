"""`HeapKeeper`: when the live scheduler's process runs Python's full garbage collection.

The scheduler keeps every pod and node as the API server sent it: at 5,000 nodes and 10,000
pods about 270,000 tracked objects, and one full (generation 2) collection scans them all,
290 ms with the GIL held (measured on the 2-core development machine). CPython starts one
whenever the objects that reached the oldest generation since the last grew by a quarter, and
a watch replacing every pod's object as it is bound does that every few thousand pods: a
quarter-second stall in the middle of binding, in the latency of every pod waiting then.

So, as long-running Python services do (`gc.freeze`, Python 3.7+):
- after the informers' first lists, one full collection, then everything alive is frozen
  (moved to the permanent generation, which collections do not scan);
- automatic full collections are off (the youngest two generations are still collected as
  usual: they hold almost all garbage that has cycles);
- every `interval_s`, one full collection of what is not frozen (what was created since the
  last one: proportional to the churn, not to the cluster), then freeze again: when the binder
  has just sent its last bind (`quiet`; between bursts of pods, or after a fill of thousands,
  where a stall would hold every bind in flight back), or from the loop once `longest_s` has
  passed without such a moment (`tick`).

The interval is short (5 s) so that each collection is short: at 5,000 nodes and 50 pods/s one
every 60 s took 70-245 ms with the GIL held, and held every pod created meanwhile
(docs/performance.md); the work over time is the same or less, since what died before a
collection is never scanned.

Objects the API server's JSON becomes have no reference cycles, so a frozen pod whose watch
event replaced it is freed by its reference count as before. Objects in a cycle that were alive
when frozen (a request's exception and its traceback, caught at that moment) would outlive
their last reference; so every `thorough_s` (10 minutes) the collection unfreezes first and
scans everything (as long as the collection after the first lists: 240-359 ms at 5,000 nodes
and 10,000 pods), at such a quiet moment too.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)
NO_AUTOMATIC_FULL = 1 << 30
"""The oldest generation's threshold: collections of the generation below it never reach it."""


class HeapKeeper:
    def __init__(self, interval_s: float = 5.0, longest_s: float = 60.0, *, thorough_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 < interval_s <= longest_s:
            raise ValueError(f"need 0 < interval_s <= longest_s, got {interval_s} and {longest_s}")
        self.interval_s, self.longest_s, self.thorough_s = interval_s, longest_s, thorough_s
        self._thorough: float | None = None
        """When the last collection that scanned the frozen objects too ran."""
        self._clock = clock
        self._last: float | None = None
        self._running = threading.Lock()
        """The loop's thread and a binder's may both find a collection due."""
        self.collections = 0

    def after_sync(self) -> None:
        """The informers' first lists are in: collect once, freeze, and take over full collections."""
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, NO_AUTOMATIC_FULL)
        self._collect()

    def tick(self) -> None:
        """Between cycles: a full collection when none came for `longest_s`."""
        self._collect_after(self.longest_s)

    def quiet(self) -> None:
        """Nothing waits on this process now: the periodic full collection, when due."""
        self._collect_after(self.interval_s)

    def _collect_after(self, seconds: float) -> None:
        if not self._running.acquire(blocking=False):
            return  # the other thread is collecting
        try:
            if self._last is not None and self._clock() - self._last >= seconds:
                self._collect()
        finally:
            self._running.release()

    def _collect(self) -> None:
        started = time.perf_counter()
        now = self._clock()
        if self._thorough is None or now - self._thorough >= self.thorough_s:
            gc.unfreeze()  # after the first lists, nothing is frozen yet: the same
            self._thorough = now
        found = gc.collect()
        gc.freeze()
        self._last = self._clock()
        self.collections += 1
        log.debug("full collection: %d unreachable, %.1f ms, %d frozen", found,
                  1000 * (time.perf_counter() - started), gc.get_freeze_count())
