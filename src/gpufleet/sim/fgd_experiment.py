"""The FGD packing experiment (`shared/experiments/fgd.md` section 2), on the shared core.

Per seed: sort tasks by name, shuffle with the seed, inflate by appending random clones
until the next one would pass `tune` x GPU capacity (or delete random tasks down to it),
rename nodes with a random-permutation prefix (ties break by node name), then offer each
task once to `schedule()`; a task that fits nowhere fails and is never retried. After
every attempt the arrived GPU request, allocation and fragmentation are recorded;
`bucketed` averages them per integer arrived-% column, as the paper's post-processing does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.core.cycle import schedule
from gpufleet.framework.plugins.fragmentation import FragModel, typical_tasks
from gpufleet.model import ClusterSnapshot, ModelError, NodeInfo, NodeName, PodSpec, PodUid
from gpufleet.sim.claims import as_claims
from gpufleet.sim.policies import profile_for
from gpufleet.sim.workload import Workload

F64 = npt.NDArray[np.float64]
METRICS = ("unallocated_gpu_pct", "frag_gpu_pct", "frag_ratio_pct", "cpu_alloc_pct", "mem_alloc_pct")


@dataclass(frozen=True, slots=True)
class FgdRun:
    """Per-attempt series of one run (one value per task offered, in order)."""

    policy: str
    seed: int
    arrived_pct: F64
    series: dict[str, F64]
    placed: int
    failed: int


def task_list(pods: Sequence[PodSpec], seed: int, capacity_milli: int, tune: float = 1.3) -> list[PodSpec]:
    """The offered task sequence: shuffled originals, then random clones up to `tune` x capacity."""
    if not any(p.gpu.total_milli for p in pods):
        raise ModelError("packing experiment", "the workload has no GPU tasks; it needs some to fill GPUs "
                                               "(use --mode time for CPU-only workloads)")
    rng = random.Random(seed)
    originals = sorted(pods, key=lambda p: p.name)
    tasks = list(originals)
    rng.shuffle(tasks)
    target = tune * capacity_milli
    total = sum(p.gpu.total_milli for p in tasks)
    if total <= target:
        clones = 0
        while True:
            pick = originals[rng.randrange(len(originals))]
            if total + pick.gpu.total_milli > target:
                break
            clones += 1
            tasks.append(replace(pick, uid=PodUid(f"{pick.uid}-clone-{clones}"), name=f"{pick.name}-clone-{clones}"))
            total += pick.gpu.total_milli
    else:
        while total > target:
            victim = tasks.pop(rng.randrange(len(tasks)))
            total -= victim.gpu.total_milli
    return tasks


def renamed_nodes(nodes: Sequence[NodeInfo], seed: int) -> list[NodeInfo]:
    perm = list(range(len(nodes)))
    random.Random(seed + 1_000_003).shuffle(perm)
    width = len(str(len(nodes)))
    return [replace(n, name=NodeName(f"{perm[i]:0{width}d}-{n.name}")) for i, n in enumerate(nodes)]


def run(workload: Workload, policy: str, seed: int, *, tune: float = 1.3, claims: bool = False) -> FgdRun:
    """One run: every task offered once, metrics after every attempt. With `claims` (or the
    workload's own `claims`), the tasks ask for their GPUs through DRA ResourceClaims
    (`sim.claims`) instead of extended resources."""
    claims = claims or workload.claims
    originals = sorted((p for job in workload.jobs for p in job.pods), key=lambda p: p.name)
    tasks_m = typical_tasks(originals)
    profile = profile_for(policy, tasks_m)
    nodes = renamed_nodes(workload.nodes, seed)
    snap = ClusterSnapshot.build(nodes).owned()
    cluster = snap.cluster
    capacity = snap.gpu_capacity_milli()
    if capacity == 0:
        raise ModelError(f"workload {workload.name}", "the cluster has no GPUs to pack")
    tasks = task_list(originals, seed, capacity, tune)
    arrived_milli = [p.gpu.total_milli for p in tasks]
    if claims:
        dra = as_claims(nodes, tasks)
        snap = ClusterSnapshot.build(nodes, device_classes=dra.classes, slices=dra.slices, claims=dra.claims).owned()
        cluster = snap.cluster
        tasks = list(dra.pods)
    frag_model = FragModel(cluster, tasks_m)
    frag = frag_model.nodes(snap.usage, np.arange(cluster.n_nodes))
    frag_total = float(frag.sum())
    cap_cpu, cap_mem = float(cluster.cap_cpu.sum()), float(cluster.cap_mem.sum())
    used_cpu = used_mem = 0.0
    allocated = arrived = 0
    n = len(tasks)
    out = {k: np.empty(n) for k in METRICS}
    arrived_pct = np.empty(n)
    rng = random.Random(seed)
    placed = 0
    for i, pod in enumerate(tasks):
        result = schedule(snap, (pod,), profile, now=float(i), rng=rng)
        arrived += arrived_milli[i]
        if result.binds:
            bind = result.binds[0]
            snap = snap.advance(result.binds)
            node = cluster.index[bind.node]
            allocated += bind.milli * len(bind.gpus)
            used_cpu += bind.cpu_milli
            used_mem += bind.mem_mib
            new = float(frag_model.nodes(snap.usage, np.array([node]))[0])
            frag_total += new - frag[node]
            frag[node] = new
            placed += 1
        free = capacity - allocated
        arrived_pct[i] = arrived / capacity * 100
        out["unallocated_gpu_pct"][i] = 100 - allocated / capacity * 100
        out["frag_gpu_pct"][i] = frag_total / capacity * 100
        out["frag_ratio_pct"][i] = frag_total / free * 100 if free else 0.0
        out["cpu_alloc_pct"][i] = used_cpu / cap_cpu * 100
        out["mem_alloc_pct"][i] = used_mem / cap_mem * 100
    return FgdRun(policy, seed, arrived_pct, out, placed, n - placed)


def bucketed(run_: FgdRun, metric: str, last: int = 130) -> F64:
    """Mean of `metric` per integer arrived-% bucket 0..last; an empty bucket takes the mean of its ±1 neighbours' means."""
    buckets = np.rint(run_.arrived_pct).astype(np.int64)
    values = run_.series[metric]
    sums = np.bincount(buckets, weights=values, minlength=last + 2)[: last + 2]
    counts = np.bincount(buckets, minlength=last + 2)[: last + 2]
    means = np.full(last + 2, np.nan)
    seen = counts > 0
    means[seen] = sums[seen] / counts[seen]
    out = means[: last + 1].copy()
    for b in np.flatnonzero(~seen[: last + 1]):
        around = [means[k] for k in (b - 1, b + 1) if 0 <= k <= last + 1 and not np.isnan(means[k])]
        out[b] = float(np.mean(around)) if around else np.nan
    return out
