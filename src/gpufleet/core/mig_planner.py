"""Demand-driven MIG: which idle GPU instances to destroy and which to create for the pending pods.

`plan(gpus, demand)` is pure (no I/O, no clock): it gets every MIG GPU with its placed layout
and the instances in use, and the pending MIG demand in queue order (the core's order:
priority, then age; a pod asking two slices counts twice), each request a profile name, or a
`MigRequest` that also names the GPUs the pod could use (`core.mig_demand`: those of the nodes
where it passes every filter but the GPU fit). It returns, per GPU (by uuid), the instances to
destroy and the (profile, start) instances to create; the agent applies that through NVML and
the simulator after a reconfiguration delay.

Decisions:

- **Never an instance in use.** Only free instances and uncarved slots are touched, so no pod
  is evicted and no node is drained: the other instances of a GPU keep running while one part
  of it is repartitioned (MIG creates and destroys GPU instances on a GPU whose other instances
  are busy; only the ones destroyed must be idle).
- **MIG mode is never toggled.** A GPU with MIG off stays whole and is not given to the
  planner: turning MIG mode on or off needs the whole GPU idle and, on A100, a GPU reset (from
  Hopper on the MIG user guide drops the reset, but the mode still changes what the node
  offers: whole `nvidia.com/gpu` or MIG devices), which is an operator's decision, not a
  scheduling step.
- **Never serve less than doing nothing.** First the pending demand is matched, in queue
  order, to the free instances that already exist. What is left unmatched is the demand to
  create for; the free instances left over are surplus, and only surplus instances may be
  destroyed. So every pod that an existing free instance could serve still finds one.
- **Few changes.** Each unmatched request, in queue order, goes to the position that costs
  least, by (a GPU this plan already changes first, since reconfigurations are counted per
  GPU; then fewest instances destroyed: uncarved space first; then the GPU with the most slots
  in use, best fit, which keeps idle GPUs whole for large profiles; then the highest start,
  because the low slots are where the large shapes must go: 4g and 7g start only at 0, 3g at
  0 or 4, so a 3g at 4 leaves room for a 4g and a 3g at 0 does not; then the GPU's position). A profile that fits nowhere is skipped for the rest of the plan (later
  requests only take space, they never free any).
- **Only where the pod could run.** A request that names its GPUs is served only by a free
  instance on one of them, and only those GPUs are changed for it: a pod held back by its node
  selector, taints or CPU never has a GPU it cannot use repartitioned. Requests are matched to
  the free instances in queue order; one that names its GPUs claims a particular instance, and
  a claimed instance is never destroyed.
- **Freed space the demand does not ask for stays uncarved.** Carving it now would guess a
  shape; left empty, the next plan carves whatever is asked then without destroying anything.
- A GPU marked `frozen` (a change still being applied, or unhealthy) is left alone; its free
  instances still count as supply.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from gpufleet.model import GpuUuid, mig
from gpufleet.model.mig_placement import SLOTS, MigInstance, check_placed, shape


@dataclass(frozen=True, slots=True)
class MigGpu:
    """One MIG-enabled GPU as the planner sees it."""

    uuid: GpuUuid
    family: str
    """Its MIG table (a key of `model.mig.MIG_TABLES`)."""
    instances: tuple[MigInstance, ...]
    in_use: frozenset[MigInstance] = frozenset()
    """Instances a pod holds: never destroyed."""
    frozen: bool = False
    """Leave this GPU alone (a change is being applied, or it is unhealthy)."""


@dataclass(frozen=True, slots=True)
class MigRequest:
    """One MIG slice a pending pod asks for, and the GPUs it could use (None: any)."""

    profile: str
    gpus: frozenset[GpuUuid] | None = None

    def may_use(self, uuid: GpuUuid) -> bool:
        return self.gpus is None or uuid in self.gpus


Demand = Sequence[str | MigRequest]
"""Requests in queue order: a profile name is a request any GPU may serve."""


@dataclass(frozen=True, slots=True)
class GpuChange:
    """What to do on one GPU: destroy these free instances, then create these."""

    uuid: GpuUuid
    destroy: tuple[MigInstance, ...]
    create: tuple[MigInstance, ...]

    def apply(self, instances: Iterable[MigInstance]) -> tuple[MigInstance, ...]:
        gone = set(self.destroy)
        return tuple(sorted([i for i in instances if i not in gone] + list(self.create)))


@dataclass(frozen=True, slots=True)
class MigPlan:
    changes: tuple[GpuChange, ...] = ()
    served_before: int = 0
    """Pending requests the free instances could serve before the plan..."""
    served_after: int = 0
    """...and after it (never fewer)."""
    unplaced: tuple[str, ...] = field(default=())
    """Requests no change could serve (their profile fits in no free space)."""


def served(gpus: Iterable[MigGpu], demand: Demand, changes: Sequence[GpuChange] = ()) -> int:
    """How many of the `demand` requests the free instances can serve (after `changes`)."""
    by_uuid = {c.uuid: c for c in changes}
    free = [(g.uuid, inst) for g in gpus for inst in (by_uuid[g.uuid].apply(g.instances) if g.uuid in by_uuid
                                                      else g.instances) if inst not in g.in_use]
    requests = _requests(demand)
    return len(requests) - len(_match(free, requests)[2])


def _requests(demand: Demand) -> list[MigRequest]:
    return [d if isinstance(d, MigRequest) else MigRequest(d) for d in demand]


_Free = tuple[GpuUuid, MigInstance]


def _match(free: Sequence[_Free], requests: Sequence[MigRequest]
           ) -> tuple[set[_Free], Counter[str], list[MigRequest]]:
    """Match `requests`, in queue order, to the `free` instances: a request naming its GPUs
    claims a free instance of its profile on one of them; any other takes one of the count
    left. Returns the claimed instances, how many free instances of each profile are left
    over (any free instance not claimed may be the one that goes), and the requests unmet."""
    left: Counter[str] = Counter(inst.profile for _, inst in free)
    by_profile: dict[str, list[_Free]] = {}
    for f in free:
        by_profile.setdefault(f[1].profile, []).append(f)
    claimed: set[_Free] = set()
    unmet: list[MigRequest] = []
    for r in requests:
        if left[r.profile] <= 0:
            unmet.append(r)
        elif r.gpus is None:
            left[r.profile] -= 1
        elif (pick := next((f for f in by_profile[r.profile] if f[0] in r.gpus and f not in claimed),
                           None)) is not None:  # left > 0: the profile has free instances
            claimed.add(pick)
            left[r.profile] -= 1
        else:
            unmet.append(r)
    return claimed, left, unmet


class _Gpu:
    """A GPU's layout while a plan is built: which instance owns each slot."""

    def __init__(self, gpu: MigGpu, position: int) -> None:
        self.gpu = gpu
        self.position = position
        self.table = mig.MIG_TABLES[gpu.family]
        self.owner: list[MigInstance | None] = [None] * SLOTS
        for inst in gpu.instances:
            for s in inst.slots(gpu.family):
                self.owner[s] = inst
        self.busy_slots = sum(1 for o in self.owner if o is not None and o in gpu.in_use)
        self.destroyed: list[MigInstance] = []
        self.created: list[MigInstance] = []

    def instances(self) -> set[MigInstance]:
        return {o for o in self.owner if o is not None}

    def options(self, profile: str, surplus: Counter[str], claimed: set[_Free]
                ) -> Iterable[tuple[MigInstance, list[MigInstance]]]:
        """(new instance, free surplus instances it replaces) for each start where `profile` can go."""
        if profile not in self.table:
            return
        family = self.gpu.family
        p = self.table[profile]
        for start in shape(family, profile).starts:
            new = MigInstance(start, profile)
            over = list(dict.fromkeys(o for s in new.slots(family) if (o := self.owner[s]) is not None))
            if any(o in self.gpu.in_use or o in self.created or (self.gpu.uuid, o) in claimed for o in over):
                continue
            if any(surplus[q] < n for q, n in Counter(o.profile for o in over).items()):
                continue
            rest = self.instances() - set(over)
            if sum(1 for i in rest if i.profile == profile) >= p.max_instances:
                continue
            if sum(self.table[i.profile].compute_slices for i in rest) + p.compute_slices > 7:
                continue
            yield new, over

    def take(self, new: MigInstance, over: list[MigInstance]) -> None:
        family = self.gpu.family
        for o in over:
            for s in o.slots(family):
                self.owner[s] = None
            self.destroyed.append(o)
        for s in new.slots(family):
            self.owner[s] = new
        self.created.append(new)

    def change(self) -> GpuChange:
        before = set(self.gpu.instances)
        after = self.instances()
        change = GpuChange(self.gpu.uuid, tuple(sorted(before - after)), tuple(sorted(after - before)))
        check_placed(self.gpu.family, change.apply(self.gpu.instances), f"MIG plan for GPU {self.gpu.uuid}")
        return change


def plan(gpus: Sequence[MigGpu], demand: Demand) -> MigPlan:
    """The reconfigurations that serve as much of `demand` as free space allows (module docstring)."""
    requests = _requests(demand)
    free = [(g.uuid, i) for g in gpus for i in g.instances if i not in g.in_use]
    claimed, surplus, unmet = _match(free, requests)  # existing free instances serve the first requests
    before = len(requests) - len(unmet)
    if not unmet:
        return MigPlan((), before, before)
    work = [_Gpu(g, k) for k, g in enumerate(gpus) if not g.frozen]
    touched: set[int] = set()
    impossible: set[tuple[str, frozenset[GpuUuid] | None]] = set()
    unplaced: list[str] = []
    for r in unmet:
        p = r.profile
        if (p, r.gpus) in impossible:
            unplaced.append(p)
            continue
        best: tuple[tuple[int, int, int, int, int], _Gpu, MigInstance, list[MigInstance]] | None = None
        for w in work:
            if not r.may_use(w.gpu.uuid):
                continue
            for new, over in w.options(p, surplus, claimed):
                key = (w.position not in touched, len(over), -w.busy_slots, -new.start, w.position)
                if best is None or key < best[0]:
                    best = (key, w, new, over)
        if best is None:
            impossible.add((p, r.gpus))
            unplaced.append(p)
            continue
        _, w, new, over = best
        for o in over:
            surplus[o.profile] -= 1
        w.take(new, over)
        touched.add(w.position)
    changes = tuple(w.change() for w in work if w.position in touched)
    return MigPlan(changes, before, served(gpus, requests, changes), tuple(unplaced))
