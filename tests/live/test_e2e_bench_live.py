"""bench/e2e.py at a small scale on the real control plane: the figures docs/performance.md
reports come from these functions, so they are checked to measure what they say."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES, PODS = 30, 60
"""240 GPUs for about 141 asked: every pod fits."""


@pytest.fixture(scope="module")
def e2e() -> ModuleType:
    spec = importlib.util.spec_from_file_location("e2e_bench", ROOT / "bench/e2e.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["e2e_bench"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _one_bind_per_pod_and_the_machine_accounted(run: dict[str, object], *, scheduler: bool) -> None:
    requests = run["requests_per_bind"]
    assert isinstance(requests, dict)
    assert requests["POST pods binding"] == 1.0, requests
    cpu = run["cpu_ms_per_bind"]
    assert isinstance(cpu, dict)
    assert set(cpu) == {"idle", "kube-apiserver", "etcd", "kube-controller-manager", "other"} | (
        {"scheduler"} if scheduler else set())
    assert cpu["kube-apiserver"] > 0 and cpu["other"] >= 0, cpu
    if scheduler:
        assert cpu["scheduler"] > 0, cpu


def test_the_raw_loop_binds_every_pod_once_as_the_scheduler_with_its_watch(e2e: ModuleType, tmp_path: Path) -> None:
    run = e2e.raw_run(NODES, PODS, tmp_path, as_scheduler=True, pprof=tmp_path / "pprof")
    assert run["pods"] == PODS
    assert run["binds_per_s"] > 0
    assert sum(run["binds_per_s_by_second"]) == PODS
    _one_bind_per_pod_and_the_machine_accounted(run, scheduler=False)
    # the scheduler's watch ran beside the bench's and saw every bind: the server's load of a scheduler
    assert run["watches"] == 2 and run["seen_bound_by_each_watch"] == [PODS, PODS], run
    # kube-apiserver's own CPU profile of the binding: a gzipped pprof protobuf
    profile = (tmp_path / "pprof" / f"raw-as-scheduler-{NODES}.pprof").read_bytes()
    assert profile[:2] == b"\x1f\x8b" and len(profile) > 1000, profile[:40]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="--split-cpus needs two CPUs")
def test_split_cpus_puts_the_control_plane_on_one_cpu_and_the_bench_on_the_other(e2e: ModuleType,
                                                                                   tmp_path: Path) -> None:
    before = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
    e2e.SPLIT_CPUS = True
    try:
        c, _ = e2e.fresh_cluster(tmp_path, "split", 2)
        try:
            for name in (*e2e.COMPONENTS, "kwok"):
                pid = c.component(name).pid
                threads = [os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")]
                assert threads and all(cpus == {0} for cpus in threads), (name, threads)
            assert os.sched_getaffinity(0) == {1}
            # a process the bench starts now (the scheduler, the raw loop, the watch) inherits CPU 1
            child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                                   capture_output=True, text=True, check=True)
            assert child.stdout.strip() == "[1]"
        finally:
            c.stop()
    finally:
        e2e.SPLIT_CPUS = False
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                pass


def test_a_gpufleet_batch_run_binds_every_pod_and_counts_the_nodes_left_whole(e2e: ModuleType,
                                                                                tmp_path: Path) -> None:
    (tmp_path / "gpufleet-batch-30-u").mkdir()
    run = e2e.scheduler_run("gpufleet", "batch", NODES, PODS, 0.0, 50.0, tmp_path,
                            e2e.PROFILES / "default.yaml", [])
    assert run["bound"] == PODS
    assert sum(run["binds_per_s_by_second"]) == PODS
    # the pods' GPUs, packed: at least the nodes the rest of the GPUs would fill whole are free
    gpus = sum(int(p["spec"]["containers"][0]["resources"]["limits"][e2e.ann.GPU_RESOURCE])
               for p in e2e.pods(PODS, "gpufleet"))
    assert run["whole_nodes_free"] >= NODES - -(-gpus // 8) - 2
    _one_bind_per_pod_and_the_machine_accounted(run, scheduler=True)


def test_a_gpufleet_rate_run_times_every_pod_from_create_to_bound(e2e: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "gpufleet-rate-30-u").mkdir()
    run = e2e.scheduler_run("gpufleet", "rate", NODES, PODS, 0.0, 50.0, tmp_path,
                            e2e.PROFILES / "default.yaml", [])
    assert run["bound"] == PODS
    assert 0 < run["p50_ms"] <= run["p99_ms"]
    _one_bind_per_pod_and_the_machine_accounted(run, scheduler=True)
    assert run["requests_per_bind"]["POST pods"] == 1.0  # each pod created while the scheduler ran
