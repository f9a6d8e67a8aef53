"""`VirtualTime`: a clock whose `sleep` advances it instead of waiting, for tests of retries and backoff."""

from __future__ import annotations


class VirtualTime:
    """The retrier's clock: its backoff sleeps advance it instead of waiting, and are recorded."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
