"""The Philly-derived traces of Gavel (OSDI'20), `gavel-philly-derived/` in the trace directory.

Gavel kept the arrival times and GPU counts of Microsoft Philly jobs, one file per Philly
virtual cluster (VC), and gave each job a model type and a step count. Decisions:

- Field order is Gavel's own (`scheduler/utils.py`, `parse_trace(trace_file, run_dir)` of
  the commit these files come from): job_type, command, num_steps_arg, needs_data_dir,
  total_steps, arrival_time, scale_factor. Seven tab-separated fields; the scale factor is
  the job's GPU count. Gavel dropped rows with scale factor 0; here they are an error.
- Duration = total_steps / steps per second of (job_type, scale_factor) running alone on
  the chosen GPU type (`simulation_throughputs.json`, key "null"). That table measures
  1, 2, 4 and 8 GPUs, and not every model at every size. For a size it lacks (7, 12, 16,
  ..., 64 GPUs, or A3C/CycleGAN on more than one) the throughput of the largest measured
  size below it is scaled linearly: an optimistic, documented assumption, recorded in
  `Job.attrs["throughput_basis"]` so a report can tell measured from extrapolated.
- Each VC becomes a queue (`PodSpec.queue` = file stem). A job of N <= 8 GPUs is one pod;
  a larger job is a gang of ceil(N/8) pods, 8 GPUs each except a smaller last one, so the
  gang asks for exactly N GPUs.
- `cluster_specs.json` ("500:0:0" = v100:p100:k80, the order Gavel's msr sweep parses)
  becomes 8-GPU servers, the last of a type holding the remainder. Philly records no CPU
  or memory, so servers are shaped like AWS p3.16xlarge (64 vCPU, 488 GiB) and each pod
  asks 4 CPUs and 30 GiB per GPU: enough to look real, never the binding constraint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
import re
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from gpufleet.model import (GPU_PRODUCT_LABEL, Gpu, GpuUuid, ModelError, NodeInfo, NodeName, PodGroup,
                            PodSpec, PodUid, Queue, read_text, whole_gpus)
from gpufleet.model.documents import printable
from gpufleet.sim.workload import Job, Workload

SUBDIR = "gavel-philly-derived"
TRACES = "msr-seed0"
THROUGHPUTS = "simulation_throughputs.json"
CLUSTER_SPECS = "cluster_specs.json"
FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
          "scale_factor")

GPU_TYPES = ("v100", "p100", "k80")
"""Gavel's worker types, in the order of a cluster spec "v100:p100:k80"."""
GPU_MODELS: Mapping[str, tuple[str, int]] = MappingProxyType({
    "v100": ("V100", 16 * 1024), "p100": ("P100", 16 * 1024), "k80": ("K80", 12 * 1024)})
"""Node label and GPU memory (MiB) per worker type: the 16 GB V100/P100 and one K80 die."""

GPUS_PER_NODE = 8
NODE_CPU_MILLI = 64_000
NODE_MEM_MIB = 488 * 1024
POD_CPU_MILLI_PER_GPU = 4_000
POD_MEM_MIB_PER_GPU = 30 * 1024

Throughputs = Mapping[str, Mapping[tuple[str, int], float]]
"""GPU type -> (job type, GPUs) -> steps per second running alone."""

MAX_DIGITS = 18
MAX_JOB_GPUS = 4096
"""Philly's largest jobs used 128 GPUs; a bigger scale factor is a typo, not a gang to build."""
MAX_CLUSTER_GPUS = 800_000
"""GPUs of one type in a cluster spec (100,000 8-GPU nodes, the scenario format's bound)."""

_KEY = re.compile(r"\('(.+)', (\d+)\)")


def load(root: Path, *, gpu_type: str = "v100", spec_index: int = 0,
         vcs: Sequence[str] | None = None, priorities: bool = False) -> Workload:
    """All VCs (or those named in `vcs`) of the trace directory `root` on the spec's cluster.

    Jobs of every VC share one cluster and are merged by arrival (ties: VC name, then line).
    Each VC is a queue of weight 1. Philly records no priorities; with `priorities` each job
    gets a PriorityClass value drawn from a fixed mix (see `priority_of`).
    """
    folder = root / SUBDIR
    throughputs = read_throughputs(folder / THROUGHPUTS)
    files = sorted((folder / TRACES).glob("*.trace"))
    if vcs is not None:
        missing = set(vcs) - {f.stem for f in files}
        if missing:
            raise FileNotFoundError(f"no trace for VC(s) {', '.join(sorted(missing))} in {folder / TRACES}")
        files = [f for f in files if f.stem in vcs]
    jobs = [job for f in files for job in read_trace(f, throughputs, gpu_type)]
    jobs.sort(key=lambda job: job.arrival_s)
    if priorities:
        jobs = [_with_priority(job) for job in jobs]
    spec = read_cluster_spec(folder / CLUSTER_SPECS, spec_index)
    return Workload(f"philly-{TRACES}", cluster_nodes(spec), tuple(jobs),
                    f"Gavel's Philly-derived traces ({len(files)} VCs), durations on {gpu_type}",
                    tuple(Queue(f.stem) for f in files))


PRIORITY_MIX = ((1, 1000), (6, 100), (3, 0))
"""(tenths of jobs, PriorityClass value): 10 % high, 60 % normal, 30 % low/best-effort."""


def priority_of(name: str) -> int:
    """A job's priority from the mix, by a stable hash of its name (same on every run)."""
    slot = zlib.crc32(name.encode()) % 10
    for tenths, value in PRIORITY_MIX:
        if slot < tenths:
            return value
        slot -= tenths
    raise AssertionError("PRIORITY_MIX must cover ten tenths")


def _with_priority(job: Job) -> Job:
    value = priority_of(job.pods[0].pod_group or job.pods[0].name)
    return dataclasses.replace(job, pods=tuple(dataclasses.replace(p, priority=value) for p in job.pods))


def read_trace(path: Path, throughputs: Throughputs, gpu_type: str = "v100") -> tuple[Job, ...]:
    """The jobs of one VC file, in file order, with durations on `gpu_type`."""
    if gpu_type not in throughputs:
        raise ModelError("gpu_type", f"unknown GPU type {gpu_type!r}; known: {', '.join(sorted(throughputs))}")
    table = throughputs[gpu_type]
    return tuple(_job(line.split("\t"), path, n, table, gpu_type)
                 for n, line in enumerate(read_text(path).splitlines(), start=1))


def _job(fields: list[str], path: Path, line: int, table: Mapping[tuple[str, int], float],
         gpu_type: str) -> Job:
    where = f"{path}:{line}"
    if len(fields) != len(FIELDS):
        field = FIELDS[len(fields)] if len(fields) < len(FIELDS) else f"field {len(FIELDS) + 1}"
        raise ModelError(f"{where}: {field}", f"expected {len(FIELDS)} tab-separated fields, got {len(fields)}")
    job_type = fields[0]
    steps = _positive_int(fields[4], f"{where}: total_steps")
    arrival = _arrival(fields[5], f"{where}: arrival_time")
    gpus = _positive_int(fields[6], f"{where}: scale_factor")
    if gpus > MAX_JOB_GPUS:
        raise ModelError(f"{where}: scale_factor", f"{gpus} GPUs for one job; at most {MAX_JOB_GPUS}")
    rate, basis = _throughput(table, job_type, gpus, gpu_type, f"{where}: job_type")
    name = f"{path.stem}-{line:04d}"
    pods, group = _pods(name, path.stem, gpus, arrival)
    attrs = {"job_type": job_type, "scale_factor": str(gpus), "total_steps": str(steps), "gpu_type": gpu_type,
             "steps_per_s": repr(rate), "throughput_basis": basis}
    return Job(pods, arrival, steps / rate, group, f"{path.name}:{line}", MappingProxyType(attrs))


def _throughput(table: Mapping[tuple[str, int], float], job_type: str, gpus: int, gpu_type: str,
                where: str) -> tuple[float, str]:
    """Steps/s of `job_type` on `gpus` GPUs: measured, else scaled from the largest measured size below."""
    measured = [n for (t, n), rate in table.items() if t == job_type and n <= gpus and rate > 0]
    if not measured:
        raise ModelError(where, f"no {gpu_type} throughput for {job_type!r} on {gpus} or fewer GPUs")
    base = max(measured)
    rate = table[(job_type, base)] * gpus / base
    return rate, "measured" if base == gpus else f"scaled from {base} GPU(s)"


def _pods(name: str, vc: str, gpus: int, arrival: float) -> tuple[tuple[PodSpec, ...], PodGroup | None]:
    sizes = [min(GPUS_PER_NODE, gpus - start) for start in range(0, gpus, GPUS_PER_NODE)]
    group = PodGroup(name, len(sizes)) if len(sizes) > 1 else None
    pods = []
    for i, n in enumerate(sizes):
        pod_name = f"{name}-{i}" if group else name
        pods.append(PodSpec(PodUid(pod_name), pod_name, cpu_milli=n * POD_CPU_MILLI_PER_GPU,
                            mem_mib=n * POD_MEM_MIB_PER_GPU, gpu=whole_gpus(n, pod_name), queue=vc,
                            pod_group=group.key if group else None, created_s=arrival))
    return tuple(pods), group


def read_throughputs(path: Path) -> Throughputs:
    """Gavel's `simulation_throughputs.json`, keeping the stand-alone ("null") rates."""
    raw = _json(path)
    if not isinstance(raw, dict) or not all(isinstance(jobs, dict) for jobs in raw.values()):
        raise ModelError(f"{path}", "expected {\"<GPU type>\": {\"('<job type>', <GPUs>)\": {\"null\": <steps/s>}}}")
    result: dict[str, Mapping[tuple[str, int], float]] = {}
    for gpu_type, jobs in raw.items():
        table: dict[tuple[str, int], float] = {}
        for key, entry in jobs.items():
            match = _KEY.fullmatch(key)
            rate = entry.get("null") if isinstance(entry, dict) else None
            if match is None or not isinstance(rate, (int, float)):
                raise ModelError(f"{path}: {printable(gpu_type)}: {printable(key)}",
                                 "expected \"('<job type>', <GPUs>)\": {\"null\": <steps/s>, ...}")
            if len(match[2]) > MAX_DIGITS:
                raise ModelError(f"{path}: {printable(gpu_type)}: {printable(key[:40])}",
                                 f"more than {MAX_DIGITS} digits of GPUs")
            try:
                steps = float(rate)
            except OverflowError:
                steps = math.inf
            if not 0 <= steps < math.inf:
                raise ModelError(f"{path}: {printable(gpu_type)}: {printable(key[:40])}: null",
                                 f"steps/s must be a finite number, 0 or more, got {printable(str(rate)[:40])}")
            table[(match[1], int(match[2]))] = steps
        result[gpu_type] = MappingProxyType(table)
    return MappingProxyType(result)


def _json(path: Path) -> object:
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}:{exc.lineno}", f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise ModelError(f"{path}", "not valid JSON: nested too deeply") from None
    except ValueError:  # the only other ValueError: an integer of more than 4,300 digits
        raise ModelError(f"{path}", "not valid JSON: a number of more than 4,300 digits") from None


def read_cluster_spec(path: Path, index: int = 0) -> Mapping[str, int]:
    """GPUs per type from a Gavel cluster-spec file ({"philly": ["500:0:0"]}, v100:p100:k80)."""
    raw: object = _json(path)
    specs = list(raw.values())[0] if isinstance(raw, dict) and len(raw) == 1 else None
    if not isinstance(specs, list) or not 0 <= index < len(specs) or not isinstance(specs[index], str):
        raise ModelError(f"{path}", f"expected {{\"<trace>\": [\"v100:p100:k80\", ...]}} with entry {index}")
    spec: str = specs[index]
    shown = printable(spec)
    counts = spec.split(":")
    if len(counts) != len(GPU_TYPES):
        raise ModelError(f"{path}: {shown}", "expected three GPU counts v100:p100:k80")
    result = {t: _count(c, f"{path}: {shown}: {t}") for t, c in zip(GPU_TYPES, counts)}
    for t, n in result.items():
        if n > MAX_CLUSTER_GPUS:
            raise ModelError(f"{path}: {shown}: {t}", f"{n} GPUs; at most {MAX_CLUSTER_GPUS:,} of one type")
    return MappingProxyType(result)


def cluster_nodes(spec: Mapping[str, int]) -> tuple[NodeInfo, ...]:
    """8-GPU servers holding `spec[type]` GPUs of each type; the last server takes the remainder."""
    nodes: list[NodeInfo] = []
    for gpu_type, total in spec.items():
        model, mem_mib = GPU_MODELS[gpu_type]
        for i, start in enumerate(range(0, total, GPUS_PER_NODE)):
            name = f"{gpu_type}-node-{i:03d}"
            gpus = tuple(Gpu(GpuUuid(f"GPU-{name}-{g}"), model, mem_mib, g)
                         for g in range(min(GPUS_PER_NODE, total - start)))
            nodes.append(NodeInfo(NodeName(name), NODE_CPU_MILLI, NODE_MEM_MIB,
                                  labels=MappingProxyType({GPU_PRODUCT_LABEL: model}), gpus=gpus))
    return tuple(nodes)


def _positive_int(text: str, where: str) -> int:
    value = _count(text, where)
    if value == 0:
        raise ModelError(where, "must be at least 1, got 0")
    return value


def _count(text: str, where: str) -> int:
    if text.isascii() and text.isdigit():
        if len(text.lstrip("0")) > MAX_DIGITS:  # int64 in the model; Python converts no more than 4,300
            raise ModelError(where, f"{text[:20]!r}... has more than {MAX_DIGITS} digits")
        return int(text)
    raise ModelError(where, "is empty" if not text else f"expected a non-negative whole number, got {text!r}")


def _arrival(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ModelError(where, f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ModelError(where, f"must be a non-negative number of seconds, got {text!r}")
    return value
