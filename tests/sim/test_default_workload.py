"""The built-in default: the published openb mix at any scale, deterministic for a seed."""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.model import GPU_PRODUCT_LABEL, GpuKind, ModelError
from gpufleet.sim import default_workload as dw
from gpufleet.sim.traces import openb
from gpufleet.sim.workload import Workload


def classes(w: Workload) -> Counter[str]:
    return Counter(j.attrs["task_class"] for j in w.jobs)


def node_shapes(w: Workload) -> Counter[tuple[str | None, int, int, int]]:
    return Counter((n.gpu_model, len(n.gpus), n.cpu_milli, n.mem_mib) for n in w.nodes)


@pytest.fixture(scope="module")
def full() -> Workload:
    return dw.default_workload()


def test_scale_one_has_the_published_cluster_and_task_classes(full: Workload) -> None:
    assert (len(full.nodes), full.gpu_capacity_milli, len(full.jobs)) == (1213, 6_212_000, 8152)
    assert sum(n.cpu_milli for n in full.nodes) == 107_018_000
    assert sum(n.mem_mib for n in full.nodes) == 492_020 * 1024
    assert classes(full) == dw.CLASS_COUNTS
    assert all(n.labels[GPU_PRODUCT_LABEL] == n.gpu_model for n in full.nodes)
    assert len({p.uid for j in full.jobs for p in j.pods}) == 8152


def test_scale_one_asks_for_the_published_gpu_total_within_one_percent(full: Workload) -> None:
    assert sum(j.gpu_milli for j in full.jobs) == pytest.approx(6_086_800, rel=0.01)


@pytest.mark.parametrize("scale, nodes, tasks", [
    pytest.param(0.5, 606, 4076, id="half scale halves nodes and tasks"),
    pytest.param(0.1, 121, 815, id="a tenth keeps every large class in proportion"),
    pytest.param(0.01, 12, 82, id="a hundredth still has nodes and the three big classes"),
])
def test_smaller_scales_keep_the_mix(scale: float, nodes: int, tasks: int) -> None:
    w = dw.default_workload(scale)
    assert (len(w.nodes), len(w.jobs)) == (nodes, tasks)
    for task_class, count in dw.CLASS_COUNTS.items():
        assert abs(classes(w)[task_class] - count * tasks / dw.OPENB_TASKS) < 1
    assert sum(j.gpu_milli for j in w.jobs) / w.gpu_capacity_milli == pytest.approx(0.98, abs=0.1)


def test_same_seed_gives_the_same_workload_and_another_seed_another_order() -> None:
    a, b, c = dw.default_workload(0.05, 7), dw.default_workload(0.05, 7), dw.default_workload(0.05, 8)
    assert a == b
    assert classes(a) == classes(c) and a.nodes == c.nodes
    assert [j.pods[0].cpu_milli for j in a.jobs] != [j.pods[0].cpu_milli for j in c.jobs]


def test_arrivals_and_durations_support_a_time_driven_replay(full: Workload) -> None:
    arrivals = [j.arrival_s for j in full.jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert all(j.duration_s is not None and j.duration_s >= 1 for j in full.jobs)
    durations = [j.duration_s or 0.0 for j in full.jobs]
    assert statistics.median(durations) == pytest.approx(math.exp(dw.DURATION_LOG_MU), rel=0.1)
    offered = sum(j.gpu_milli / 1000 * d for j, d in zip(full.jobs, durations)) / arrivals[-1] / 6212
    assert offered == pytest.approx(0.9, rel=0.25)


def test_a_higher_load_packs_the_same_tasks_into_less_time() -> None:
    low, high = dw.default_workload(0.05, 1, load=0.5), dw.default_workload(0.05, 1, load=2.0)
    assert high.jobs[-1].arrival_s == pytest.approx(low.jobs[-1].arrival_s / 4)
    assert [j.duration_s for j in low.jobs] == [j.duration_s for j in high.jobs]


@pytest.mark.parametrize("scale, load", [
    pytest.param(0.0, 0.9, id="a zero scale is an error"),
    pytest.param(-1.0, 0.9, id="a negative scale is an error"),
    pytest.param(float("nan"), 0.9, id="a NaN scale is an error"),
    pytest.param(0.0001, 0.9, id="a scale too small for one node is an error"),
    pytest.param(1.0, 0.0, id="a zero load is an error"),
])
def test_invalid_parameters_are_errors(scale: float, load: float) -> None:
    with pytest.raises(ModelError, match="default workload"):
        dw.default_workload(scale, load=load)


def test_apportion_keeps_the_total_and_breaks_ties_to_the_earlier_entry() -> None:
    assert dw.apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert dw.apportion(0, [5, 5]) == [0, 0]
    assert sum(dw.apportion(815, list(dw.CLASS_COUNTS.values()))) == 815


# --- against the real trace (skipped without GPUFLEET_TRACE_DIR) -----------------------------

def trace_rows(root: Path) -> list[dict[str, str]]:
    _, pods = openb.variant_files(root)
    with pods.open(newline="") as f:
        return list(csv.DictReader(f))


def trace_class(row: dict[str, str]) -> str:
    n, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    return "cpu" if n == 0 else "share" if milli < 1000 else f"{n}gpu"


def test_embedded_specs_are_the_trace_typical_specs_per_class(trace_root: Path) -> None:
    by_class: dict[str, Counter[tuple[int, int, int]]] = {}
    for row in trace_rows(trace_root):
        spec = (int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu_milli"]))
        by_class.setdefault(trace_class(row), Counter())[spec] += 1
    for task_class, counts in by_class.items():
        kept, covered = [], 0
        for spec, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if covered >= 0.95 * sum(counts.values()):
                break
            kept.append((*spec, n))
            covered += n
        assert tuple(kept) == dw.TASK_SPECS[task_class], task_class
    assert {c: sum(k.values()) for c, k in by_class.items()} == dw.CLASS_COUNTS


def test_embedded_duration_fit_is_the_trace_log_normal(trace_root: Path) -> None:
    logs = [math.log(int(r["deletion_time"]) - int(r["creation_time"])) for r in trace_rows(trace_root)
            if int(r["deletion_time"]) > int(r["creation_time"])]
    assert (len(logs), round(statistics.fmean(logs), 3), round(statistics.pstdev(logs), 3)) == (
        8151, dw.DURATION_LOG_MU, dw.DURATION_LOG_SIGMA)


def test_generated_mix_matches_the_real_trace(trace_root: Path, full: Workload) -> None:
    real = openb.load(*openb.variant_files(trace_root))
    assert node_shapes(full) == node_shapes(real)
    assert classes(full) == Counter(trace_class(r) for r in trace_rows(trace_root))

    def shares(w: Workload) -> list[int]:
        counts = Counter(j.pods[0].gpu.milli for j in w.jobs if j.pods[0].gpu.kind is GpuKind.FRACTION)
        return [milli for milli, _ in counts.most_common(5)]

    assert shares(full) == shares(real) == [810, 470, 320, 650, 230]
    for total in (lambda j: j.gpu_milli, lambda j: j.pods[0].cpu_milli, lambda j: j.pods[0].mem_mib):
        assert sum(map(total, full.jobs)) == pytest.approx(sum(map(total, real.jobs)), rel=0.01)
