"""Defragmentation on a live cluster (`--defrag`): the scheduler's driver of `core/defrag.py`.

After a cycle, at most every `interval_s`, the first unschedulable unit in queue order that
defragmentation is for gets a plan. A unit is a whole-GPU pod, or the pending members of a
gang, asking at least `min_gpus` and waiting at least `min_wait_s`. The plan is built on a
fresh snapshot, with the cluster's PodDisruptionBudgets as `LiveBudget`s
(`kube/disruption_budgets.py`) and the ledger of past moves.

A plan is carried out the way preemption is. Its victims go through the Eviction API, which
honours the budgets once more, and the unit's pods are nominated to their nodes. A victim's
controller makes a new pod, which queues like any other. The core's "move" (placing the
evicted pod again at once) has no live counterpart, since the evicted pod is gone.

The ledger (when each pod was last moved, and the GPU-hours moves lost in the last hour) is
kept in memory by the leader. A new leader starts with an empty one, which allows moves
sooner than the window and budget intend: at most one budget's worth per failover.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from gpufleet.core import defrag, ordering
from gpufleet.core.defrag import DefragLedger, DefragPlan, DefragSettings
from gpufleet.framework.profile import Profile
from gpufleet.kube import disruption_budgets, translate
from gpufleet.model import ClusterSnapshot, PodSpec, PodUid

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]


def units(specs: Sequence[PodSpec], unschedulable: Collection[PodUid]) -> list[list[PodSpec]]:
    """The unschedulable pods as units, in the order of `specs` (the queue's): a gang's pending
    members together, at the place of its first one; any other pod alone."""
    return ordering.order([s for s in specs if s.uid in unschedulable], key=lambda _s: ())  # stable: as given


class Defragmenter:
    def __init__(self, settings: DefragSettings, *, clock: Callable[[], float] = time.time, seed: int = 0) -> None:
        self.settings, self._clock, self._rng = settings, clock, random.Random(seed)
        self.ledger = DefragLedger()
        self._last = -float("inf")
        self._lock = threading.Lock()
        self._pdbs: dict[str, Obj] = {}
        self.plans = 0
        """Plans carried out (tests, logs)."""
        self.refused: dict[str, int] = {}
        """Why units got no plan, by the first words of the reason (tests, logs)."""

    # -- the PodDisruptionBudget informer ---------------------------------------------------
    def upsert_pdb(self, obj: Obj) -> None:
        with self._lock:
            self._pdbs[translate.key_of(obj)] = obj

    def delete_pdb(self, obj: Obj) -> None:
        with self._lock:
            self._pdbs.pop(translate.key_of(obj), None)

    def replace_pdbs(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._pdbs = {translate.key_of(o): o for o in objs}

    # -- planning ---------------------------------------------------------------------------
    def due(self) -> bool:
        return self._clock() - self._last >= self.settings.interval_s

    def plan(self, snapshot: ClusterSnapshot, specs: Sequence[PodSpec], unschedulable: Collection[PodUid],
             profile: Profile, bound: Iterable[Obj]) -> DefragPlan | None:
        """The plan for the first unit that gets one (the ledger then records it); None if none does."""
        now = self._clock()
        self._last = now
        wanted = [u for u in units(specs, unschedulable) if defrag.wants_defrag(u, now, self.settings)]
        if not wanted:
            return None
        with self._lock:
            pdbs = list(self._pdbs.values())
        budgets = disruption_budgets.live_budgets(pdbs, bound)
        for unit in wanted:
            got = defrag.plan(snapshot, unit, profile, now=now, rng=self._rng, settings=self.settings,
                              ledger=self.ledger, budgets=budgets)
            if isinstance(got, str):
                key = got.split(":")[0]
                self.refused[key] = self.refused.get(key, 0) + 1
                log.debug("no defragmentation for pod %s: %s", unit[0].key, got)
                continue
            self.ledger = self.ledger.record(got, now, self.settings)
            self.plans += 1
            log.info("defragmentation for pod %s: moving %d pod(s), %.2f GPU-hours lost (%.2f left this hour)",
                     unit[0].key, len(got.evictions), got.lost_gpu_hours, self.ledger.left(self.settings, now))
            return got
        return None
