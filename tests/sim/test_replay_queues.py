"""Time-driven replay with queues: preemption costs, restarts, fairness and priority KPIs."""

from __future__ import annotations

from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import PodGroup, Queue
from gpufleet.sim.replay import replay
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod


def profile(cfg: QueueingConfig):  # type: ignore[no-untyped-def]
    return build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),), queueing=cfg))


def job(name: str, arrival: float, duration: float, gpus: int = 1, queue: str = "default",
        priority: int = 0) -> Job:
    pod = make_pod(name).gpus(gpus).queue(queue).priority(priority).created(arrival).build()
    return Job((pod,), arrival, duration)


def conserved(result) -> bool:  # type: ignore[no-untyped-def]
    finished = sum(1 for r in result.records if r.end_s is not None)
    return finished == len(result.records)


def test_a_preempted_job_loses_its_work_restarts_and_still_finishes() -> None:
    nodes = (make_node("n").gpus(2).build(),)
    jobs = (job("low", 0.0, 100.0, gpus=2), job("high", 10.0, 5.0, gpus=2, priority=10))
    result = replay(Workload("w", nodes, jobs), profile(QueueingConfig(preemption=True)))
    assert result.trace == [(0.0, "arrive", 0), (0.0, "start", 0), (10.0, "arrive", 1), (10.0, "preempted", 0),
                            (10.0, "start", 1), (15.0, "finish", 1), (15.0, "start", 0), (115.0, "finish", 0)]
    summary = result.summary()
    assert summary["preemptions"] == 1.0
    assert summary["gpu_hours_lost"] * 3600 == 2 * 10.0
    assert result.records[0].preempted == 1 and conserved(result)
    # both GPUs were held all along, but the first 10 s of the low job were thrown away
    assert summary["gpu_allocation"] == 1.0
    assert summary["gpu_utilisation"] == 1.0 - 20.0 / (2 * 115.0)


def test_without_preemption_the_high_priority_job_waits() -> None:
    nodes = (make_node("n").gpus(2).build(),)
    jobs = (job("low", 0.0, 100.0, gpus=2), job("high", 10.0, 5.0, gpus=2, priority=10))
    result = replay(Workload("w", nodes, jobs), profile(QueueingConfig()))
    assert (100.0, "start", 1) in result.trace and result.summary()["preemptions"] == 0.0


def test_the_minimum_runtime_delays_a_preemption_until_the_victim_has_run_that_long() -> None:
    nodes = (make_node("n").gpus(2).build(),)
    jobs = (job("low", 0.0, 100.0, gpus=2), job("high", 10.0, 5.0, gpus=2, priority=10),
            job("tick", 40.0, 1.0, gpus=1, priority=-1))  # an event at t=40 triggers a cycle
    cfg = QueueingConfig(preemption=True, min_runtime_seconds=30.0)
    result = replay(Workload("w", nodes, jobs), profile(cfg))
    assert (40.0, "preempted", 0) in result.trace and (10.0, "preempted", 0) not in result.trace


def test_an_elastic_gang_losing_an_extra_member_keeps_running() -> None:
    nodes = (make_node("n").gpus(2).build(),)
    gang = Job(tuple(make_pod(f"e-{k}").gpus(1).gang("e").build() for k in range(2)), 0.0, 50.0, PodGroup("e", 1))
    jobs = (gang, job("high", 5.0, 5.0, gpus=1, priority=10))
    result = replay(Workload("w", nodes, jobs), profile(QueueingConfig(preemption=True)))
    assert (5.0, "start", 1) in result.trace
    assert (50.0, "finish", 0) in result.trace and not any(e == "preempted" for _, e, _ in result.trace)
    assert result.summary()["preemptions"] == 1.0


def test_reclaim_restores_fair_shares_and_jain_reaches_one() -> None:
    nodes = (make_node("n").gpus(4).build(),)
    jobs = tuple(job(f"b{i}", 0.0, 1000.0, queue="b") for i in range(4)) + \
        tuple(job(f"a{i}", 10.0, 1000.0, queue="a") for i in range(4))
    w = Workload("w", nodes, jobs, queues=(Queue("a"), Queue("b")))
    fair = replay(w, profile(QueueingConfig(order="fair", reclaim=True)), sample_s=1.0)
    unfair = replay(w, profile(QueueingConfig(order="fair")), sample_s=1.0)
    at_10 = next(s for s in fair.queue_samples if s.time == 10.0)
    assert at_10.held == {"a": 2.0, "b": 2.0, "default": 0.0} and at_10.jain == 1.0
    assert unfair.summary()["jain_fairness"] < fair.summary()["jain_fairness"]


def test_pods_waiting_behind_lower_priority_pods_of_their_queue_count_as_inversions() -> None:
    nodes = (make_node("n").gpus(1).build(),)
    jobs = (job("low", 0.0, 100.0), job("high", 10.0, 5.0, priority=10), job("other", 20.0, 5.0, queue="x"))
    w = Workload("w", nodes, jobs, queues=(Queue("x"),))
    result = replay(w, profile(QueueingConfig()), sample_s=1.0)
    assert result.summary()["priority_inversions"] == 1.0


def test_las_lets_a_newcomer_preempt_a_job_that_has_had_a_lot_of_service() -> None:
    nodes = (make_node("n").gpus(1).build(),)
    jobs = (job("long", 0.0, 10_000.0), job("short", 5000.0, 10.0))
    cfg = QueueingConfig(order="las", preemption=True, las_thresholds_gpu_seconds=(3600.0,))
    result = replay(Workload("w", nodes, jobs), profile(cfg))
    assert (5000.0, "preempted", 0) in result.trace and (5010.0, "finish", 1) in result.trace
