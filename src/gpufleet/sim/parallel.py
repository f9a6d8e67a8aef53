"""Run independent simulation jobs in worker processes, reporting each as it finishes.

Workers are forked so they inherit `shared` (workloads hold read-only mapping proxies that
do not pickle); results come back pickled. Linux and macOS only with workers > 1.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence, TypeVar

R = TypeVar("R")

_SHARED: Any = None
_FN: Any = None


def _call(args: tuple[Any, ...]) -> Any:
    return _FN(_SHARED, *args)


def run_jobs(fn: Callable[..., R], shared: Any, jobs: Sequence[tuple[Any, ...]], workers: int,
             on_done: Callable[[R], None] | None = None) -> list[R]:
    """`fn(shared, *job)` for every job, in `workers` processes (1 = in this process)."""
    global _SHARED, _FN
    results: list[R] = []
    if workers <= 1:
        for job in jobs:
            results.append(fn(shared, *job))
            if on_done:
                on_done(results[-1])
        return results
    _SHARED, _FN = shared, fn
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for future in as_completed([pool.submit(_call, job) for job in jobs]):
                results.append(future.result())
                if on_done:
                    on_done(results[-1])
    finally:
        _SHARED = _FN = None
    return results
