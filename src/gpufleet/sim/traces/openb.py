"""The Alibaba GPU 2023 "openb" trace of the FGD paper: node lists and pod lists.

Column meanings are in `docs/traces.md` and `../shared/traces/PROVENANCE.md`. Decisions:

- One pass with the `csv` module (no pandas): the default pod list, 8152 rows, loads in
  well under half a second, which matters because every simulation run starts here.
- One task is one pod and one `Job`. The GPU columns map onto the three request kinds the
  FGD simulator knows, and nothing else: `num_gpu` 0 is no GPU (with `gpu_milli` 0);
  `gpu_milli` 1000 is `num_gpu` whole GPUs; `gpu_milli` 1..999 is a share of exactly one
  GPU. Any other combination (a share of two GPUs, a negative count) has no meaning in the
  experiment, so it is an error naming file, line and field rather than a guess.
- `gpu_spec` ("V100M16|V100M32", models may repeat) is the set of allowed GPU models.
- `arrival_s` = creation_time and `duration_s` = deletion_time - creation_time, for the
  time-driven replay; the FGD packing experiment ignores both. For a `Pending` row the
  duration is how long the task waited before it was deleted. The 5-column `multigpu*`
  files carry no times: their jobs arrive at 0 and never end.
- GPU memory comes from `GPU_MEMORY_MIB`. G2 and G3 are models Alibaba did not disclose;
  their GPU memory is recorded as 0 (not modelled), which is harmless because the FGD
  experiment, the only user of this trace, ignores GPU memory.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from gpufleet.model import (GPU_PRODUCT_LABEL, NO_GPU, Gpu, GpuKind, GpuRequest, GpuUuid, ModelError,
                            NodeInfo, NodeName, PodSpec, PodUid, gpu_fraction, read_text, whole_gpus)
from gpufleet.sim.workload import Job, Workload

SUBDIR = "alibaba-gpu-v2023-openb"
GPU_NODE_LIST = "openb_node_list_gpu_node.csv"
"""The 1213-node, 6212-GPU cluster of every FGD run (the all-node list adds 310 CPU nodes)."""

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
               "pod_phase", "creation_time", "deletion_time", "scheduled_time")
MULTIGPU_COLUMNS = POD_COLUMNS[:5]

GPU_MEMORY_MIB: Mapping[str, int] = MappingProxyType({
    "T4": 16 * 1024, "P100": 16 * 1024, "V100M16": 16 * 1024, "V100M32": 32 * 1024,
    "A10": 24 * 1024, "G2": 0, "G3": 0,
})
"""Memory per GPU model (vendor data sheets); 0 = undisclosed model, GPU memory not modelled."""

MAX_DIGITS = 18
MAX_GPUS_PER_NODE = 64
"""The openb nodes hold at most 8; a bigger `gpu` is a typo, not a node of a billion devices to build."""

QOS_CLASSES = frozenset({"LS", "BE", "Burstable", "Guaranteed"})
POD_PHASES = frozenset({"Running", "Succeeded", "Failed", "Pending"})


def variant_files(root: Path, variant: str = "default") -> tuple[Path, Path]:
    """(node file, pod file) of a pod-list variant ("default", "gpushare40", "multigpu20", ...)."""
    folder = root / SUBDIR
    pods = folder / f"openb_pod_list_{variant}.csv"
    if not pods.is_file():
        known = sorted(p.stem.removeprefix("openb_pod_list_") for p in folder.glob("openb_pod_list_*.csv"))
        raise FileNotFoundError(f"no openb pod list {str(pods)!r}; variants found: {', '.join(known) or 'none'}")
    return folder / GPU_NODE_LIST, pods


def load(node_file: Path, pod_file: Path, *, max_pods: int = 110, name: str | None = None) -> Workload:
    """The cluster of `node_file` with the jobs of `pod_file`, ordered by arrival."""
    return Workload(name or pod_file.stem.replace("openb_pod_list_", "openb-"),
                    read_nodes(node_file, max_pods=max_pods), read_pods(pod_file),
                    f"openb trace: nodes {node_file.name}, pods {pod_file.name}")


def read_nodes(path: Path, *, max_pods: int = 110) -> tuple[NodeInfo, ...]:
    """Nodes of an openb node list. FGD's simulator allows 1001 pods a node; pass that to match it."""
    nodes: list[NodeInfo] = []
    seen: set[str] = set()
    for line, row in _rows(path, (NODE_COLUMNS,)):
        where = f"{path}:{line}"
        name = _name(row[0], seen, f"{where}: sn")
        count = _count(row[3], f"{where}: gpu")
        if count > MAX_GPUS_PER_NODE:
            raise ModelError(f"{where}: gpu", f"{count} GPUs on one node; at most {MAX_GPUS_PER_NODE}")
        nodes.append(NodeInfo(NodeName(name), _count(row[1], f"{where}: cpu_milli"),
                              _count(row[2], f"{where}: memory_mib"), max_pods,
                              MappingProxyType({GPU_PRODUCT_LABEL: row[4]} if count else {}),
                              gpus=_gpus(name, count, row[4], f"{where}: model")))
    return tuple(nodes)


def read_pods(path: Path) -> tuple[Job, ...]:
    """Jobs of an 11-column or 5-column (multigpu) pod list, ordered by arrival, ties in file order."""
    jobs: list[Job] = []
    seen: set[str] = set()
    for line, row in _rows(path, (POD_COLUMNS, MULTIGPU_COLUMNS)):
        jobs.append(_job(row, f"{path}:{line}", f"{path.name}:{line}", seen))
    jobs.sort(key=lambda job: job.arrival_s)
    return tuple(jobs)


def _job(row: list[str], where: str, source: str, seen: set[str]) -> Job:
    name = _name(row[0], seen, f"{where}: name")
    gpu = _gpu_request(_count(row[3], f"{where}: num_gpu"), _count(row[4], f"{where}: gpu_milli"), where)
    models = _models(row[5], gpu, f"{where}: gpu_spec") if len(row) > 5 else frozenset()
    arrival_s, duration_s, attrs = _times(row, where) if len(row) > 5 else (0.0, None, {})
    pod = PodSpec(PodUid(name), name, cpu_milli=_count(row[1], f"{where}: cpu_milli"),
                  mem_mib=_count(row[2], f"{where}: memory_mib"), gpu=gpu, gpu_models=models,
                  created_s=arrival_s)
    return Job((pod,), arrival_s, duration_s, source=source, attrs=MappingProxyType(attrs))


def _gpu_request(num_gpu: int, gpu_milli: int, where: str) -> GpuRequest:
    if num_gpu == 0:
        if gpu_milli != 0:
            raise ModelError(f"{where}: gpu_milli", f"must be 0 when num_gpu is 0, got {gpu_milli}")
        return NO_GPU
    if gpu_milli == 1000:
        return whole_gpus(num_gpu, where)
    if not 0 < gpu_milli < 1000:
        raise ModelError(f"{where}: gpu_milli", f"must be 1..1000 for a GPU task, got {gpu_milli}")
    if num_gpu != 1:
        raise ModelError(f"{where}: gpu_milli", f"a share of {gpu_milli} milli applies to exactly one "
                                                f"GPU, but num_gpu is {num_gpu}")
    return gpu_fraction(gpu_milli, where=where)


def _models(text: str, gpu: GpuRequest, where: str) -> frozenset[str]:
    if not text:
        return frozenset()
    if gpu.kind is GpuKind.NONE:
        raise ModelError(where, f"{text!r} restricts GPU models of a task that requests no GPU")
    models = text.split("|")
    if not all(models):
        raise ModelError(where, f"empty model name in {text!r}")
    unknown = sorted(set(models) - set(GPU_MEMORY_MIB))
    if unknown:  # a typo would otherwise leave the task unplaceable without a word
        raise ModelError(where, f"unknown GPU model {unknown[0]!r}; known: {', '.join(sorted(GPU_MEMORY_MIB))}")
    return frozenset(models)


def _times(row: list[str], where: str) -> tuple[float, float | None, dict[str, str]]:
    qos, phase, created, deleted, scheduled = row[6:11]
    if qos not in QOS_CLASSES:
        raise ModelError(f"{where}: qos", f"unknown QoS class {qos!r}; known: {', '.join(sorted(QOS_CLASSES))}")
    if phase not in POD_PHASES:
        raise ModelError(f"{where}: pod_phase", f"unknown phase {phase!r}; known: {', '.join(sorted(POD_PHASES))}")
    arrival = _count(created, f"{where}: creation_time")
    duration: float | None = None
    if deleted:
        end = _count(deleted, f"{where}: deletion_time")
        if end < arrival:
            raise ModelError(f"{where}: deletion_time", f"{end} is before creation_time {arrival}")
        duration = float(end - arrival)
    if scheduled:
        _count(scheduled, f"{where}: scheduled_time")
    elif phase != "Pending":
        raise ModelError(f"{where}: scheduled_time", f"is empty, but only Pending tasks lack it (phase {phase})")
    attrs = {"qos": qos, "pod_phase": phase, "creation_time": created, "deletion_time": deleted,
             "scheduled_time": scheduled}
    return float(arrival), duration, attrs


def _gpus(node: str, count: int, model: str, where: str) -> tuple[Gpu, ...]:
    if count == 0:
        if model:
            raise ModelError(where, f"node has no GPUs but names model {model!r}")
        return ()
    if model not in GPU_MEMORY_MIB:
        raise ModelError(where, f"unknown GPU model {model!r}; known: {', '.join(sorted(GPU_MEMORY_MIB))}")
    return tuple(Gpu(GpuUuid(f"GPU-{node}-{i}"), model, GPU_MEMORY_MIB[model], i) for i in range(count))


def _rows(path: Path, headers: tuple[tuple[str, ...], ...]) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every data row, after checking the header and each row's width."""
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if header not in headers:
            expected = " or ".join(",".join(h) for h in headers)
            raise ModelError(f"{path}:1: header", f"unknown header {','.join(header)!r}; expected {expected}")
        rows: list[tuple[int, list[str]]] = []
        for row in reader:
            if len(row) != len(header):
                _wrong_width(row, header, f"{path}:{reader.line_num}")
            rows.append((reader.line_num, row))
    return rows


def _wrong_width(row: list[str], header: tuple[str, ...], where: str) -> None:
    if len(row) < len(header):
        raise ModelError(f"{where}: {header[len(row)]}", f"missing (the row has {len(row)} of {len(header)} fields)")
    raise ModelError(f"{where}: field {len(header) + 1}", f"unexpected extra field(s) {row[len(header):]!r}")


def _count(text: str, where: str) -> int:
    """A non-negative integer column (str.isdigit alone would accept '²'), at most 18 digits: the
    model's arrays are int64, and Python refuses to convert more than 4,300 digits at all."""
    if text.isascii() and text.isdigit():
        if len(text.lstrip("0")) > MAX_DIGITS:
            raise ModelError(where, f"{text[:20]!r}... has more than {MAX_DIGITS} digits")
        return int(text)
    raise ModelError(where, "is empty" if not text else f"expected a non-negative whole number, got {text!r}")


def _name(text: str, seen: set[str], where: str) -> str:
    if not text:
        raise ModelError(where, "is empty")
    if text in seen:
        raise ModelError(where, f"duplicate name {text!r}")
    seen.add(text)
    return text


QOS_PRIORITY = {"LS": 1000, "Guaranteed": 1000, "Burstable": 100, "BE": 0}
"""openb QoS classes as PriorityClass values: latency-sensitive and Guaranteed above Burstable above best-effort."""


def with_qos_priorities(workload: Workload) -> Workload:
    """The workload with each pod's priority taken from its task's QoS class."""
    jobs = tuple(dataclasses.replace(j, pods=tuple(dataclasses.replace(p, priority=QOS_PRIORITY[j.attrs["qos"]])
                                                   for p in j.pods)) for j in workload.jobs)
    return dataclasses.replace(workload, jobs=jobs, description=workload.description + ", QoS classes as priorities")
