"""The simulator's defragmentation pass (`replay(defrag=...)`): `core.defrag` run on the replay's
snapshot for the units that wait, and what it did.

After each batch's scheduling cycle, at most once per `interval_s`, every waiting job that
`core.defrag.wants_defrag` picks (whole GPUs, at least `min_gpus` of them, waiting at least
`min_wait_s`) is offered a plan, oldest first, each on the snapshot the previous one left. The
replay carries a plan out as it does a cycle's result: the evicted pods' jobs are interrupted
(they lose the work since their last checkpoint, the replay's `checkpoint_s`) and then either
start again at once where the plan moved them, or wait in the queue; the blocked unit starts.

Stateful, like a scaler: the ledger (moves within the window, the rolling budget) and the
counters the experiment reports live here; one `Defragmenter` serves one replay.
"""

from __future__ import annotations

import random
import re
from typing import Callable, Sequence

from gpufleet.core import defrag
from gpufleet.framework.profile import Profile
from gpufleet.model import ClusterSnapshot, PodSpec, PodUid
from gpufleet.model.disruption import DisruptionBudget


class Defragmenter:
    """Plans moves for the replay and keeps their account."""

    def __init__(self, settings: defrag.DefragSettings, budgets: Sequence[DisruptionBudget] = (),
                 profile: Profile | None = None, seed: int = 0) -> None:
        """`profile`: the profile plans are made with (None: the replay's own)."""
        self.settings = settings
        self.budgets = tuple(budgets)
        self.profile = profile
        self.rng = random.Random(seed)
        self.ledger = defrag.DefragLedger()
        self.next_s = 0.0
        self.plans = 0
        """Plans carried out."""
        self.evictions = 0
        self.moved = 0
        """Evicted pods placed again at once (the rest waited in the queue)."""
        self.gpu_seconds_lost = 0.0
        """Work the interrupted jobs lost, as the replay counts it (its checkpoint model)."""
        self.refusals: dict[str, int] = {}
        """Why units the pass looked at got no plan (the reason up to its first colon, numbers as N), and how often."""

    def due(self, now: float) -> bool:
        """Whether a pass runs at `now` (at most once per `interval_s`); marks it run."""
        if now < self.next_s:
            return False
        self.next_s = now + self.settings.interval_s
        return True

    def plan(self, now: float, snap: ClusterSnapshot, unit: Sequence[PodSpec], profile: Profile,
             specs: Callable[[PodUid], PodSpec | None]) -> defrag.DefragPlan | None:
        """A plan for `unit` if it is one the pass is for and one exists; the ledger records it."""
        if not defrag.wants_defrag(unit, now, self.settings):
            return None
        got = defrag.plan(snap, unit, self.profile or profile, now=now, rng=self.rng, settings=self.settings,
                          ledger=self.ledger, budgets=self.budgets, specs=specs)
        if isinstance(got, str):
            key = re.sub(r"\d+(\.\d+)?", "N", got.split(":")[0])
            self.refusals[key] = self.refusals.get(key, 0) + 1
            return None
        self.ledger = self.ledger.record(got, now, self.settings)
        self.plans += 1
        self.evictions += len(got.evictions)
        self.moved += len(got.moves)
        return got
