"""`schedule()`: one scheduling cycle as a pure function of a snapshot.

Steps, per unit of work (a pod, or a gang) in `ordering` order (permit plugins may veto a
tentative placement after step 3, which rolls it back). `core.statement` carries out steps
1-3 and every rollback; `core.placing` runs units and gangs (step 4):
1. reuse: a pod whose constraints equal those of a pod that already failed the filters this
   cycle (under the same queue mask) fails the same way, unless capacity was given back
   since (a gang rolled back); a pre-filter's rejection is not reused (it sees the whole pod);
2. filter all nodes at once (NumPy masks), then score the feasible ones and take the
   highest weighted score, ties to the lowest node name;
3. choose devices inside the node (the profile's device picker) and place the pod on the
   cycle's private copy of usage, updating only that node's aggregates;
4. gangs: members are placed tentatively; if fewer than minMember (counting members
   already running) fit, every tentative placement is rolled back and each member says why.

No I/O, no wall clock, no global randomness: `now` and `rng` are parameters.
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

from gpufleet.core import ordering, queued
from gpufleet.core.context import QueueContext
from gpufleet.core.placing import Placer
from gpufleet.core.result import CycleResult
from gpufleet.core.statement import Statement
from gpufleet.framework.profile import Profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, PodSpec


def schedule(snapshot: ClusterSnapshot, pending: Sequence[PodSpec], profile: Profile, *,
             now: float, rng: random.Random, queues: QueueContext | None = None, explain: bool = True) -> CycleResult:
    """Place as many `pending` pods as the profile allows; never mutates `snapshot`.

    Without queues, and with queueing that binds the same with one queue (`plain_without_queues`),
    this is kube-scheduler's loop; otherwise `core.queued` orders units across queues,
    enforces queue limits, holds nodes for starving units and preempts (see its docstring).

    `explain=False` is for callers that use only the binds (the planner's what-if runs): an
    unschedulable pod's reason is then the bare "0/N nodes are available." without the count
    per filter reason, which takes each filter again over every node.
    """
    placer = Placer(Statement(snapshot, profile, now, rng, explain))
    if queues is None and plain_without_queues(profile.queueing, pending, now):
        for unit in ordering.order(pending):
            placer.run_unit(unit)
    else:
        queued.run(placer, pending, profile.queueing, queues or QueueContext())
    return placer.result()


def plain_without_queues(q: QueueingConfig, pending: Iterable[PodSpec], now: float) -> bool:
    """Whether, without a `QueueContext`, kube-scheduler's loop binds, marks unschedulable,
    evicts and nominates exactly what the queue-aware path does with `q`.

    Without queues every pod is in the `default` queue: fair order is then priority order,
    no queue limit or guarantee applies and reclaim has no other queue to take from. So it
    does, unless priority preemption is on (victims in the same queue), the order is fifo or
    las (another key), or a pod has waited past the starvation bound (nodes are held for it).
    The queue-aware path's accounting costs about a quarter of a cycle's time
    (docs/performance.md), which a cluster without Queue objects need not pay."""
    if q == QueueingConfig():
        return True
    if q.order not in ("fair", "priority") or q.preemption:
        return False
    bound = q.starvation_bound_seconds
    return not (bound > 0 and any(now - p.created_s >= bound for p in pending))
