"""The built-in default: a synthetic openb-like cluster and workload, generated from figures.

The README's main job has to run on a fresh machine with nothing downloaded, and the
project commits no trace files. So this module holds *figures* about the Alibaba openb
trace (the FGD paper's default workload) and generates a cluster and a workload with the
same mix. Where each figure comes from:

- `NODE_SHAPES`: node shapes and counts of `openb_node_list_gpu_node.csv`, as published in
  `experiments/fgd.md` section 1 (1213 nodes, 6212 GPUs, 107,018 cores, 492,020 GiB).
- `CLASS_COUNTS`: task classes of `openb_pod_list_default.csv`, fgd.md section 1.
- `TASK_SPECS`: computed here from `openb_pod_list_default.csv`: within each task class, the
  distinct (cpu_milli, memory_mib, gpu_milli) requests, most frequent first (ties by value),
  kept until they cover >= 95 % of the class (FGD's "typical tasks" rule, applied per class),
  with their task counts. 64 specs cover 7788 of 8152 tasks; inside a class the counts are
  used as weights. `tests/sim/test_default_workload.py` recomputes the table from the trace.
- `DURATION_LOG_MU`, `DURATION_LOG_SIGMA`: a log-normal, a heavy-tailed distribution, fitted
  by maximum likelihood (mean and standard deviation of ln seconds) to deletion_time -
  creation_time of the 8151 tasks of the default pod list with a positive duration. It
  matches the trace's quantiles from p10 to p95 within about 30 % (median 628 s against
  540 s) and under-represents the extreme tail (p99 50 ks against 93 ks).

Counts are apportioned, not sampled (largest remainder: classes first, then specs within a
class), so `scale` shrinks the workload while keeping the mix, and scale 1.0 gives exactly
1213 nodes and 8152 tasks in the published classes. The seed drives the task order, the
durations and the arrival times. Arrivals form a Poisson process whose rate makes the offered
GPU load (expected GPU-seconds asked per second over GPU capacity) equal `load`, so the same
workload serves the FGD packing experiment (which ignores time) and a time-driven replay.
"""

from __future__ import annotations

import math
import random
from types import MappingProxyType
from typing import Mapping, Sequence

from gpufleet.model import (GPU_PRODUCT_LABEL, NO_GPU, Gpu, GpuRequest, GpuUuid, ModelError, NodeInfo,
                            NodeName, PodSpec, PodUid, gpu_fraction, whole_gpus)
from gpufleet.sim.traces.openb import GPU_MEMORY_MIB
from gpufleet.sim.workload import Job, Workload

OPENB_NODES = 1213
OPENB_TASKS = 8152

NODE_SHAPES: tuple[tuple[str, int, int, int, int], ...] = (
    # (GPU model, nodes, GPUs per node, CPU cores, memory GiB) -- fgd.md section 1
    ("G2", 549, 8, 96, 384),
    ("T4", 387, 2, 104, 512), ("T4", 17, 4, 96, 384),
    ("P100", 107, 2, 16, 120), ("P100", 22, 2, 64, 256), ("P100", 3, 1, 8, 60), ("P100", 2, 2, 8, 60),
    ("G3", 39, 8, 128, 768),
    ("V100M16", 28, 4, 32, 128), ("V100M16", 19, 1, 8, 32), ("V100M16", 7, 8, 64, 256),
    ("V100M16", 1, 8, 82, 336),
    ("V100M32", 21, 8, 96, 768), ("V100M32", 9, 4, 48, 368),
    ("A10", 2, 1, 128, 1024),
)

CLASS_COUNTS: Mapping[str, int] = MappingProxyType({
    "cpu": 1088, "share": 3078, "1gpu": 3911, "2gpu": 16, "4gpu": 15, "8gpu": 44})
"""Tasks per class in the default pod list (fgd.md section 1)."""

TASK_SPECS: Mapping[str, tuple[tuple[int, int, int, int], ...]] = MappingProxyType({
    # class: ((cpu_milli, memory_mib, gpu_milli per GPU, tasks), ...) -- openb_pod_list_default.csv
    "cpu": ((12500, 57344, 0, 364), (32000, 49152, 0, 284), (8000, 30517, 0, 163), (15400, 51200, 0, 120),
            (16500, 51200, 0, 95), (8000, 15625, 0, 11)),
    "share": ((3152, 5600, 810, 1047), (11908, 47104, 470, 388), (8000, 30517, 470, 360),
              (11908, 47104, 650, 237), (4000, 22888, 320, 111), (4000, 30517, 230, 84), (4000, 15258, 320, 78),
              (3152, 5600, 590, 75), (4152, 10600, 550, 72), (8000, 30517, 320, 72), (4000, 15258, 160, 53),
              (6000, 6144, 460, 51), (4152, 10600, 370, 45), (4000, 30517, 320, 43), (4152, 10600, 810, 31),
              (6000, 12288, 460, 29), (4000, 22888, 230, 26), (4000, 15258, 220, 24), (1000, 2048, 320, 22),
              (6000, 22888, 160, 20), (8000, 30517, 220, 19), (4000, 22888, 480, 18), (6000, 18432, 460, 18),
              (8000, 30517, 230, 18)),
    "1gpu": ((11300, 49152, 1000, 857), (11400, 48128, 1000, 534), (3152, 5600, 1000, 470),
             (18708, 64512, 1000, 255), (9810, 41560, 1000, 195), (12000, 24576, 1000, 158),
             (15700, 58368, 1000, 158), (11908, 47104, 1000, 153), (16000, 32768, 1000, 108),
             (4000, 24576, 1000, 104), (8000, 16384, 1000, 104), (12000, 16384, 1000, 99),
             (14200, 58368, 1000, 93), (24200, 93184, 1000, 84), (11400, 77824, 1000, 65),
             (8000, 32768, 1000, 55), (11900, 77824, 1000, 51), (12000, 15360, 1000, 44),
             (8200, 33792, 1000, 41), (4000, 31250, 1000, 40), (15200, 80896, 1000, 36), (16000, 65536, 1000, 33)),
    "2gpu": ((16200, 66560, 1000, 7), (6000, 65536, 1000, 3), (30200, 160768, 1000, 3), (17400, 43008, 1000, 2),
             (14000, 60000, 1000, 1)),
    "4gpu": ((32200, 132096, 1000, 9), (32000, 131072, 1000, 3), (60200, 320512, 1000, 3)),
    "8gpu": ((64200, 263168, 1000, 18), (88000, 327680, 1000, 18), (64000, 262144, 1000, 3),
             (120000, 737280, 1000, 3)),
})

DURATION_LOG_MU = 6.444
DURATION_LOG_SIGMA = 1.877
"""Log-normal fit of openb task durations in seconds (see the module docstring)."""


def default_workload(scale: float = 1.0, seed: int = 0, *, load: float = 0.9, max_pods: int = 110,
                     tasks: int | None = None) -> Workload:
    """The synthetic openb-like workload. scale 1.0 = 1213 nodes and 8152 tasks.

    `load` is the offered GPU load that sets the arrival rate for time-driven replay;
    `max_pods` is each node's pod limit (FGD's simulator used 1001). `tasks` overrides the
    number of tasks (same mix): a time-driven replay needs many more tasks than fit at once
    to reach a steady state where queueing matters.
    """
    if not (math.isfinite(scale) and scale > 0) or not (math.isfinite(load) and load > 0):
        raise ModelError("default workload", f"scale and load must be positive numbers, got {scale}, {load}")
    nodes = _nodes(round(OPENB_NODES * scale), max_pods)
    specs = _task_specs(tasks if tasks is not None else round(OPENB_TASKS * scale))
    if not nodes or not specs:
        raise ModelError("default workload: scale", f"{scale} leaves no nodes or no tasks; use at least "
                                                    f"{1 / OPENB_NODES:.5f}")
    rng = random.Random(seed)
    rng.shuffle(specs)
    requests = [_gpu(task_class, spec[2]) for task_class, spec in specs]
    durations = [max(1.0, float(round(rng.lognormvariate(DURATION_LOG_MU, DURATION_LOG_SIGMA)))) for _ in specs]
    mean_gpus = sum(r.total_milli for r in requests) / 1000 / len(specs)
    gpus = sum(len(n.gpus) for n in nodes)
    mean_gap_s = mean_gpus * math.exp(DURATION_LOG_MU + DURATION_LOG_SIGMA**2 / 2) / (load * gpus)
    arrival = 0.0
    jobs = []
    for i, ((task_class, spec), gpu, duration) in enumerate(zip(specs, requests, durations)):
        jobs.append(_job(i, task_class, spec, gpu, round(arrival, 3), duration))
        arrival += rng.expovariate(1 / mean_gap_s)
    return Workload("builtin-default", tuple(nodes), tuple(jobs),
                    f"synthetic openb-like workload (scale {scale}, seed {seed}, offered GPU load {load})")


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Split `total` in proportion to `weights` (largest remainder; ties to the earlier entry)."""
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[:total - sum(counts)]:
        counts[i] += 1
    return counts


def _nodes(total: int, max_pods: int) -> list[NodeInfo]:
    nodes: list[NodeInfo] = []
    for (model, _, gpus, cores, mem_gib), count in zip(NODE_SHAPES, apportion(total, [s[1] for s in NODE_SHAPES])):
        for _ in range(count):
            name = f"synth-node-{len(nodes):04d}"
            nodes.append(NodeInfo(NodeName(name), cores * 1000, mem_gib * 1024, max_pods,
                                  MappingProxyType({GPU_PRODUCT_LABEL: model}),
                                  gpus=tuple(Gpu(GpuUuid(f"GPU-{name}-{g}"), model, GPU_MEMORY_MIB[model], g)
                                             for g in range(gpus))))
    return nodes


def _task_specs(total: int) -> list[tuple[str, tuple[int, int, int, int]]]:
    """(class, spec) per task, in class then spec order: the apportioned mix before shuffling."""
    result = []
    for task_class, n in zip(CLASS_COUNTS, apportion(total, list(CLASS_COUNTS.values()))):
        specs = TASK_SPECS[task_class]
        for spec, k in zip(specs, apportion(n, [s[3] for s in specs])):
            result.extend([(task_class, spec)] * k)
    return result


def _gpu(task_class: str, gpu_milli: int) -> GpuRequest:
    if task_class == "cpu":
        return NO_GPU
    if task_class == "share":
        return gpu_fraction(gpu_milli)
    return whole_gpus(int(task_class.removesuffix("gpu")))


def _job(i: int, task_class: str, spec: tuple[int, int, int, int], gpu: GpuRequest, arrival_s: float,
         duration_s: float) -> Job:
    name = f"synth-pod-{i:05d}"
    pod = PodSpec(PodUid(name), name, cpu_milli=spec[0], mem_mib=spec[1], gpu=gpu, created_s=arrival_s)
    return Job((pod,), arrival_s, duration_s, source=f"default:{i}",
               attrs=MappingProxyType({"task_class": task_class}))
