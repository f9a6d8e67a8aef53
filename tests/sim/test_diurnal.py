"""diurnal.py: a seeded day of openb-mix load with a daily peak, gangs from multi-GPU tasks, no nodes."""

from __future__ import annotations

import random
from pathlib import Path
from types import MappingProxyType

import pytest

from gpufleet.model import GpuKind, ModelError, PodSpec
from gpufleet.sim.diurnal import DiurnalSettings, arrivals, diurnal_workload, task_pool
from gpufleet.sim.traces import openb
from gpufleet.sim.workload import Job
from gpufleet.testing import make_pod


def task(pod: PodSpec, duration: float = 600.0, phase: str = "Running") -> Job:
    return Job((pod,), 0.0, duration, attrs=MappingProxyType({"pod_phase": phase}))


POOL = [
    task(make_pod("whole").cpu(8000).mem_mib(16_384).gpus(1).build(), 900.0),
    task(make_pod("frac").cpu(4000).mem_mib(8192).fraction(460).build(), 5.0),
    task(make_pod("multi").cpu(64_000).mem_mib(262_144).gpus(8).build(), 100_000.0),
    task(make_pod("cpu").cpu(12_000).mem_mib(57_344).build()),
    task(make_pod("never-ran").cpu(1000).gpus(1).build(), 50.0, phase="Pending"),
]


def test_the_pool_keeps_gpu_tasks_that_ran() -> None:
    assert [j.pods[0].name for j in task_pool(POOL)] == ["whole", "frac", "multi"]
    assert [j.pods[0].name for j in task_pool(POOL, cpu_tasks=True)] == ["whole", "frac", "multi", "cpu"]
    with pytest.raises(ModelError, match="task pool is empty"):
        task_pool(POOL[3:])


def test_the_same_seed_gives_the_same_day_and_another_seed_another() -> None:
    settings = DiurnalSettings(jobs_per_day=300)
    a, b, c = (diurnal_workload(POOL, s, settings) for s in (1, 1, 2))
    assert a == b
    assert [j.arrival_s for j in a.jobs] != [j.arrival_s for j in c.jobs]


def test_the_day_starts_with_no_nodes_and_jobs_in_arrival_order_within_the_day() -> None:
    w = diurnal_workload(POOL, 0, DiurnalSettings(jobs_per_day=300))
    assert w.nodes == ()
    times = [j.arrival_s for j in w.jobs]
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 86_400
    assert all(p.created_s == j.arrival_s for j in w.jobs for p in j.pods)


def test_arrivals_peak_at_the_peak_hour_with_the_given_ratio() -> None:
    s = DiurnalSettings(jobs_per_day=40_000, peak_to_trough=4.0, peak_hour=14.0)
    times = arrivals(s, random.Random(0))
    assert abs(len(times) - 40_000) < 5 * 200  # Poisson: sd = sqrt(40,000) = 200
    near_peak = sum(1 for t in times if 13 * 3600 <= t < 15 * 3600)
    near_trough = sum(1 for t in times if 1 * 3600 <= t < 3 * 3600)
    # rate(14:00) / rate(02:00) = 4; two-hour windows average a little less sharply (about 3.9)
    assert 3.3 < near_peak / near_trough < 4.5
    flat = DiurnalSettings(jobs_per_day=40_000, peak_to_trough=1.0)
    assert flat.rate(0.0) == flat.rate(14 * 3600)


def test_durations_are_the_tasks_own_clipped() -> None:
    w = diurnal_workload(POOL, 3, DiurnalSettings(jobs_per_day=400, min_duration_s=30, max_duration_s=3600))
    by_task = {j.attrs["openb_task"]: j.duration_s for j in w.jobs}
    assert by_task == {"whole": 900.0, "frac": 30.0, "multi": 3600.0}


def test_multi_gpu_tasks_become_gangs_of_the_given_sizes() -> None:
    w = diurnal_workload(POOL, 4, DiurnalSettings(jobs_per_day=400, gang_share=1.0, gang_sizes=(2, 4)))
    multi = [j for j in w.jobs if j.attrs["openb_task"] == "multi"]
    assert multi and all(j.group is not None and len(j.pods) == j.group.min_member in (2, 4) for j in multi)
    assert {len(j.pods) for j in multi} == {2, 4}
    for j in multi:
        assert j.group is not None and {p.pod_group for p in j.pods} == {j.group.key}
        assert all(p.gpu.kind is GpuKind.WHOLE and p.gpu.count == 8 for p in j.pods)
    assert all(j.group is None and len(j.pods) == 1 for j in w.jobs if j.attrs["openb_task"] != "multi")
    uids = [p.uid for j in w.jobs for p in j.pods]
    assert len(uids) == len(set(uids))
    none = diurnal_workload(POOL, 4, DiurnalSettings(jobs_per_day=400, gang_share=0.0))
    assert all(j.group is None for j in none.jobs)


def test_fractions_keep_their_share_and_model_constraints_are_dropped() -> None:
    constrained = task(make_pod("v100").cpu(1000).fraction(300).models("V100M16").build())
    w = diurnal_workload([constrained], 0, DiurnalSettings(jobs_per_day=50))
    assert all(p.gpu.kind is GpuKind.FRACTION and p.gpu.milli == 300 and not p.gpu_models
               for j in w.jobs for p in j.pods)


@pytest.mark.parametrize("bad", [dict(jobs_per_day=0), dict(peak_to_trough=0.5), dict(peak_hour=24),
                                 dict(max_duration_s=10, min_duration_s=20), dict(gang_share=1.5),
                                 dict(gang_sizes=(1,))],
                         ids=["no jobs", "peak below trough", "hour 24", "max below min", "share above 1",
                              "gang of one"])
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ModelError, match="diurnal settings"):
        DiurnalSettings(**bad)  # type: ignore[arg-type]


def test_the_openb_pool_has_the_published_mix(trace_root: Path) -> None:
    jobs = openb.load(*openb.variant_files(trace_root, "default")).jobs
    pool = task_pool(jobs)
    assert len(pool) == 6203
    kinds = {k: sum(1 for j in pool if j.pods[0].gpu.kind is k) for k in (GpuKind.WHOLE, GpuKind.FRACTION)}
    assert kinds == {GpuKind.WHOLE: 3630, GpuKind.FRACTION: 2573}
