"""The client's token bucket and the per-pod event limiter, on virtual time."""

from __future__ import annotations

import threading

from gpufleet.kube.ratelimit import PerKeyLimiter, TokenBucket


class Time:
    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        with self.lock:
            self.now = max(self.now, self.now + 0 * s)


def test_burst_then_qps() -> None:
    t = Time()
    bucket = TokenBucket(50, 100, clock=t.clock, sleep=t.sleep)
    waits = [bucket.reserve() for _ in range(200)]
    assert waits[:100] == [0.0] * 100
    assert abs(waits[100] - 0.02) < 1e-9 and abs(waits[199] - 2.0) < 1e-9  # the 100 after the burst at 50/s


def test_tokens_refill_over_time() -> None:
    t = Time()
    bucket = TokenBucket(10, 1, clock=t.clock, sleep=t.sleep)
    assert bucket.reserve() == 0.0
    assert abs(bucket.reserve() - 0.1) < 1e-9
    t.now += 10.0
    assert bucket.reserve() == 0.0  # refilled, but never beyond the burst
    assert abs(bucket.reserve() - 0.1) < 1e-9


def test_zero_qps_is_unlimited() -> None:
    bucket = TokenBucket(0, 1)
    assert all(bucket.reserve() == 0.0 for _ in range(1000)) and bucket.granted == 1000


def test_shared_by_threads_exactly_qps() -> None:
    t = Time()
    bucket = TokenBucket(100, 10, clock=t.clock, sleep=t.sleep)
    waits: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            w = bucket.reserve()
            with lock:
                waits.append(w)
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert abs(max(waits) - (400 - 10) / 100) < 1e-9  # 400 tokens, 10 free: the last is due at 3.9 s


def test_event_limiter_lets_news_through_and_spam_once_per_interval() -> None:
    t = Time()
    limiter = PerKeyLimiter(60, clock=t.clock)
    assert limiter.allow("ns/p", "0/3 nodes are available: 3 Insufficient GPU.")
    assert not limiter.allow("ns/p", "0/3 nodes are available: 3 Insufficient GPU.")
    assert limiter.allow("ns/q", "0/3 nodes are available: 3 Insufficient GPU.")
    assert limiter.allow("ns/p", "0/3 nodes are available: 3 Insufficient cpu.")  # a new reason is news
    t.now += 61
    assert limiter.allow("ns/p", "0/3 nodes are available: 3 Insufficient cpu.")
