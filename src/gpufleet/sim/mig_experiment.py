"""The MIG experiment of issue 22: static MIG layouts against demand-driven repartitioning.

Workloads (every pod asks one MIG instance and nothing else: CPU and memory are left out so
that only the layout differs between policies):

- openb: the fractional tasks of the Alibaba openb trace (`gpu_milli` < 1000, 3078 tasks),
  each mapped to the smallest MIG profile that covers its GPU share in compute (g/7) and in
  memory (eighths/8, taking the memory share equal to the compute share: the trace has no GPU
  memory column); with the trace's arrival order and durations, arrivals compressed so the
  offered compute slices are `load` of the cluster's; on `nodes` 8-GPU nodes, A100-80GB and
  H100-80GB alternating (both MIG families have the same profile names).
- diurnal: a synthetic mix, INVENTED for this experiment, whose profile demand shifts over
  the day: small instances (1g.10gb, 1g.20gb, 2g.20gb: notebooks, inference) peak at 14:00,
  large ones (3g.40gb, 4g.40gb, 7g.80gb: training) at 02:00 (weights in `DAY_MIX`,
  `NIGHT_MIX`, blended by a cosine of the hour); Poisson arrivals at `load` of the slices;
  run times log-normal (median 30 min, sigma 1); on `nodes` 8-GPU H100-80GB nodes.

Policies, each on every MIG GPU:
- all-1g: mig-parted's `all-1g.10gb` (7 x 1g.10gb);
- balanced: mig-parted's `all-balanced` for A100-80GB/H100-80GB (2 x 1g.10gb, 1 x 2g.20gb,
  1 x 3g.40gb: NVIDIA/mig-parted `examples/config.yaml`, also the GPU Operator's
  `default-mig-parted-config`);
- best-static: every valid maximal layout (`model.mig_placement.maximal_layouts`, 38 on these
  families) replayed on the same workload; kept is the one that starts the most jobs, then
  has the lowest unallocated GPU %, then the lowest p95 wait of the jobs it started (a layout
  that runs a backlog of a few profiles while the others never start keeps its slices busy:
  lowest unallocated % alone would crown it). It SEES the workload: an offline search for one
  layout on every GPU, not a policy. One layout for every GPU cannot serve a workload that
  asks for 7g.80gb and for anything else, so on openb every such layout leaves jobs unstarted;
- static-mix (not in the issue's list; added because the single layouts above cannot serve
  openb at all): each GPU its own fixed layout, chosen offline so the cluster's instances
  match the workload's mean concurrent demand per profile (`static_mix`). It also SEES the
  workload;
- demand: starts from the balanced layout and repartitions idle instances for the pending
  demand (`core.mig_planner`, applied by `sim.mig_reconfig` with its reconfiguration delay).

KPIs per policy (sim/mig_reconfig.py defines unallocated GPU %): `unallocated_gpu_pct`,
`allocated_gpu_pct`; `wait_p95_s` over ALL jobs, a job that never starts counting as an
unbounded wait (None when more than 5 % never start: the p95 wait is then unbounded);
`wait_p95_started_s` and `wait_mean_started_s` over the jobs that started; `never_started`;
`reconfigurations` (GPUs changed, summed over plans).
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np

from gpufleet.framework.profile import build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import GPU_PRODUCT_LABEL, Gpu, GpuUuid, ModelError, NodeInfo, NodeName, PodSpec, PodUid, mig
from gpufleet.model import mig_slices as mig_request
from gpufleet.model.mig_placement import maximal_layouts
from gpufleet.sim import parallel
from gpufleet.sim.mig_reconfig import RECONFIG_DELAY_S, MigReconfigurer
from gpufleet.sim.replay import ReplayResult, replay
from gpufleet.sim.workload import Job, Workload

POLICIES = ("all-1g", "balanced", "best-static", "static-mix", "demand")
KPIS = ("unallocated_gpu_pct", "allocated_gpu_pct", "wait_p95_s", "wait_p95_started_s", "wait_mean_started_s",
        "never_started", "reconfigurations", "jobs")
FAMILY = "H100-80GB"
"""Layouts are named by this family's profiles; A100-80GB has the same names and shapes."""
ALL_1G = ("1g.10gb",) * 7
BALANCED = ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
MODELS = ("A100-80GB", "H100-80GB")


def profile_for(gpu_milli: int, family: str = FAMILY) -> str:
    """The smallest profile (compute, then memory) with g/7 and eighths/8 both >= the share."""
    share = gpu_milli / 1000
    table = mig.MIG_TABLES[family]
    fits = [p for p in table.values() if "+me" not in p.name
            and p.compute_slices / 7 >= share and p.memory_eighths / 8 >= share]
    if not fits:
        raise ModelError(f"GPU share {gpu_milli}", f"no MIG profile of {family} covers it")
    return min(fits, key=lambda p: (p.compute_slices, p.memory_eighths)).name


def cluster(nodes: int, models: Sequence[str], layout: Sequence[str]) -> tuple[NodeInfo, ...]:
    """`nodes` 8-GPU nodes cycling through `models`, every GPU carved as `layout`."""
    out = []
    for i in range(nodes):
        model = models[i % len(models)]
        name = f"{model.split('-')[0].lower()}-{i:03d}"
        out.append(NodeInfo(NodeName(name), 128_000, 1024 * 1024,
                            labels=MappingProxyType({GPU_PRODUCT_LABEL: model}),
                            gpus=tuple(Gpu(GpuUuid(f"GPU-{name}-{g}"), model, 80 * 1024, g, mig_slices=tuple(layout))
                                       for g in range(8))))
    return tuple(out)


def _pod(name: str, profile: str, arrival_s: float) -> PodSpec:
    return PodSpec(PodUid(name), name, gpu=mig_request(profile), created_s=arrival_s)


def _slices(profile: str) -> int:
    return mig.MIG_TABLES[FAMILY][profile].compute_slices


def openb_mig(base: Workload, nodes: int, load: float, jobs: int | None = None) -> Workload:
    """The openb fractional tasks as MIG pods (module docstring)."""
    frac = [j for j in base.jobs if 0 < j.gpu_milli < 1000 and j.duration_s is not None][:jobs]
    if not frac or nodes < 1 or load <= 0:
        raise ModelError("mig experiment", "needs fractional tasks, at least one node and a positive load")
    profiles = [profile_for(j.gpu_milli) for j in frac]
    t0 = frac[0].arrival_s
    span = max(frac[-1].arrival_s - t0, 1.0)
    work = sum(_slices(p) * (j.duration_s or 0.0) for p, j in zip(profiles, frac))
    scale = load * 7 * 8 * nodes * span / work
    out = []
    for j, p in zip(frac, profiles):
        t = (j.arrival_s - t0) / scale
        out.append(Job((_pod(f"openb-{j.pods[0].name}", p, t),), t, j.duration_s, None, j.source,
                       MappingProxyType({"gpu_milli": str(j.gpu_milli), "profile": p})))
    return Workload("openb-mig", cluster(nodes, MODELS, BALANCED), tuple(out),
                    f"{len(out)} openb fractional tasks as MIG pods, arrivals / {scale:.3g} (offered load {load:g} of "
                    f"the compute slices), on {nodes} 8-GPU nodes ({', '.join(MODELS)} alternating)")


DAY_MIX = {"1g.10gb": 40, "1g.20gb": 20, "2g.20gb": 25, "3g.40gb": 10, "4g.40gb": 5, "7g.80gb": 0}
NIGHT_MIX = {"1g.10gb": 5, "1g.20gb": 5, "2g.20gb": 10, "3g.40gb": 25, "4g.40gb": 30, "7g.80gb": 25}
"""Invented request weights at the small-instance peak (14:00) and the large-instance peak (02:00)."""


def day_weights(hour: float) -> dict[str, float]:
    d = (1 + math.cos(2 * math.pi * (hour - 14) / 24)) / 2  # 1 at 14:00, 0 at 02:00
    return {p: d * DAY_MIX[p] + (1 - d) * NIGHT_MIX[p] for p in DAY_MIX}


def diurnal(nodes: int, load: float, days: float = 2.0, seed: int = 0) -> Workload:
    """The synthetic day-shifting mix (module docstring)."""
    if nodes < 1 or load <= 0 or days <= 0:
        raise ModelError("mig experiment", "needs at least one node, a positive load and a positive length")
    rng = random.Random(seed)
    median_s, sigma = 1800.0, 1.0
    mean_s = median_s * math.exp(sigma ** 2 / 2)
    out: list[Job] = []
    t, k = 0.0, 0
    while True:
        w = day_weights((t / 3600) % 24)
        mean_slices = sum(_slices(p) * x for p, x in w.items()) / sum(w.values())
        t += rng.expovariate(load * 7 * 8 * nodes / (mean_slices * mean_s))
        if t >= days * 86400:
            break
        w = day_weights((t / 3600) % 24)
        profile = rng.choices(list(w), list(w.values()))[0]
        duration = median_s * math.exp(rng.gauss(0.0, sigma))
        out.append(Job((_pod(f"diurnal-{k:05d}", profile, t),), t, duration, None, f"diurnal:{k}",
                       MappingProxyType({"profile": profile})))
        k += 1
    return Workload("diurnal-mig", cluster(nodes, ("H100-80GB",), BALANCED), tuple(out),
                    f"{len(out)} jobs of an invented day-shifting MIG mix over {days:g} days at load {load:g}, "
                    f"on {nodes} 8-GPU H100-80GB nodes (seed {seed})")


def with_layout(workload: Workload, layouts: Sequence[tuple[str, ...]]) -> Workload:
    """Every GPU carved as `layouts[k % len(layouts)]`, k counting GPUs in node order."""
    k = iter(range(10 ** 9))
    nodes = tuple(dataclasses.replace(n, gpus=tuple(dataclasses.replace(g, mig_slices=layouts[next(k) % len(layouts)])
                                                    for g in n.gpus)) for n in workload.nodes)
    return dataclasses.replace(workload, nodes=nodes)


def mean_demand(workload: Workload) -> dict[str, float]:
    """Mean concurrent instances asked per profile: run time summed per profile over the arrival window."""
    arrivals = [j.arrival_s for j in workload.jobs]
    window = max(max(arrivals) - min(arrivals), 1.0)
    out: dict[str, float] = {}
    for j in workload.jobs:
        for pod in j.pods:
            if pod.gpu.mig_profile:
                out[pod.gpu.mig_profile] = out.get(pod.gpu.mig_profile, 0.0) + (j.duration_s or 0.0) / window
    return out


def static_mix(workload: Workload) -> tuple[tuple[str, ...], ...]:
    """One maximal layout per GPU, greedily: each GPU takes the layout covering the most compute
    slices of the mean demand not yet covered; when no layout covers any, a new round starts
    (the demand is covered again, in proportion). Offline: it reads the whole workload."""
    target = mean_demand(workload)
    layouts = [tuple(i.profile for i in layout) for layout in maximal_layouts(FAMILY)]
    left = dict(target)
    out = []
    for _ in range(sum(len(n.gpus) for n in workload.nodes)):
        def gain(layout: tuple[str, ...]) -> float:
            return sum(_slices(p) * min(layout.count(p), max(left.get(p, 0.0), 0.0)) for p in set(layout))
        if max(gain(lay) for lay in layouts) <= 0:
            left = {p: left.get(p, 0.0) + t for p, t in target.items()}
        best = max(layouts, key=lambda lay: (gain(lay), lay))
        out.append(best)
        for p in best:
            left[p] = left.get(p, 0.0) - 1
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MigRun:
    workload: str
    policy: str
    layouts: tuple[tuple[str, ...], ...]
    """Each GPU's layout at the start."""
    row: dict[str, float | None]


def run_one(shared: tuple[Mapping[str, Workload], float], name: str, policy: str,
            layouts: tuple[tuple[str, ...], ...]) -> MigRun:
    """One replay of workload `name` with the GPUs starting as `layouts` (see `with_layout`);
    planning iff `policy` is demand."""
    workloads, delay_s = shared
    workload = with_layout(workloads[name], layouts)
    arrivals = [j.arrival_s for j in workload.jobs]
    reconf = MigReconfigurer(workload.nodes, (min(arrivals), max(arrivals)), plan=policy == "demand", delay_s=delay_s)
    settings = dataclasses.replace(builtin("bestfit"), name=f"mig-{policy}", queueing=QueueingConfig())
    result = replay(workload, build_profile(settings), 0, mig=reconf)
    carved = tuple(g.mig_slices for n in workload.nodes for g in n.gpus)
    return MigRun(name, policy, carved, measure(result, reconf))


def measure(result: ReplayResult, reconf: MigReconfigurer) -> dict[str, float | None]:
    waits = np.array([r.start_s - r.arrival_s if r.start_s is not None else np.inf for r in result.records])
    started = waits[np.isfinite(waits)]
    p95 = float(np.percentile(waits, 95, method="higher")) if len(waits) else 0.0
    return {"unallocated_gpu_pct": round(reconf.meter.unallocated_pct(), 3),
            "allocated_gpu_pct": round(reconf.meter.allocated_pct(), 3),
            "wait_p95_s": round(p95, 1) if math.isfinite(p95) else None,
            "wait_p95_started_s": round(float(np.percentile(started, 95)), 1) if len(started) else None,
            "wait_mean_started_s": round(float(started.mean()), 1) if len(started) else None,
            "never_started": float(sum(1 for r in result.records if r.start_s is None)),
            "reconfigurations": float(reconf.reconfigurations),
            "jobs": float(len(result.records))}


def candidates(policy: str, workload: Workload) -> list[tuple[tuple[str, ...], ...]]:
    """The starting layouts a policy is replayed with (best-static: every maximal layout)."""
    if policy == "all-1g":
        return [(ALL_1G,)]
    if policy in ("balanced", "demand"):
        return [(BALANCED,)]
    if policy == "best-static":
        return [(tuple(i.profile for i in layout),) for layout in maximal_layouts(FAMILY)]
    if policy == "static-mix":
        return [static_mix(workload)]
    raise ModelError("--policies", f"unknown MIG policy {policy!r}; known: {', '.join(POLICIES)}")


def run_all(workloads: Mapping[str, Workload], policies: Sequence[str], workers: int,
            delay_s: float = RECONFIG_DELAY_S, on_done: Callable[[MigRun], None] | None = None) -> list[MigRun]:
    """Every (workload, policy, starting layout) replay; best-static keeps its best layout."""
    jobs = [(name, p, layouts) for name, w in workloads.items() for p in policies for layouts in candidates(p, w)]
    runs = parallel.run_jobs(run_one, (workloads, delay_s), jobs, workers, on_done)
    best: dict[tuple[str, str], MigRun] = {}
    for r in sorted(runs, key=_rank):
        best.setdefault((r.workload, r.policy), r)
    return [best[(name, p)] for name in workloads for p in policies]


def _rank(r: MigRun) -> tuple[float, float, float, tuple[tuple[str, ...], ...]]:
    """best-static's order: most jobs started, lowest unallocated %, lowest p95 wait of those started."""
    wait = r.row["wait_p95_started_s"]
    return (r.row["never_started"] or 0.0, r.row["unallocated_gpu_pct"] or 0.0,
            math.inf if wait is None else wait, r.layouts)


def job_count(policies: Sequence[str], workloads: Mapping[str, Workload]) -> int:
    return sum(len(candidates(p, w)) for w in workloads.values() for p in policies)


def table(runs: Sequence[MigRun]) -> dict[str, dict[str, dict[str, object]]]:
    """workload -> policy -> KPIs and the layout it started from."""
    out: dict[str, dict[str, dict[str, object]]] = {}
    for r in runs:
        out.setdefault(r.workload, {})[r.policy] = {**{k: r.row[k] for k in KPIS}, "layout": _layouts(r.layouts)}
    return out


def _layouts(layouts: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """How many GPUs start with each layout, named by its profiles, largest first ("3g.40gb+2g.20gb+...")."""
    out: dict[str, int] = {}
    for layout in layouts:
        name = "+".join(sorted(layout, key=lambda p: (-_slices(p), p)))
        out[name] = out.get(name, 0) + 1
    return out
