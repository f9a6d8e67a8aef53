"""The topology experiment of issue 22: where gangs go, and what it costs them, per policy.

Two workloads, each replayed under four policies with the `bestfit` profile's plugins
(BestFit + Topology + RecentFaults) and plain priority queueing, so only gang topology differs:

- philly: the multi-GPU jobs of Gavel's Philly-derived trace (arrival times and GPU counts
  from Philly), the first `jobs` of them, arrivals compressed by `time_scale`; a job of G GPUs
  is a gang of ceil(G / `gpus_per_pod`) pods (2 GPUs each by default, as the sample's 4 x 2
  gang), on the trace's 500 V100s as 8-GPU servers, 8 servers to a rack (no NVLink domains
  across servers: DGX-1-like V100 servers);
- synthetic: a gang-heavy mix on 48 H100-like 8-GPU nodes, 2 nodes to an NVLink domain
  (`nvidia.com/gpu.clique`), 8 to a rack: 25 % single 1-GPU pods, 10 % single 4-GPU pods, the
  rest gangs of 2 x 2, 4 x 2, 2 x 4, 8 x 1, 4 x 4, 8 x 2, 2 x 8 and 4 x 8 GPUs; Poisson
  arrivals at `load` of the GPUs; run times log-normal (median 1 h, sigma 1.2); job types
  drawn from Gavel's multi-GPU models. The mix is invented to stress gangs; say so when quoting it.

Policies (the declared level is the rack, KAI's documented example):
- none: no topology search (`topology.gangDefault: ""`, nothing declared) - before issue 22;
- preferred: every gang declares `kai.scheduler/topology-preferred-placement: <rack>`;
- required: every gang declares `kai.scheduler/topology-required-placement: <rack>`;
- default: nothing declared, the shipped `gangDefault` (the host: a gang that fits one node
  goes on one node when one is free, else one domain level by level, else anywhere).

Every job's run time is stretched by `sim.comm_cost` (a stated model: Gavel's consolidated vs
unconsolidated throughputs, an assumed cross-rack factor) for where it was placed.
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
from gpufleet.framework.topology_levels import CLIQUE, HOSTNAME, RACK, TopologyConfig
from gpufleet.model import (GPU_PRODUCT_LABEL, Gpu, GpuUuid, ModelError, NodeInfo, NodeName, PodGroup, PodSpec,
                            PodUid, whole_gpus)
from gpufleet.sim import parallel
from gpufleet.sim.comm_cost import CommModel
from gpufleet.sim.replay import replay
from gpufleet.sim.traces import philly
from gpufleet.sim.workload import Job, Workload

POLICIES = ("none", "preferred", "required", "default")
LEVEL = RACK
NODES_PER_RACK = 8
KPIS = ("gangs", "gangs_one_domain_pct", "gangs_one_node_pct", "gangs_one_clique_pct", "gangs_one_rack_pct",
        "slowdown_mean", "gang_jct_mean_s", "jct_mean_s", "jct_p99_s", "wait_mean_s", "wait_p99_s",
        "gpu_allocation", "finished", "waiting_at_end")


def with_racks(nodes: Sequence[NodeInfo], per_rack: int = NODES_PER_RACK, per_clique: int = 0) -> tuple[NodeInfo, ...]:
    """`nodes` (in name order) labelled with racks of `per_rack` and NVLink domains of `per_clique` nodes."""
    out = []
    for i, node in enumerate(sorted(nodes, key=lambda n: n.name)):
        labels = dict(node.labels, **{RACK: f"rack-{i // per_rack:02d}"})
        if per_clique:
            labels[CLIQUE] = f"clique-{i // per_clique:03d}"
        out.append(dataclasses.replace(node, labels=MappingProxyType(labels)))
    return tuple(out)


def _gang_job(job: Job, name: str, gpus: int, gpus_per_pod: int, queue: str = "default") -> Job:
    sizes = [min(gpus_per_pod, gpus - s) for s in range(0, gpus, gpus_per_pod)]
    group = PodGroup(name, len(sizes)) if len(sizes) > 1 else None
    pods = tuple(PodSpec(PodUid(f"{name}-{i}" if group else name), f"{name}-{i}" if group else name,
                         cpu_milli=n * philly.POD_CPU_MILLI_PER_GPU, mem_mib=n * philly.POD_MEM_MIB_PER_GPU,
                         gpu=whole_gpus(n), queue=queue, pod_group=group.key if group else None,
                         created_s=job.arrival_s) for i, n in enumerate(sizes))
    return dataclasses.replace(job, pods=pods, group=group)


def philly_gangs(base: Workload, jobs: int, gpus_per_pod: int = 2, time_scale: float = 1.0) -> Workload:
    """The first `jobs` multi-GPU jobs of the Philly-derived workload `base`, as gangs of
    `gpus_per_pod`-GPU pods, on its cluster with racks; one queue (queueing is not compared here)."""
    if gpus_per_pod < 1 or time_scale <= 0:
        raise ModelError("topology experiment", "gpus per pod and the time scale must be positive")
    multi = [j for j in base.jobs if j.gpu_milli > 1000][:jobs]
    out = [_gang_job(dataclasses.replace(j, arrival_s=j.arrival_s / time_scale), j.source.replace(".trace:", "-"),
                     j.gpu_milli // 1000, gpus_per_pod) for j in multi]
    return Workload("philly-gangs", with_racks(base.nodes), tuple(out),
                    f"{len(out)} multi-GPU jobs of {base.description}, as gangs of {gpus_per_pod}-GPU pods, "
                    f"arrivals / {time_scale:g}, {NODES_PER_RACK} nodes to a rack")


SHAPES = ((1, 1, 25), (1, 4, 10), (2, 2, 8), (4, 2, 14), (2, 4, 10), (8, 1, 5), (4, 4, 10), (8, 2, 4),
          (2, 8, 8), (4, 8, 6))
"""(pods, GPUs per pod, weight) of the synthetic mix."""
JOB_TYPES = ("ResNet-18 (batch size 64)", "ResNet-50 (batch size 64)", "Transformer (batch size 64)",
             "LM (batch size 20)", "ResNet-18 (batch size 256)", "Transformer (batch size 16)")


def synthetic(jobs: int, load: float, seed: int = 0, nodes: int = 48) -> Workload:
    """The gang-heavy mix (module docstring)."""
    rng = random.Random(seed)
    cluster = [NodeInfo(NodeName(f"h100-{i:03d}"), 64_000, 488 * 1024,
                        labels=MappingProxyType({GPU_PRODUCT_LABEL: "H100-80GB"}),
                        gpus=tuple(Gpu(GpuUuid(f"GPU-h100-{i:03d}-{g}"), "H100-80GB", 80 * 1024, g) for g in range(8)))
               for i in range(nodes)]
    weights = [w for _, _, w in SHAPES]
    median_s, sigma = 3600.0, 1.2
    mean_gpus = sum(p * g * w for p, g, w in SHAPES) / sum(weights)
    gap_s = mean_gpus * median_s * math.exp(sigma ** 2 / 2) / (8 * nodes * load)
    out, t = [], 0.0
    for k in range(jobs):
        t += rng.expovariate(1.0 / gap_s)
        pods, per_pod, _ = rng.choices(SHAPES, weights)[0]
        duration = median_s * math.exp(rng.gauss(0.0, sigma))
        job = Job((), t, duration, None, f"synthetic:{k}", MappingProxyType({"job_type": rng.choice(JOB_TYPES)}))
        out.append(_gang_job(job, f"job-{k:05d}", pods * per_pod, per_pod))
    return Workload("synthetic-gangs", with_racks(cluster, NODES_PER_RACK, 2), tuple(out),
                    f"{jobs} jobs of a gang-heavy mix at load {load:g} on {nodes} 8-GPU nodes, 2 to an NVLink "
                    f"domain, {NODES_PER_RACK} to a rack (seed {seed})")


def for_policy(workload: Workload, policy: str) -> tuple[Workload, TopologyConfig]:
    """The workload with its gangs' annotations, and the profile's topology section, for `policy`."""
    if policy not in POLICIES:
        raise ModelError("--policies", f"unknown topology policy {policy!r}; known: {', '.join(POLICIES)}")
    topology = TopologyConfig(gang_default=HOSTNAME if policy == "default" else "")
    if policy not in ("preferred", "required"):
        return workload, topology
    def declared(group: PodGroup) -> PodGroup:
        if policy == "preferred":
            return dataclasses.replace(group, preferred_topology=LEVEL)
        return dataclasses.replace(group, required_topology=LEVEL)
    jobs = tuple(dataclasses.replace(j, group=declared(j.group)) if j.group else j for j in workload.jobs)
    return dataclasses.replace(workload, jobs=jobs), topology


@dataclass(frozen=True, slots=True)
class TopologyRun:
    workload: str
    policy: str
    row: dict[str, float | None]


def run_one(shared: tuple[Mapping[str, Workload], Mapping[tuple[str, int], float], float],
            name: str, policy: str) -> TopologyRun:
    workloads, ratios, cross_rack = shared
    workload, topology = for_policy(workloads[name], policy)
    settings = dataclasses.replace(builtin("bestfit"), name=f"topology-{policy}", queueing=QueueingConfig(),
                                   topology=topology)
    model = CommModel(workload.nodes, ratios, cross_rack)
    result = replay(workload, build_profile(settings), 0, slowdown=model)
    return TopologyRun(name, policy, measure(workload, result.summary(), result.records, model))


def measure(workload: Workload, summary: Mapping[str, float], records: Sequence[object], model: CommModel
            ) -> dict[str, float | None]:
    """The KPIs of one run: gang placement shares (among the gangs that fit a domain of the level),
    the mean slowdown of gangs, and JCT and waits of all jobs."""
    node_gpus = model.node_gpus
    per_clique = _domain_gpus(workload.nodes, CLIQUE)
    per_rack = _domain_gpus(workload.nodes, RACK) or node_gpus
    gangs = [i for i, j in enumerate(workload.jobs) if j.group is not None and i in model.spreads]

    def pct(level_gpus: int, inside: Callable[[int], bool]) -> float | None:
        eligible = [i for i in gangs if model.spreads[i].gpus <= level_gpus]
        return round(100.0 * sum(inside(i) for i in eligible) / len(eligible), 2) if eligible else None

    def one_domain(i: int) -> bool:
        s = model.spreads[i]
        if s.gpus <= node_gpus:
            return s.nodes == 1
        if per_clique and s.gpus <= per_clique:
            return s.cliques == 1
        return s.racks == 1
    jct = [r.end_s - r.arrival_s for r in records  # type: ignore[attr-defined]
           if r.end_s is not None and workload.jobs[r.job].group is not None]  # type: ignore[attr-defined]
    row: dict[str, float | None] = {
        "gangs": float(len(gangs)),
        "gangs_one_domain_pct": pct(per_rack, one_domain),
        "gangs_one_node_pct": pct(node_gpus, lambda i: model.spreads[i].nodes == 1),
        "gangs_one_clique_pct": pct(per_clique, lambda i: model.spreads[i].cliques == 1) if per_clique else None,
        "gangs_one_rack_pct": pct(per_rack, lambda i: model.spreads[i].racks == 1),
        "slowdown_mean": round(float(np.mean([model.spreads[i].factor for i in gangs])), 4) if gangs else None,
        "gang_jct_mean_s": round(float(np.mean(jct)), 1) if jct else None,
    }
    for k in KPIS:
        if k not in row:
            row[k] = round(summary[k], 4)
    return row


def _domain_gpus(nodes: Sequence[NodeInfo], key: str) -> int:
    """GPUs of the smallest domain of `key` (0 when no node has the label)."""
    sizes: dict[str, int] = {}
    for n in nodes:
        if key in n.labels:
            sizes[n.labels[key]] = sizes.get(n.labels[key], 0) + len(n.gpus)
    return min(sizes.values(), default=0)


def run_all(workloads: Mapping[str, Workload], ratios: Mapping[tuple[str, int], float], policies: Sequence[str],
            workers: int, cross_rack: float, on_done: Callable[[TopologyRun], None] | None = None
            ) -> list[TopologyRun]:
    for p in policies:
        for_policy(next(iter(workloads.values())), p)  # unknown names fail before any work starts
    jobs = [(name, p) for name in workloads for p in policies]
    runs = parallel.run_jobs(run_one, (workloads, ratios, cross_rack), jobs, workers, on_done)
    return sorted(runs, key=lambda r: (list(workloads).index(r.workload), list(policies).index(r.policy)))


def table(runs: Sequence[TopologyRun]) -> dict[str, dict[str, dict[str, float | None]]]:
    """workload -> policy -> KPIs."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for r in runs:
        out.setdefault(r.workload, {})[r.policy] = {k: r.row[k] for k in KPIS}
    return out
