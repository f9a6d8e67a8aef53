"""The replay's defragmentation pass (sim/defrag_pass.py) and `gpufleet experiment defrag`.

Hand-built replays pin what a move does to the jobs (the big job starts, the moved ones
restart where they fit and lose their work since the last checkpoint; protected pods stay),
a small synthetic version of the experiment runs without a trace, and the real one, short,
runs on openb when GPUFLEET_TRACE_DIR is set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.core.defrag import DefragSettings
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import NodeInfo, PodSpec
from gpufleet.sim import defrag_experiment as dx
from gpufleet.sim.defrag_pass import Defragmenter
from gpufleet.sim.replay import ReplayResult, replay
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod

PROFILE = build_profile(ProfileSettings())
BIG = 16
"""The big job's index in `_fragmented`."""
SETTINGS = DefragSettings(min_gpus=4, min_wait_s=60.0, interval_s=10.0, budget_gpu_hours_per_hour=10.0,
                          checkpoint_s=600.0)


def _nodes() -> tuple[NodeInfo, ...]:
    return tuple(make_node(f"n{i}").cpu(64_000).mem_gib(512).gpus(8).build() for i in range(2))


def _job(pod: PodSpec, at: float, duration: float) -> Job:
    return Job((pod,), at, duration, None, pod.name)


def _fragmented(preemptible: bool = True) -> Workload:
    """Two 8-GPU nodes filled by sixteen one-GPU pods at t=0 (the profile has no scorers: first fit,
    so pods 0-7 go to n0 and 8-15 to n1); three on each node finish at 10 s, the rest run 10 h:
    6 GPUs free, 3 on a node. A 4-GPU job arrives at 1000 s; a tiny job at 1100 s gives the
    replay an event to look at."""
    jobs = [_job(make_pod(f"s{k:02d}").gpus(1).preemptible(preemptible).build(), 0.0,
                 10.0 if k % 8 < 3 else 36_000.0) for k in range(16)]
    jobs.append(_job(make_pod("big").gpus(4).created(1000.0).build(), 1000.0, 3600.0))
    jobs.append(_job(make_pod("tick").cpu(100).created(1100.0).build(), 1100.0, 10.0))
    return Workload("fragmented", _nodes(), tuple(jobs))


def _start_of(result: ReplayResult, job: int) -> float:
    return next(t for t, what, i in result.trace if what == "start" and i == job)


def test_without_defragmentation_the_big_job_waits_for_the_small_ones_to_finish() -> None:
    result = replay(_fragmented(), PROFILE)
    assert _start_of(result, BIG) == 36_000.0 and result.preemptions == 0


def test_a_move_starts_the_big_job_and_restarts_the_moved_pod_elsewhere_losing_its_work() -> None:
    d = Defragmenter(SETTINGS)
    result = replay(_fragmented(), PROFILE, checkpoint_s=600.0, defrag=d)
    assert _start_of(result, BIG) == 1100.0
    assert (d.plans, d.evictions, d.moved) == (1, 1, 1)
    moved = [i for t, what, i in result.trace if what == "preempted"]
    assert len(moved) == 1 and (1100.0, "start", moved[0]) in result.trace  # moved, not queued
    assert d.gpu_seconds_lost == pytest.approx(1100.0 % 600.0)  # one GPU, the work since its checkpoint
    assert result.gpu_seconds_lost == pytest.approx(d.gpu_seconds_lost)
    assert all(r.end_s is not None for r in result.records)  # every job finishes


def test_pods_that_are_not_preemptible_are_never_moved() -> None:
    d = Defragmenter(SETTINGS)
    result = replay(_fragmented(preemptible=False), PROFILE, defrag=d)
    assert d.evictions == 0 and result.preemptions == 0 and _start_of(result, BIG) == 36_000.0
    assert list(d.refusals) == ["fragmented, but no node can be cleared for pod default/big with movable pods"]


def test_the_budget_holds_in_the_replay() -> None:
    """One move would lose 1100 s of one GPU without checkpoints (0.31 GPU-hours): a budget of 0.3 refuses it."""
    d = Defragmenter(DefragSettings(min_gpus=4, min_wait_s=60.0, interval_s=10.0, budget_gpu_hours_per_hour=0.3))
    result = replay(_fragmented(), PROFILE, defrag=d)
    assert d.evictions == 0 and _start_of(result, BIG) == 36_000.0
    assert list(d.refusals) == ["moves would lose N GPU-hours; the budget has N left this hour"]


def _synthetic_openb() -> tuple[list[Job], list[NodeInfo]]:
    """A stand-in for openb: 8-GPU and 2-GPU nodes, fractions, 1-GPU and 8-GPU tasks."""
    nodes = [make_node(f"n{i:02d}").cpu(96_000).mem_gib(512).gpus(8 if i < 12 else 2).build() for i in range(16)]
    shapes = [make_pod("f").fraction(500).build()] * 4 + [make_pod("w").gpus(1).build()] * 5 \
        + [make_pod("b").gpus(8).build()]
    jobs = [Job((pod,), 0.0, 600.0 + 900.0 * (k % 7), None, f"synthetic:{k}") for k, pod in enumerate(shapes * 20)]
    return jobs, nodes


def test_a_small_synthetic_experiment_reports_every_kpi_per_policy() -> None:
    jobs, nodes = _synthetic_openb()
    def make(seed: int) -> Workload:
        return dx.workload(jobs, nodes, jobs=600, load=0.95, every=1, seed=seed)
    runs = dx.run_all(make, ["off", "budget-2"], [0], 1, 1800.0)
    rows = dx.table(runs)
    assert list(rows) == ["off", "budget-2"] and all(set(r) == set(dx.KPIS) for r in rows.values())
    assert rows["off"]["evictions"] == 0 and rows["off"]["gpu_hours_lost"] == 0
    assert rows["off"]["big_jobs"] == rows["budget-2"]["big_jobs"] > 0
    span_h = (make(0).jobs[-1].arrival_s - make(0).jobs[0].arrival_s) / 3600
    assert rows["budget-2"]["gpu_hours_lost"] <= 2 * (span_h + 2)  # the rolling budget, over the run


def test_unknown_policies_are_refused_before_any_run() -> None:
    with pytest.raises(Exception, match="unknown policy"):
        dx.run_all(lambda s: Workload("x", (), ()), ["off", "budget-x"], [0], 1, 1800.0)


def test_the_quick_experiment_on_openb(trace_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "defrag.json"
    assert main(["experiment", "defrag", "--trace-dir", str(trace_root), "--quick", "--workers", "1",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == ["off", "budget-2"] and doc["meta"]["gpus"] == 623
    off, on = doc["policies"]["off"], doc["policies"]["budget-2"]
    assert off["evictions"] == 0 and on["big_jobs"] == off["big_jobs"] > 0
