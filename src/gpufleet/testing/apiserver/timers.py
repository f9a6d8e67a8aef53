"""`Timers`: callbacks run at monotonic deadlines on one background thread.

The simulated kubelets and the simulated Karpenter react to store events through listeners
that run under the store lock, so they may only queue work; a `Timers` runs that work later,
in deadline order (ties in the order queued), never while holding its own lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable


class Timers:
    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(5)

    def after(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run `fn` on the timer thread `delay_s` seconds from now."""
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopping and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                if self._stopping:
                    return
                _, _, fn = heapq.heappop(self._heap)
            fn()
