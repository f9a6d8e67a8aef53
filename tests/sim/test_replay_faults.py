"""Replay with injected faults, checkpoints and a scaler: who restarts when, what is lost, what is billed."""

from __future__ import annotations

import random
from typing import Sequence

import pytest

from gpufleet.core.cycle import schedule
from gpufleet.core.faults import DeviceFault, NodeFault
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.model import ClusterSnapshot, NodeName, PodGroup, PodSpec
from gpufleet.sim.faults import (DEFAULT_CLASSES, POLICIES, FaultClass, FaultInjector, FaultModel, FaultSetup,
                                 InjectedFault)
from gpufleet.sim.replay import ReplayResult, replay
from gpufleet.sim.scaling import NewNode, ScaleStep
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod

PROFILE = build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),)))
HBM = next(c for c in DEFAULT_CLASSES if c.xid == 95)  # repaired after 2 h
HOST = next(c for c in DEFAULT_CLASSES if c.name == "host maintenance")


def gang(name: str, pods: int, gpus: int, duration: float, arrival: float = 0.0) -> Job:
    members = tuple(make_pod(f"{name}-{k}").gpus(gpus).gang(name).build() for k in range(pods))
    return Job(members, arrival, duration, PodGroup(name, pods))


def solo(name: str, gpus: int, duration: float, arrival: float = 0.0) -> Job:
    return Job((make_pod(name).gpus(gpus).build(),), arrival, duration)


def three_nodes() -> tuple:  # type: ignore[type-arg]
    return tuple(make_node(n).gpus(2).build() for n in "abc")


def first_node(workload: Workload, pod: PodSpec) -> NodeName:
    """Where the replay's first cycle puts `pod` (the same pure core, same seed)."""
    snap = ClusterSnapshot.build(workload.nodes, pod_groups=[j.group for j in workload.jobs if j.group])
    pods = [p for j in workload.jobs for p in j.pods]
    result = schedule(snap, pods, PROFILE, now=0.0, rng=random.Random(0))
    return next(b.node for b in result.binds if b.pod == pod.uid)


def run(workload: Workload, policy: str, script: Sequence[InjectedFault], checkpoint_s: float | None = 600.0,
        ) -> ReplayResult:
    setup = FaultSetup(FaultModel(), POLICIES[policy], tuple(script))
    return replay(workload, PROFILE, checkpoint_s=checkpoint_s, faults=setup)


def events(result: ReplayResult, job: int) -> list[tuple[float, str]]:
    return [(t, e) for t, e, i in result.trace if i == job]


def test_gpufleet_quarantines_the_device_and_requeues_the_gang_after_its_grace() -> None:
    w = Workload("w", three_nodes(), (gang("g", 2, 2, 10_000.0),))
    node = first_node(w, w.jobs[0].pods[0])
    result = run(w, "gpufleet", [InjectedFault(1000.0, DeviceFault(node, 0, HBM.reason), HBM)])
    assert events(result, 0) == [(0.0, "arrive"), (0.0, "start"), (1000.0, "failed"), (1030.0, "start"),
                                 (1030.0 + 10_000 - 600, "finish")]
    assert result.restarts == [(0, 30.0)]
    # 4 GPUs lose the 400 s since the checkpoint at 600 s and the 30 s they were held
    assert result.gpu_seconds_lost == result.gpu_seconds_lost_to_faults == pytest.approx(4 * 430.0)
    assert result.faults == 1
    assert result.gpu_seconds_out_of_service == pytest.approx(HBM.repair_s)  # one GPU, for its repair time
    s = result.summary()
    assert s["gang_restart_mean_s"] == 30.0 and s["gang_restarts"] == 1.0 and s["finished"] == 1.0


def test_drain_node_takes_the_node_and_the_gang_hangs_until_nccl_times_out() -> None:
    w = Workload("w", three_nodes(), (gang("g", 2, 2, 10_000.0),))
    node = first_node(w, w.jobs[0].pods[0])
    result = run(w, "drain-node", [InjectedFault(1000.0, DeviceFault(node, 0, HBM.reason), HBM)])
    assert events(result, 0)[2:4] == [(1000.0, "failed"), (1600.0, "start")]
    assert result.gpu_seconds_lost == pytest.approx(4 * (1600.0 - 600.0))
    assert result.gpu_seconds_out_of_service == pytest.approx(2 * HBM.repair_s)  # both GPUs of the node


def test_a_drain_interrupts_the_healthy_jobs_on_the_node_too() -> None:
    w = Workload("w", (make_node("a").gpus(2).build(), make_node("b").gpus(2).build()),
                 (solo("x", 1, 5_000.0), solo("y", 1, 5_000.0)))
    node_x, node_y = first_node(w, w.jobs[0].pods[0]), first_node(w, w.jobs[1].pods[0])
    assert node_x == node_y, "BestFit packs both on one node"
    fault = [InjectedFault(700.0, DeviceFault(node_x, 0, HBM.reason), HBM)]
    drained = run(w, "drain-node", fault)
    assert sum(r.failed for r in drained.records) == 2
    quarantined = run(w, "gpufleet", fault)
    assert sum(r.failed for r in quarantined.records) == 1, "only the job on the failed GPU stops"
    assert quarantined.summary()["restart_mean_s"] == 0.0, "a crashed single pod is recreated at once"


def test_a_device_unhealthy_forever_never_comes_back_until_its_node_restarts() -> None:
    w = Workload("w", (make_node("a").gpus(2).build(),), (solo("big", 2, 5_000.0),))
    device = InjectedFault(100.0, DeviceFault(NodeName("a"), 0, HBM.reason), HBM)
    stuck = run(w, "unhealthy-forever", [device])
    assert stuck.summary()["finished"] == 0.0 and 0 in stuck.unscheduled_reasons
    repaired = run(w, "gpufleet", [device])
    assert events(repaired, 0)[-2:] == [(100.0 + HBM.repair_s, "start"), (100.0 + HBM.repair_s + 5_000.0, "finish")]
    reboot = InjectedFault(1000.0, NodeFault(NodeName("a"), HOST.reason), HOST)
    rebooted = run(w, "unhealthy-forever", [device, reboot])
    assert events(rebooted, 0)[-2][0] == 1000.0 + HOST.repair_s, "the node's restart brought the device back"


def test_a_node_fault_releases_pods_after_detection_and_tolerationseconds_and_gangs_no_later() -> None:
    w = Workload("w", three_nodes(), (solo("x", 1, 5_000.0),))
    node = first_node(w, w.jobs[0].pods[0])
    fault = [InjectedFault(50.0, NodeFault(node, HOST.reason), HOST)]
    assert run(w, "gpufleet", fault).restarts == run(w, "unhealthy-forever", fault).restarts == [(0, 340.0)]
    w = Workload("w", (*three_nodes(), make_node("d").gpus(2).build()), (gang("g", 2, 2, 10_000.0),))
    node = first_node(w, w.jobs[0].pods[0])
    fault = [InjectedFault(50.0, NodeFault(node, HOST.reason), HOST)]
    assert run(w, "gpufleet", fault).restarts == [(0, 340.0)], "the gang goes with the node's pods"
    assert run(w, "unhealthy-forever", fault).restarts == [(0, 600.0)], "survivors hang until NCCL times out"


def test_without_checkpoints_an_interrupted_job_restarts_from_zero() -> None:
    w = Workload("w", (make_node("a").gpus(1).build(), make_node("b").gpus(1).build()), (solo("x", 1, 5_000.0),))
    node = first_node(w, w.jobs[0].pods[0])
    result = run(w, "gpufleet", [InjectedFault(4_000.0, DeviceFault(node, 0, HBM.reason), HBM)], checkpoint_s=None)
    assert events(result, 0)[-1] == (4_000.0 + 5_000.0, "finish")
    assert result.gpu_seconds_lost == 4_000.0


def test_faults_are_drawn_at_the_model_rate_and_identically_for_every_policy() -> None:
    nodes = tuple(make_node(f"n{i}").gpus(8).build() for i in range(100))
    model = FaultModel(rate_scale=1000.0)
    a, b = FaultInjector(model, nodes, 7), FaultInjector(model, nodes, 7)
    seq_a, seq_b, t = [], [], 0.0
    for _ in range(2000):
        fa, fb = a.next_after(t), b.next_after(t)
        assert fa is not None and fb is not None
        seq_a.append(fa)
        seq_b.append(fb)
        t = fa.time_s
    assert seq_a == seq_b
    expected = 800 * model.per_gpu_hour() * t / 3600
    assert 0.9 < 2000 / expected < 1.1
    device_share = sum(1 for f in seq_a if isinstance(f.fault, DeviceFault)) / 2000
    assert device_share == pytest.approx(0.587 / 0.798, abs=0.04)
    assert FaultModel().per_gpu_hour() == pytest.approx(0.798 * 419 / (16_384 * 54 * 24))


def test_bad_fault_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="rate scale"):
        FaultModel(rate_scale=-1)
    with pytest.raises(ValueError, match="fault class 'x'"):
        FaultModel(classes=(FaultClass("x", "device", 1.0, -5.0),))
    w = Workload("w", (make_node("a").gpus(1).build(),), (solo("x", 1, 5.0),))
    with pytest.raises(ValueError, match="checkpoint interval"):
        replay(w, PROFILE, checkpoint_s=0)


class _Script:
    """A scaler that requests one node at its first step and removes it at `remove_at`."""

    interval_s = 10.0

    def __init__(self, remove_at: float) -> None:
        self.remove_at = remove_at
        self.calls: list[tuple[float, int, int]] = []

    def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
             launching: Sequence[NewNode]) -> ScaleStep:
        self.calls.append((now, len(pending), len(launching)))
        if now == 0.0:
            return ScaleStep(add=(NewNode(make_node("new").gpus(4).build(), 8.0, 120.0),))
        if now == self.remove_at:
            return ScaleStep(remove=(NodeName("new"),))
        return ScaleStep()


def test_a_scaled_node_joins_after_its_delay_and_is_billed_from_the_request() -> None:
    w = Workload("w", (), (solo("x", 2, 1_000.0),))
    scaler = _Script(remove_at=2_000.0)
    result = replay(w, PROFILE, scaler=scaler)
    assert events(result, 0) == [(0.0, "arrive"), (120.0, "start"), (1_120.0, "finish")]
    assert scaler.calls[0] == (0.0, 1, 0) and scaler.calls[1] == (10.0, 1, 1)
    s = result.summary()
    assert s["gpu_hours_paid"] == pytest.approx(4 * 1_120.0 / 3600), "billed until the run ends"
    assert s["cost"] == pytest.approx(8.0 * 1_120.0 / 3600)
    assert s["gpu_hours_allocated"] == pytest.approx(2 * 1_000.0 / 3600)
    assert s["idle_gpu_hours"] == pytest.approx((4 * 1_120.0 - 2 * 1_000.0) / 3600)


def test_removing_a_busy_node_interrupts_its_jobs_and_stops_the_bill() -> None:
    w = Workload("w", (make_node("old").gpus(1).build(),), (solo("x", 2, 1_000.0), solo("y", 1, 5_000.0)))
    result = replay(w, PROFILE, checkpoint_s=100.0, scaler=_Script(remove_at=500.0))
    x = events(result, 0)
    assert x[:3] == [(0.0, "arrive"), (120.0, "start"), (500.0, "scaled-down")]
    assert 0 in result.unscheduled_reasons, "its 2-GPU pod fits nowhere once the new node is gone"
    assert result.gpu_seconds_paid == pytest.approx(4 * 500.0)
    assert result.gpu_seconds_lost == pytest.approx(2 * (380.0 - 300.0))


def test_a_scaler_cannot_remove_unknown_nodes_or_reuse_names() -> None:
    class Bad:
        interval_s = 5.0

        def step(self, now: float, snapshot: ClusterSnapshot, pending: Sequence[PodSpec],
                 launching: Sequence[NewNode]) -> ScaleStep:
            return ScaleStep(remove=(NodeName("ghost"),))
    w = Workload("w", (make_node("a").gpus(1).build(),), (solo("x", 1, 50.0),))
    with pytest.raises(ValueError, match="removed node ghost, which is not in the cluster"):
        replay(w, PROFILE, scaler=Bad())
