"""GetPreferredAllocation without a scheduler choice: topology for whole devices, spreading for replicas.

Pure functions over a plan and the kubelet's available IDs; each returns exactly `size`
IDs including every must-include ID (the kubelet's contract), or fewer only when fewer
are available.

* Whole GPUs and MIG devices: pick within one NVLink domain (MIG: one parent GPU), then
  within one NUMA node, choosing the smallest group that fits so large domains stay whole
  for large requests.
* Replicas (time slicing, MPS): `distributed` takes replicas of the least-used GPUs first,
  `packed` of the most-used; both spread one container's replicas over distinct GPUs
  before doubling up.
* Fraction IDs: all from the GPU with the fewest free IDs that still fits the request.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

from gpufleet.agent.plan import Kind, ResourcePlan, Unit


def preferred(plan: ResourcePlan, available: list[str], must: list[str], size: int,
              domain_of: Callable[[str], str | None], packed: bool = False) -> list[str]:
    """`domain_of(gpu_uuid)` gives the GPU's NVLink domain (None without NVLink)."""
    size = max(size, 0)  # a negative size sliced must-include IDs from the end (found by fuzzing)
    must = [m for m in dict.fromkeys(must) if m in plan.by_id]
    pool = [a for a in dict.fromkeys(available) if a in plan.by_id and a not in must]
    need = size - len(must)
    if need <= 0:
        return must[:size]
    if plan.kind is Kind.MILLI:
        return must + _best_fit_gpu(plan, pool, need)
    if plan.replicas > 1:
        return must + _spread_replicas(plan, pool, need, available, packed)
    def group(u: Unit) -> str:
        return u.gpu if u.mig else (domain_of(u.gpu) or f"gpu:{u.gpu}")
    return must + _grouped(plan, pool, need, [group, lambda u: str(u.numa)],
                           {group(plan.by_id[m]) for m in must})


def _grouped(plan: ResourcePlan, pool: list[str], need: int, keys: list[Callable[[Unit], str]],
             favoured: set[str]) -> list[str]:
    """Take `need` IDs from the best group at each level; fall back to the biggest groups first."""
    if not keys or len(pool) <= need:
        return pool[:need]
    groups: dict[str, list[str]] = defaultdict(list)
    for i in pool:
        groups[keys[0](plan.by_id[i])].append(i)
    fitting = [k for k, ids in groups.items() if len(ids) >= need]
    if fitting:
        best = min(fitting, key=lambda k: (k not in favoured, len(groups[k]), pool.index(groups[k][0])))
        return _grouped(plan, groups[best], need, keys[1:], set())
    taken: list[str] = []
    for k in sorted(groups, key=lambda k: (k not in favoured, -len(groups[k]))):
        taken += groups[k][: need - len(taken)]
    return taken


def _spread_replicas(plan: ResourcePlan, pool: list[str], need: int, available: list[str],
                     packed: bool) -> list[str]:
    free: dict[str, list[str]] = defaultdict(list)
    for i in pool:
        free[plan.by_id[i].gpu].append(i)
    free_total = {g: sum(1 for a in available if a in plan.by_id and plan.by_id[a].gpu == g) for g in free}
    order = sorted(free, key=lambda g: (-free_total[g] if not packed else free_total[g]))
    taken: list[str] = []
    while len(taken) < need and any(free.values()):
        for g in order:  # one replica per GPU per round: a container's replicas land on distinct GPUs
            if free[g] and len(taken) < need:
                taken.append(free[g].pop(0))
    return taken


def _best_fit_gpu(plan: ResourcePlan, pool: list[str], need: int) -> list[str]:
    free: dict[str, list[str]] = defaultdict(list)
    for i in pool:
        free[plan.by_id[i].gpu].append(i)
    fitting = [g for g, ids in free.items() if len(ids) >= need]
    if fitting:
        return free[min(fitting, key=lambda g: len(free[g]))][:need]
    return [i for g in sorted(free, key=lambda g: -len(free[g])) for i in free[g]][:need]
