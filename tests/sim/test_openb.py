"""openb reader: handwritten rows (good and each kind of bad) and the real trace's totals."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.model import GPU_PRODUCT_LABEL, GpuKind, ModelError
from gpufleet.sim.traces import openb
from gpufleet.sim.workload import Job

WriteFile = Callable[[str, str], Path]

HEADER = ",".join(openb.POD_COLUMNS) + "\n"
MULTI_HEADER = ",".join(openb.MULTIGPU_COLUMNS) + "\n"
NODE_HEADER = ",".join(openb.NODE_COLUMNS) + "\n"


def one_job(write_file: WriteFile, row: str, header: str = HEADER) -> Job:
    (job,) = openb.read_pods(write_file("pods.csv", header + row + "\n"))
    return job


@pytest.mark.parametrize("row, kind, count, milli, models", [
    pytest.param("p,4000,8192,1,470,,LS,Running,10,70,10", GpuKind.FRACTION, 1, 470, set(),
                 id="a sharing task asks for a fraction of one GPU"),
    pytest.param("p,64000,65536,8,1000,,BE,Failed,10,70,12", GpuKind.WHOLE, 8, 1000, set(),
                 id="a whole-GPU task asks for num_gpu whole GPUs"),
    pytest.param("p,8000,30517,0,0,,BE,Succeeded,10,70,11", GpuKind.NONE, 0, 0, set(),
                 id="a CPU-only task asks for no GPU"),
    pytest.param("p,4000,8192,1,1000,V100M32|V100M32|G2,LS,Running,10,70,10", GpuKind.WHOLE, 1, 1000,
                 {"V100M32", "G2"}, id="gpu_spec with a repeated model becomes a set of allowed models"),
])
def test_pod_row_maps_to_a_gpu_request(write_file: WriteFile, row: str, kind: GpuKind, count: int,
                                       milli: int, models: set[str]) -> None:
    job = one_job(write_file, row)
    (pod,) = job.pods
    assert (pod.gpu.kind, pod.gpu.count, pod.gpu.milli, set(pod.gpu_models)) == (kind, count, milli, models)
    assert (pod.uid, pod.cpu_milli, job.arrival_s, job.duration_s, pod.created_s) == ("p", int(row.split(",")[1]),
                                                                                      10.0, 60.0, 10.0)
    assert job.source == "pods.csv:2"


def test_trace_columns_are_kept_in_attrs(write_file: WriteFile) -> None:
    job = one_job(write_file, "p,4000,8192,1,470,,Burstable,Pending,10,70,")
    assert dict(job.attrs) == {"qos": "Burstable", "pod_phase": "Pending", "creation_time": "10",
                               "deletion_time": "70", "scheduled_time": ""}


def test_a_task_without_deletion_time_never_ends(write_file: WriteFile) -> None:
    assert one_job(write_file, "p,4000,8192,1,470,,LS,Running,10,,10").duration_s is None


def test_multigpu_rows_arrive_at_zero_and_never_end(write_file: WriteFile) -> None:
    job = one_job(write_file, "p,32000,65536,4,1000", MULTI_HEADER)
    assert (job.arrival_s, job.duration_s, dict(job.attrs), job.pods[0].gpu.count) == (0.0, None, {}, 4)


def test_jobs_are_ordered_by_arrival_ties_in_file_order(write_file: WriteFile) -> None:
    rows = ["c,1000,1,0,0,,LS,Running,50,60,50", "a,1000,1,0,0,,LS,Running,5,60,5",
            "b,1000,1,0,0,,LS,Running,50,60,50"]
    jobs = openb.read_pods(write_file("pods.csv", HEADER + "\n".join(rows) + "\n"))
    assert [j.pods[0].name for j in jobs] == ["a", "c", "b"]


BAD_ROWS = [
    ("p,4000,8192,2,500,,LS,Running,10,70,10", "gpu_milli", "exactly one GPU", "a share of two GPUs"),
    ("p,-1,8192,0,0,,LS,Running,10,70,10", "cpu_milli", "'-1'", "a negative CPU request"),
    ("p,4000,1.5,0,0,,LS,Running,10,70,10", "memory_mib", "'1.5'", "a non-integer memory request"),
    ("p,4000,8192,x,1000,,LS,Running,10,70,10", "num_gpu", "'x'", "a GPU count that is not a number"),
    ("p,4000,8192,1,1200,,LS,Running,10,70,10", "gpu_milli", "1..1000", "gpu_milli above one GPU"),
    ("p,4000,8192,1,0,,LS,Running,10,70,10", "gpu_milli", "1..1000", "a GPU task with gpu_milli 0"),
    ("p,4000,8192,0,300,,LS,Running,10,70,10", "gpu_milli", "must be 0", "a CPU-only task with a GPU share"),
    ("p,4000,8192,0,0,T4,LS,Running,10,70,10", "gpu_spec", "no GPU", "a CPU-only task with gpu_spec"),
    ("p,4000,8192,1,1000,T4|,LS,Running,10,70,10", "gpu_spec", "empty model", "an empty model in gpu_spec"),
    ("p,4000,8192,1,1000,,XX,Running,10,70,10", "qos", "unknown QoS", "an unknown QoS class"),
    ("p,4000,8192,1,1000,,LS,Lost,10,70,10", "pod_phase", "unknown phase", "an unknown pod phase"),
    ("p,4000,8192,1,1000,,LS,Running,,70,10", "creation_time", "is empty", "an empty creation_time"),
    ("p,4000,8192,1,1000,,LS,Running,80,70,10", "deletion_time", "before creation", "deletion before creation"),
    ("p,4000,8192,1,1000,,LS,Running,10,70,", "scheduled_time", "only Pending", "a running task never scheduled"),
    ("p,4000,8192,1,1000,,LS,Running,10,70,1e3", "scheduled_time", "'1e3'", "a time in exponent notation"),
    ("p,4000,8192,1,1000,,LS,Running,10,70", "scheduled_time", "missing", "a row missing its last column"),
    ("p,4000,8192,1,1000,,LS,Running,10,70,10,x", "field 12", "extra", "a row with an extra column"),
    (",4000,8192,1,1000,,LS,Running,10,70,10", "name", "is empty", "a row without a task name"),
]


@pytest.mark.parametrize("row, field, problem", [pytest.param(r, f, p, id=f"{i} is an error naming line and field")
                                                 for r, f, p, i in BAD_ROWS])
def test_malformed_pod_row_names_file_line_and_field(write_file: WriteFile, row: str, field: str,
                                                     problem: str) -> None:
    path = write_file("pods.csv", HEADER + "ok,1000,1,0,0,,LS,Running,1,2,1\n" + row + "\n")
    with pytest.raises(ModelError) as caught:
        openb.read_pods(path)
    assert caught.value.where == f"{path}:3: {field}"
    assert problem in caught.value.problem


def test_duplicate_task_name_is_an_error(write_file: WriteFile) -> None:
    path = write_file("pods.csv", MULTI_HEADER + "p,1,1,0,0\np,1,1,0,0\n")
    with pytest.raises(ModelError, match=r"pods.csv:3: name: duplicate name 'p'"):
        openb.read_pods(path)


@pytest.mark.parametrize("header", [
    pytest.param("name,cpu,memory_mib,num_gpu,gpu_milli\n", id="a renamed column is an unknown header"),
    pytest.param("", id="an empty file has no header"),
])
def test_unknown_header_is_an_error(write_file: WriteFile, header: str) -> None:
    path = write_file("pods.csv", header)
    with pytest.raises(ModelError, match=r"pods.csv:1: header: unknown header"):
        openb.read_pods(path)


def test_gpu_node_gets_product_label_uuids_and_memory(write_file: WriteFile) -> None:
    path = write_file("nodes.csv", NODE_HEADER + "n1,96000,393216,2,V100M32\nn2,32000,65536,0,\n")
    gpu_node, cpu_node = openb.read_nodes(path, max_pods=1001)
    assert gpu_node.labels == {GPU_PRODUCT_LABEL: "V100M32"} and gpu_node.max_pods == 1001
    assert [(g.uuid, g.index, g.mem_mib) for g in gpu_node.gpus] == [("GPU-n1-0", 0, 32768), ("GPU-n1-1", 1, 32768)]
    assert (cpu_node.gpus, dict(cpu_node.labels), cpu_node.cpu_milli) == ((), {}, 32000)


def test_undisclosed_models_have_unmodelled_gpu_memory(write_file: WriteFile) -> None:
    (node,) = openb.read_nodes(write_file("nodes.csv", NODE_HEADER + "n1,96000,393216,8,G2\n"))
    assert {g.mem_mib for g in node.gpus} == {0} and node.max_pods == 110


@pytest.mark.parametrize("row, field, problem", [
    pytest.param("n1,96000,393216,8,H20", "model", "unknown GPU model", id="an unknown GPU model is an error"),
    pytest.param("n1,96000,393216,0,T4", "model", "no GPUs", id="a CPU node naming a model is an error"),
    pytest.param("n1,96000,393216,two,T4", "gpu", "'two'", id="a GPU count that is not a number is an error"),
    pytest.param("n1,-96000,393216,2,T4", "cpu_milli", "'-96000'", id="a negative CPU capacity is an error"),
])
def test_malformed_node_row_names_file_line_and_field(write_file: WriteFile, row: str, field: str,
                                                      problem: str) -> None:
    path = write_file("nodes.csv", NODE_HEADER + row + "\n")
    with pytest.raises(ModelError) as caught:
        openb.read_nodes(path)
    assert caught.value.where == f"{path}:2: {field}" and problem in caught.value.problem


def test_unknown_variant_lists_the_ones_found(tmp_path: Path) -> None:
    (tmp_path / openb.SUBDIR).mkdir()
    (tmp_path / openb.SUBDIR / "openb_pod_list_default.csv").write_text(HEADER)
    with pytest.raises(FileNotFoundError, match="variants found: default"):
        openb.variant_files(tmp_path, "gpushare7")


# --- the real trace (skipped without GPUFLEET_TRACE_DIR) -------------------------------------

def task_class(job: Job) -> str:
    gpu = job.pods[0].gpu
    return {GpuKind.NONE: "cpu", GpuKind.FRACTION: "share"}.get(gpu.kind, f"{gpu.count}gpu")


def test_default_trace_has_the_published_totals(trace_root: Path) -> None:
    w = openb.load(*openb.variant_files(trace_root))
    assert (len(w.nodes), w.gpu_capacity_milli, len(w.jobs)) == (1213, 6_212_000, 8152)
    assert sum(n.cpu_milli for n in w.nodes) == 107_018_000
    assert sum(n.mem_mib for n in w.nodes) == 492_020 * 1024
    assert Counter(task_class(j) for j in w.jobs) == {"cpu": 1088, "share": 3078, "1gpu": 3911,
                                                      "2gpu": 16, "4gpu": 15, "8gpu": 44}
    assert sum(j.gpu_milli for j in w.jobs) == 6_086_800
    assert [j.arrival_s for j in w.jobs] == sorted(j.arrival_s for j in w.jobs)
    assert Counter(n.gpu_model for n in w.nodes if n.gpus) == {"G2": 549, "T4": 404, "P100": 134, "V100M16": 55,
                                                               "G3": 39, "V100M32": 30, "A10": 2}


@pytest.mark.parametrize("variant, tasks, gpu_milli", [
    pytest.param("multigpu20", 8324, 7_086_800, id="multigpu20 loads from its 5-column file"),
    pytest.param("multigpu30", 8508, None, id="multigpu30 loads from its 5-column file"),
    pytest.param("multigpu40", 8746, None, id="multigpu40 loads from its 5-column file"),
    pytest.param("multigpu50", 9061, 11_358_800, id="multigpu50 loads from its 5-column file"),
    pytest.param("gpushare20", 8152, 6_531_500, id="gpushare20 keeps 8152 tasks"),
    pytest.param("gpushare100", 8152, 3_952_670, id="gpushare100 keeps 8152 tasks"),
])
def test_variants_load(trace_root: Path, variant: str, tasks: int, gpu_milli: int | None) -> None:
    w = openb.load(*openb.variant_files(trace_root, variant))
    assert len(w.jobs) == tasks and w.name == f"openb-{variant}"
    assert gpu_milli is None or sum(j.gpu_milli for j in w.jobs) == gpu_milli


def test_all_node_list_adds_cpu_only_nodes(trace_root: Path) -> None:
    nodes = openb.read_nodes(trace_root / openb.SUBDIR / "openb_node_list_all_node.csv")
    assert (len(nodes), sum(1 for n in nodes if not n.gpus)) == (1523, 310)
