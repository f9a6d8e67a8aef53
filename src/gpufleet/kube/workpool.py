"""`WorkPool`: threads that run urgent work (binds, evictions) ahead of the rest (status writes).

A `ThreadPoolExecutor` runs work first in, first out. The binder's work is of two kinds: a bind
puts a pod on its GPUs, a status write tells a pod (and Karpenter) why it has none yet. When a
cycle leaves both queued and the API server is the limit, first in, first out spends the
server on whichever was asked first, and the pods that fit wait behind the writes for those
that do not: at 1,000 nodes of 8 GPUs and 10,000 pods, about two status writes per bind.

Here a free thread takes the oldest urgent work, except that every `share`-th start while
both kinds are waiting goes to the oldest other work: status writes are never starved, and get
at least 1/`share` of the starts while binds are waiting. Within a kind the order is kept.
Threads start as work arrives, up to `workers`, as `ThreadPoolExecutor`'s do.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_Work = tuple["Future[Any]", Callable[[], Any]]


class WorkPool:
    def __init__(self, workers: int, *, name: str = "work", share: int = 8) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if share < 2:
            raise ValueError(f"share must be at least 2, got {share}")
        self._workers, self._name, self._share = workers, name, share
        self._cv = threading.Condition()
        self._urgent: deque[_Work] = deque()
        self._other: deque[_Work] = deque()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        """Threads waiting for work that no `submit` has woken yet."""
        self._urgent_run = 0
        """Urgent starts since other work last started while both kinds were waiting."""
        self._closed = False

    def submit(self, fn: Callable[[], T], *, urgent: bool = False) -> Future[T]:
        future: Future[T] = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("cannot submit work after shutdown")
            (self._urgent if urgent else self._other).append((future, fn))
            if self._idle:
                self._idle -= 1
                self._cv.notify()
            elif len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work accepted; with `cancel_futures` the work not started is cancelled, else
        it still runs; with `wait`, return once the threads have finished."""
        with self._cv:
            self._closed = True
            if cancel_futures:
                for future, _ in (*self._urgent, *self._other):
                    future.cancel()
                self._urgent.clear()
                self._other.clear()
            self._cv.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _next(self) -> _Work | None:
        """The work to start next, or None when there is none. Called holding `_cv`."""
        if self._urgent and self._other:
            if self._urgent_run + 1 >= self._share:
                self._urgent_run = 0
                return self._other.popleft()
            self._urgent_run += 1
            return self._urgent.popleft()
        if self._urgent:
            return self._urgent.popleft()
        if self._other:
            return self._other.popleft()
        return None

    def _work(self) -> None:
        while True:
            with self._cv:
                work = self._next()
                while work is None:
                    if self._closed:
                        return
                    self._idle += 1
                    self._cv.wait()
                    work = self._next()
            future, fn = work
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever waits on the future, as an executor does
                future.set_exception(exc)
            else:
                future.set_result(result)
