"""The offline bound of the FGD packing experiment: how much GPU no scheduler could beat.

In the FGD experiment (`fgd_experiment`) every task is offered once, in arrival order, and
stays where it is placed. At any moment the allocated GPU is that of a subset of the tasks
arrived so far, packed onto the nodes at once. So no scheduler, online or offline, allocates
more than MAX(prefix): the most GPU-milli of any subset of the prefix that fits the nodes
simultaneously (CPU, memory, pod count, GPU model; a share on part of ONE device, a k-GPU
task on k whole devices of one node, never a device holding both). `upper_bound` computes a
number >= MAX(prefix); `offline_packing` finds a packing (a number <= MAX).

Why `upper_bound` is valid. Each step keeps every real packing feasible, so it can only
raise the maximum:

1. CPU-only tasks are dropped: removing one from a packing keeps it feasible and its GPU.
2. Tasks of equal (cpu, memory, GPU count, milli, allowed models) are one type t (n_t of
   them); nodes of equal (cpu, memory, pods, GPUs, model) are one shape s (N_s nodes). A type
   goes only to shapes where one task of it fits an empty node (model, GPU count, CPU, memory).
3. Per shape, the per-node limits are summed over its N_s nodes (CPU, memory, pods, devices):
   a packing meets each node's limit, so it meets their sum. The devices are kept apart:
   each device of the shape is whole (z: it holds at most one whole-GPU task's part), shared
   with a pattern p (a multiset of share sizes summing to <= 1000 milli: y_p devices), or idle.
   Whole-GPU tasks need sum k_t x_t <= z; shares of size m need <= sum_p a_mp y_p slots. A real
   packing gives integer z, y_p, x that satisfy all this; the LP drops integrality.
4. Cuts, valid on every node and summed over a shape: at most j tasks each needing more than
   1/(j+1) of the node's CPU (or memory) fit on one node. They give back part of the per-node
   packing that summing (3) loses, e.g. one 10-core task per 16-core node.
5. Patterns are too many to list, so they are generated: the best pattern for the LP's prices
   is an exact knapsack over 1000 milli (`best_pattern`). With the restricted LP's value V and
   prices, every pattern left out has reduced cost <= best - (the device row's price), and
   there are at most N_s G_s devices, so V + sum_s N_s G_s max(0, that) bounds the full LP
   (weak duality) after any round; the loop runs until no pattern improves (then the two
   agree). The number is raised by 10 ppm for HiGHS's tolerances and floored to whole milli.

What it cannot see: how the tasks of a shape split between its nodes beyond the cuts
(CPU and GPU per node together), and integrality (a pattern on 0.4 of a device).

Pure: no I/O.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import Profile
from gpufleet.model import ClusterSnapshot, GpuKind, ModelError, NodeInfo, PodSpec, PodUid
from gpufleet.model.placement import Placement
from gpufleet.model.pod import GPU_MILLI
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.sim import fgd_experiment
from gpufleet.sim.policies import profile_for
from gpufleet.sim.workload import Workload

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
SLACK = 1e-5
"""Relative slack added to the LP's bound for floating-point tolerances."""


@dataclass(frozen=True, slots=True)
class TaskType:
    """Tasks the bound cannot tell apart."""

    cpu_milli: int
    mem_mib: int
    gpus: int
    """Devices a whole-GPU task takes; 1 for a share."""
    milli: int
    """Per device: 1000 for whole GPUs, 1..999 for a share."""
    models: frozenset[str]

    @property
    def gpu_milli(self) -> int:
        return self.gpus * self.milli

    @property
    def share(self) -> bool:
        return self.milli < GPU_MILLI


@dataclass(frozen=True, slots=True)
class Shape:
    """Nodes the bound cannot tell apart (`nodes` indexes the node list)."""

    cpu_milli: int
    mem_mib: int
    max_pods: int
    gpus: int
    model: str | None
    nodes: tuple[int, ...]

    def takes(self, t: TaskType) -> bool:
        """Could one task of type t run on an empty node of this shape?"""
        return (t.gpus <= self.gpus and t.cpu_milli <= self.cpu_milli and t.mem_mib <= self.mem_mib
                and self.max_pods >= 1 and (not t.models or self.model in t.models))


@dataclass
class Problem:
    """Task types and node shapes of a workload; `patterns` keeps the device patterns generated
    per shape, which stay valid for every prefix of the same tasks (later prefixes start warm)."""

    types: tuple[TaskType, ...]
    shapes: tuple[Shape, ...]
    patterns: list[set[tuple[tuple[int, int], ...]]] = field(default_factory=list)
    """Per shape: share patterns of one device as sorted (milli, count) pairs, sum <= 1000."""


@dataclass(frozen=True, slots=True)
class Bound:
    upper_milli: float
    """A proven upper bound on the GPU-milli any packing of the prefix allocates."""
    lp_milli: float
    """The last restricted LP's value (<= the bound)."""
    rounds: int
    placed: dict[tuple[int, int], float]
    """(shape, type) -> tasks the LP puts on that shape (fractional)."""

def task_type(pod: PodSpec) -> TaskType | None:
    """The pod's type; None for CPU-only pods. What the bound does not model is refused."""
    g = pod.gpu
    if pod.node_selector or pod.affinity or pod.pod_group or g.kind is GpuKind.MIG or g.mem_mib:
        raise ModelError(f"pod {pod.key}", "the offline bound models CPU, memory, whole GPUs, GPU shares and "
                                           "GPU models only (no selectors, affinity, gangs, MIG or GPU memory)")
    if g.kind is GpuKind.NONE:
        return None
    return TaskType(pod.cpu_milli, pod.mem_mib, g.count, g.milli, pod.gpu_models)


def problem(nodes: Sequence[NodeInfo], pods: Iterable[PodSpec]) -> Problem:
    """Types of `pods` (all tasks that may ever arrive) and shapes of `nodes`."""
    types = sorted({t for p in pods if (t := task_type(p)) is not None},
                   key=lambda t: (t.gpus, t.milli, t.cpu_milli, t.mem_mib, sorted(t.models)))
    groups: dict[tuple[int, int, int, int, str | None], list[int]] = {}
    for i, n in enumerate(nodes):
        if n.taints or any(g.mig_enabled or not g.healthy for g in n.gpus):
            raise ModelError(f"node {n.name}", "the offline bound models plain GPU nodes only "
                                               "(no taints, MIG mode or unhealthy GPUs)")
        groups.setdefault((n.cpu_milli, n.mem_mib, n.max_pods, len(n.gpus), n.gpu_model), []).append(i)
    shapes = tuple(Shape(*key, nodes=tuple(ix)) for key, ix in sorted(groups.items(), key=lambda kv: kv[1][0]))
    prob = Problem(tuple(types), shapes, [set() for _ in shapes])
    for s, shape in enumerate(shapes):  # one pattern per share size: as many as fit on a device
        for m in {t.milli for t in types if t.share and shape.takes(t)}:
            prob.patterns[s].add(((m, GPU_MILLI // m),))
    return prob


def demand(prob: Problem, pods: Iterable[PodSpec]) -> I64:
    """Tasks per type among `pods`."""
    index = {t: i for i, t in enumerate(prob.types)}
    out = np.zeros(len(prob.types), dtype=np.int64)
    for p in pods:
        t = task_type(p)
        if t is not None:
            out[index[t]] += 1
    return out


def best_pattern(prices: dict[int, float]) -> tuple[float, tuple[tuple[int, int], ...]]:
    """The most valuable multiset of share sizes on one device (sum <= 1000 milli), by exact
    dynamic programming over the milli used: (its value, its (milli, count) pairs)."""
    best = np.zeros(GPU_MILLI + 1)
    last = np.zeros(GPU_MILLI + 1, dtype=np.int64)  # the size added last on the best way to fill c (0: none)
    for c in range(1, GPU_MILLI + 1):
        best[c], last[c] = best[c - 1], 0
        for m, v in prices.items():
            if m <= c and best[c - m] + v > best[c] + 1e-12:
                best[c], last[c] = best[c - m] + v, m
    counts: Counter[int] = Counter()
    c = GPU_MILLI
    while c > 0:
        if last[c]:
            counts[int(last[c])] += 1
            c -= int(last[c])
        else:
            c -= 1
    return float(best[GPU_MILLI]), tuple(sorted(counts.items()))


def _need(t: TaskType, resource: int) -> int:
    return t.cpu_milli if resource == 0 else t.mem_mib


def upper_bound(prob: Problem, avail: I64, *, progress: Callable[[str], None] | None = None) -> Bound:
    """A proven upper bound on the GPU-milli of any simultaneous packing of `avail` tasks per type.

    The LP (module docstring): per shape s, x[s,t] tasks of type t, z[s] whole devices and
    y[s,p] devices shared by pattern p, with rows
      sum_s x[s,t] <= n_t                      (tasks that arrived)
      sum_t cpu_t x[s,t] <= N_s C_s, memory and pods likewise
      z[s] + sum_p y[s,p] <= N_s G_s            (devices)
      sum_{t whole} k_t x[s,t] <= z[s]         (whole tasks take whole devices)
      sum_{t share of m} x[s,t] <= sum_p a_mp y[s,p]   (shares sit in a device's pattern)
    Patterns are generated by `best_pattern` (exact) until none improves the LP."""
    from scipy.optimize import linprog  # HiGHS; imported here so the CLI starts without SciPy's import time

    types, shapes = prob.types, prob.shapes
    xs = [(s, t) for s, sh in enumerate(shapes) for t, ty in enumerate(types) if avail[t] > 0 and sh.takes(ty)]
    n_s = len(shapes)
    millis = sorted({ty.milli for ty in types if ty.share})
    mrow = {(s, m): k for k, (s, m) in enumerate((s, m) for s in range(n_s) for m in millis)}
    # rows: types | cpu, mem, pods, devices, whole per shape | shares per (shape, milli)
    r_cpu, r_mem, r_pods, r_dev, r_whole = (len(types) + k * n_s for k in range(5))
    r_share = len(types) + 5 * n_s
    # Cuts (valid per node, so summed over a shape's nodes): at most j tasks each needing more
    # than 1/(j+1) of a node's CPU (or memory) fit on one node, since j+1 of them would not.
    cuts: list[tuple[int, int, int]] = []  # (shape, resource 0 cpu / 1 memory, j)
    for s, sh in enumerate(shapes):
        for res_, cap_ in ((0, sh.cpu_milli), (1, sh.mem_mib)):
            for j in range(1, 2 * max(sh.gpus, 1) + 1):
                if any(_need(types[t], res_) * (j + 1) > cap_ for s2, t in xs if s2 == s):
                    cuts.append((s, res_, j))
    r_cut = r_share + len(mrow)
    n_rows = r_cut + len(cuts)
    b = np.zeros(n_rows)
    b[: len(types)] = avail
    for s, sh in enumerate(shapes):
        n = len(sh.nodes)
        b[r_cpu + s], b[r_mem + s], b[r_pods + s], b[r_dev + s] = n * sh.cpu_milli, n * sh.mem_mib, n * sh.max_pods, n * sh.gpus
    for k, (s, _, j) in enumerate(cuts):
        b[r_cut + k] = j * len(shapes[s].nodes)
    cols: list[dict[int, float]] = []
    gain: list[float] = []
    for s, t in xs:
        ty = types[t]
        col = {t: 1.0, r_cpu + s: float(ty.cpu_milli), r_mem + s: float(ty.mem_mib), r_pods + s: 1.0}
        if ty.share:
            col[r_share + mrow[s, ty.milli]] = 1.0
        else:
            col[r_whole + s] = float(ty.gpus)
        for k, (s2, res_, j) in enumerate(cuts):
            if s2 == s and _need(ty, res_) * (j + 1) > (shapes[s].cpu_milli, shapes[s].mem_mib)[res_]:
                col[r_cut + k] = 1.0
        cols.append(col)
        gain.append(float(ty.gpu_milli))
    for s in range(n_s):
        cols.append({r_dev + s: 1.0, r_whole + s: -1.0})
        gain.append(0.0)
    pattern_cols: list[tuple[int, tuple[tuple[int, int], ...]]] = []

    def add_pattern(s: int, pattern: tuple[tuple[int, int], ...]) -> None:
        cols.append({r_dev + s: 1.0, **{r_share + mrow[s, m]: -float(a) for m, a in pattern}})
        gain.append(0.0)
        pattern_cols.append((s, pattern))

    for s in range(n_s):
        for pattern in sorted(prob.patterns[s]):
            add_pattern(s, pattern)
    best = min(float(sum(ty.gpu_milli * int(a) for ty, a in zip(types, avail))),
               float(sum(sh.gpus * len(sh.nodes) for sh in shapes) * GPU_MILLI))
    lp, x = 0.0, np.zeros(0)
    rounds = 0
    while True:
        rounds += 1
        a = np.zeros((n_rows, len(cols)))
        for j, col in enumerate(cols):
            for i, v in col.items():
                a[i, j] = v
        res = linprog(-np.array(gain), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"the bound's LP failed: {res.message}")
        lp, x = float(-res.fun), np.asarray(res.x)
        duals = np.maximum(0.0, -np.asarray(res.ineqlin.marginals))
        # Lagrangian bound: every column left out is a pattern p of shape s, with y[s,p] <= N_s G_s;
        # its reduced cost is value(p) - dual(devices of s), at most the best pattern's.
        bound, added = lp, 0
        for s, sh in enumerate(shapes):
            prices = {m: float(duals[r_share + mrow[s, m]]) for m in millis if (s, m) in mrow}
            prices = {m: v for m, v in prices.items() if v > 1e-12}
            if not prices:
                continue
            value, pattern = best_pattern(prices)
            excess = value - float(duals[r_dev + s])
            bound += len(sh.nodes) * sh.gpus * max(0.0, excess)
            if excess > 1e-9 and pattern not in prob.patterns[s]:
                prob.patterns[s].add(pattern)
                add_pattern(s, pattern)
                added += 1
        best = min(best, bound)
        if progress:
            progress(f"round {rounds}: LP {lp / GPU_MILLI:.2f} GPUs, bound {best / GPU_MILLI:.2f} GPUs")
        if not added or best - lp < 1e-6:
            break
    placed = {(s, t): float(v) for (s, t), v in zip(xs, x[: len(xs)]) if v > 1e-9}
    # Allocations are whole milli: floor the bound, after slack for HiGHS's tolerances (10 ppm;
    # two LPs with the same optimum were seen 1.6 ppm apart on openb).
    return Bound(float(np.floor(best * (1 + SLACK) + 1e-3)), lp, rounds, placed)


# -- offline packing -------------------------------------------------------------------------

OFFLINE_POLICY = "gpufleet-lookahead"
"""The policy that packs the offline orders (the best of the simulator's policies on openb)."""


def _whole_first(pods: Iterable[PodSpec]) -> list[PodSpec]:
    """GPU tasks only: multi-GPU tasks by size, then single GPUs, then shares (stable otherwise)."""
    return sorted((p for p in pods if p.gpu.total_milli), key=lambda p: (-p.gpu.count, p.gpu.milli < GPU_MILLI))


def offline_orders(prob: Problem, pods: Sequence[PodSpec], bound: Bound | None) -> dict[str, list[PodSpec]]:
    """Orders to offer the tasks in, knowing them all: `whole-first`; and `lp-kept-first`: per
    type, as many tasks as the LP keeps (rounded up) whole-first, then the ones it drops."""
    orders = {"whole-first": _whole_first(pods)}
    if bound is not None:
        keep: dict[int, float] = {}
        for (_, ti), v in bound.placed.items():
            keep[ti] = keep.get(ti, 0.0) + v
        left = {ti: int(np.ceil(v - 1e-6)) for ti, v in keep.items()}
        index = {ty: i for i, ty in enumerate(prob.types)}
        first, later = [], []
        for p in pods:
            ty = task_type(p)
            if ty is None:
                continue
            if left.get(index[ty], 0) > 0:
                left[index[ty]] -= 1
                first.append(p)
            else:
                later.append(p)
        orders["lp-kept-first"] = _whole_first(first) + _whole_first(later)
    return orders


def pack(nodes: Sequence[NodeInfo], order: Sequence[PodSpec], profile: Profile) -> list[Placement]:
    """Offer `order` once each to the core's `schedule()`, as the FGD experiment does; the placements."""
    snap = ClusterSnapshot.build(nodes).owned()
    rng = random.Random(0)
    for i, pod in enumerate(order):
        result = schedule(snap, (pod,), profile, now=float(i), rng=rng)
        if result.binds:
            snap = snap.advance(result.binds)
    return list(snap.placements.values())


def offline_packing(prob: Problem, nodes: Sequence[NodeInfo], pods: Sequence[PodSpec], profile: Profile,
                    bound: Bound | None = None) -> tuple[str, list[Placement]]:
    """The best packing found of a subset of `pods` (its order's name, its placements), checked
    by `check_packing`: each of `offline_orders` packed by `profile`."""
    best: tuple[int, str, list[Placement]] | None = None
    for name, order in offline_orders(prob, pods, bound).items():
        placements = pack(nodes, order, profile)
        milli = check_packing(nodes, pods, placements)
        if best is None or milli > best[0]:
            best = (milli, name, placements)
    assert best is not None
    return best[1], best[2]


def check_packing(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec], placements: Sequence[Placement]) -> int:
    """Validate a packing with the simulator's own model (`ClusterSnapshot.build` refuses any
    overcommitted node or device) plus each pod's request and GPU models; the GPU-milli it holds."""
    by_uid: dict[PodUid, PodSpec] = {p.uid: p for p in pods}
    uses = Counter(p.pod for p in placements)
    if uses and max(uses.values()) > 1:
        raise ModelError("offline packing", "a pod is placed twice")
    node_of = {n.name: n for n in nodes}
    for pl in placements:
        pod = by_uid.get(pl.pod)
        if pod is None:
            raise ModelError("offline packing", f"pod {pl.pod} is not among the tasks")
        g = pod.gpu
        want = (pod.cpu_milli, pod.mem_mib, g.count if g.kind is not GpuKind.NONE else 0,
                g.milli if g.kind is not GpuKind.NONE else 0)
        if (pl.cpu_milli, pl.mem_mib, len(pl.gpus), pl.milli if pl.gpus else 0) != want or len(set(pl.gpus)) != len(pl.gpus):
            raise ModelError("offline packing", f"pod {pl.pod} holds other resources than it asks for")
        model = node_of[pl.node].gpu_model
        if pod.gpu_models and pl.gpus and model not in pod.gpu_models:
            raise ModelError("offline packing", f"pod {pl.pod} on a {model} node it does not allow")
    snap = ClusterSnapshot.build(nodes, placements)
    return snap.gpu_allocated_milli()


# -- the experiment --------------------------------------------------------------------------

LEVELS = (90, 95, 100, 110, 120, 130)
"""Arrived-% columns the bound is computed at by default."""


@dataclass(frozen=True, slots=True)
class LevelBound:
    """One seed at one arrived-% column: the unallocated GPU % no scheduler can go below, and
    that of the best offline packing found (None where not asked), for the prefix of the column."""

    seed: int
    arrived_pct: int
    tasks: int
    lower_bound: float
    offline_best: float | None
    offline_order: str | None
    lp_rounds: int


def prefix_length(arrived_milli: Sequence[int], capacity_milli: int, level: int) -> int:
    """How many tasks the bound at column `level` covers: every attempt that `fgd_experiment.bucketed`
    averages into that column (rounded arrived-% <= level; <= level + 1 when column `level` is
    empty, as `bucketed` then averages its neighbours). Allocation never falls in the
    experiment, so a bound for the longest prefix holds for every attempt in the column."""
    pct = np.rint(np.cumsum(np.asarray(arrived_milli, dtype=np.float64)) / capacity_milli * 100)
    cut = level if (pct == level).any() else level + 1
    return int(np.searchsorted(pct, cut, side="right"))


def seed_bounds(workload: Workload, seed: int, levels: Sequence[int], *, offline_levels: Sequence[int] = (),
                tune: float = 1.3, prob: Problem | None = None,
                progress: Callable[[str], None] | None = None) -> list[LevelBound]:
    """The bound (and, at `offline_levels`, the best offline packing) at each level for the
    task sequence that `fgd_experiment.run` offers with this seed."""
    originals = sorted((p for job in workload.jobs for p in job.pods), key=lambda p: p.name)
    prob = prob or problem(workload.nodes, originals)
    nodes = fgd_experiment.renamed_nodes(workload.nodes, seed)
    capacity = sum(len(n.gpus) for n in nodes) * GPU_MILLI
    if capacity == 0:
        raise ModelError(f"workload {workload.name}", "the cluster has no GPUs to pack")
    tasks = fgd_experiment.task_list(originals, seed, capacity, tune)
    arrived = [p.gpu.total_milli for p in tasks]
    profile = profile_for(OFFLINE_POLICY, typical_tasks(originals)) if offline_levels else None
    out = []
    for level in sorted(levels):
        k = prefix_length(arrived, capacity, level)
        prefix = tasks[:k]
        b = upper_bound(prob, demand(prob, prefix))
        offline: float | None = None
        order: str | None = None
        if profile is not None and level in offline_levels:
            order, placements = offline_packing(prob, nodes, prefix, profile, b)
            offline = 100 - 100 * check_packing(nodes, prefix, placements) / capacity
        lower = 100 - 100 * min(b.upper_milli, capacity) / capacity
        out.append(LevelBound(seed, level, k, lower, offline, order, b.rounds))
        if progress:
            best = "" if offline is None else f", offline best {offline:.2f} % ({order})"
            progress(f"seed {seed}, arrived {level} %: lower bound {lower:.2f} % unallocated{best}")
    return out


def summary(results: Sequence[LevelBound]) -> dict[str, dict[str, object]]:
    """`{"100": {"lower_bound": mean, "offline_best": mean, ...}}`: means (and sd, per seed)
    over seeds. The mean bound is <= a policy's mean over the same seeds, as each seed's is."""
    out: dict[str, dict[str, object]] = {}
    for level in sorted({r.arrived_pct for r in results}):
        rows = sorted((r for r in results if r.arrived_pct == level), key=lambda r: r.seed)
        lower = np.array([r.lower_bound for r in rows])
        offline = np.array([r.offline_best for r in rows if r.offline_best is not None])
        out[str(level)] = {
            "lower_bound": round(float(lower.mean()), 4),
            "lower_bound_sd": round(float(lower.std(ddof=1)) if len(lower) > 1 else 0.0, 4),
            "offline_best": round(float(offline.mean()), 4) if len(offline) else None,
            "offline_best_sd": round(float(offline.std(ddof=1)), 4) if len(offline) > 1 else (0.0 if len(offline) else None),
            "per_seed": [{"seed": r.seed, "tasks": r.tasks, "lower_bound": round(r.lower_bound, 4),
                          "offline_best": None if r.offline_best is None else round(r.offline_best, 4),
                          "offline_order": r.offline_order, "lp_rounds": r.lp_rounds} for r in rows],
        }
    return out
