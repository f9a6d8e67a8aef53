"""Time-driven replay: whole event traces, conservation, determinism."""

from __future__ import annotations

from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.model import PodGroup
from gpufleet.sim.environment import Environment, Kind
from gpufleet.sim.replay import replay
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod

PROFILE = build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),)))


def job(name: str, arrival: float, duration: float | None, gpus: int = 1, gang: int = 0) -> Job:
    if gang:
        pods = tuple(make_pod(f"{name}-{k}").gpus(gpus).gang(name).build() for k in range(gang))
        return Job(pods, arrival, duration, PodGroup(name, gang))
    return Job((make_pod(name).gpus(gpus).build(),), arrival, duration)


def test_events_at_the_same_time_pop_in_scheduling_order() -> None:
    env = Environment()
    env.schedule(5.0, Kind.ARRIVAL, "b")
    env.schedule(1.0, Kind.ARRIVAL, "a")
    env.schedule(5.0, Kind.COMPLETION, "c")
    assert [e.payload for e in env.pop_batch()] == ["a"]
    assert env.now == 1.0
    assert [e.payload for e in env.pop_batch()] == ["b", "c"]


def test_a_job_waits_for_capacity_and_starts_when_another_finishes() -> None:
    nodes = (make_node("n1").gpus(2).build(),)
    jobs = (job("a", 0.0, 10.0, gpus=2), job("b", 1.0, 5.0, gpus=1), job("c", 2.0, 1.0, gpus=1))
    result = replay(Workload("w", nodes, jobs), PROFILE)
    assert result.trace == [
        (0.0, "arrive", 0), (0.0, "start", 0),
        (1.0, "arrive", 1),
        (2.0, "arrive", 2),
        (10.0, "finish", 0), (10.0, "start", 1), (10.0, "start", 2),
        (11.0, "finish", 2),
        (15.0, "finish", 1),
    ]
    summary = result.summary()
    assert summary["wait_max_s"] == 9.0
    assert summary["makespan_s"] == 15.0
    # Lower bound: max(GPU-seconds / GPUs, longest job) = max((20 + 5 + 1) / 2, 10) = 13.
    assert summary["makespan_lower_bound_s"] == 13.0


def test_a_gang_starts_only_when_all_members_fit_together() -> None:
    nodes = (make_node("n1").gpus(2).build(), make_node("n2").gpus(2).build())
    jobs = (job("small", 0.0, 4.0, gpus=1), job("gang", 1.0, 2.0, gpus=2, gang=2))
    result = replay(Workload("w", nodes, jobs), PROFILE)
    starts = [(t, i) for t, e, i in result.trace if e == "start"]
    assert starts == [(0.0, 0), (4.0, 1)]


def test_jobs_are_conserved_at_the_end_of_a_bounded_run() -> None:
    nodes = (make_node("n1").gpus(1).build(),)
    jobs = tuple(job(f"j{i}", float(i), 3.0) for i in range(6)) + (job("huge", 0.0, 1.0, gpus=4),)
    result = replay(Workload("w", nodes, jobs), PROFILE, until_s=7.5)
    records = result.records
    finished = sum(1 for r in records if r.end_s is not None)
    running = sum(1 for r in records if r.start_s is not None and r.end_s is None)
    waiting = sum(1 for r in records if r.start_s is None)
    assert finished + running + waiting == len(jobs)
    assert (finished, running, waiting) == (2, 1, 4)


def test_a_job_that_can_never_fit_waits_with_its_reason() -> None:
    nodes = (make_node("n1").gpus(1).build(),)
    result = replay(Workload("w", nodes, (job("huge", 0.0, 1.0, gpus=4),)), PROFILE)
    assert result.summary()["waiting_at_end"] == 1.0
    assert "Insufficient GPU" in result.unscheduled_reasons[0]


def test_the_same_seed_gives_the_same_replay() -> None:
    nodes = tuple(make_node(f"n{i}").gpus(4).build() for i in range(3))
    jobs = tuple(job(f"j{i}", float(i % 5), float(1 + i % 7), gpus=1 + i % 3) for i in range(40))
    random_profile = build_profile(ProfileSettings(scores=(ScoreRef("Random"),)))
    a = replay(Workload("w", nodes, jobs), random_profile, seed=3)
    b = replay(Workload("w", nodes, jobs), random_profile, seed=3)
    assert a.trace == b.trace and a.utilisation == b.utilisation


def test_an_elastic_gang_starts_with_the_members_that_fit() -> None:
    pods = tuple(make_pod(f"e-{k}").gpus(1).gang("e").build() for k in range(3))
    elastic = Job(pods, 0.0, 1.0, PodGroup("e", 2))
    result = replay(Workload("w", (make_node("n").gpus(2).build(),), (elastic,)), PROFILE)
    assert result.trace == [(0.0, "arrive", 0), (0.0, "start", 0), (1.0, "finish", 0)]
