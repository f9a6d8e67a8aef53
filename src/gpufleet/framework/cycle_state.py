"""Per-cycle scratch space shared by plugins (kube-scheduler `CycleState`).

Plugins store precomputed, keyed data here (static node masks per pod constraint key,
a gang's chosen rack). It lives for one `schedule()` call, so caches never go stale
across snapshots.
"""

from __future__ import annotations

import random
from typing import Any


class CycleState:
    __slots__ = ("data", "rng", "now")

    def __init__(self, rng: random.Random, now: float) -> None:
        self.data: dict[Any, Any] = {}
        self.rng = rng
        self.now = now
