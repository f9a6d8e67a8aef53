"""Replay with GPUs asked through DRA ResourceClaims: the same schedule as extended resources."""

from __future__ import annotations

import random
from dataclasses import replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import pytest

from gpufleet.core.context import QueueContext
from gpufleet.core.cycle import schedule
from gpufleet.core.faults import DeviceFault, quarantine, victims
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_for, build_profile
from gpufleet.framework.profiles import builtin
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, ModelError, NodeName, Placement, PodGroup, PodUid, Queue, QueueTree
from gpufleet.model.dra import AllocatedDevice, ClaimAllocation
from gpufleet.model.dra_table import DeviceRef
from gpufleet.sim import faults
from gpufleet.sim.claims import DRIVER, as_claims
from gpufleet.sim.faults import FaultModel, FaultSetup, InjectedFault
from gpufleet.sim.policies import DEFAULT, POLICIES, profile_for
from gpufleet.sim.replay import Moment, ReplayResult, replay
from gpufleet.sim.scaling import ScaleStep
from gpufleet.sim.traces import scenario
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod

Held = tuple[float, PodUid, NodeName, tuple[int, ...], int, tuple[int, ...]]
"""(time, pod, node, GPU indices, GPU-milli each, MIG slices) of every running pod after every batch."""


def settings(policy: str, preemption: bool = True) -> ProfileSettings:
    """The named policy's profile, with priority preemption switched on."""
    base = builtin(DEFAULT) if policy == DEFAULT else ProfileSettings(scores=POLICIES[policy])
    return replace(base, queueing=replace(base.queueing, preemption=preemption))


def run(workload: Workload, policy: str = DEFAULT, **kw: object) -> tuple[ReplayResult, list[Held]]:
    held: list[Held] = []

    def observe(m: Moment) -> None:
        for p in m.snapshot.placements.values():
            held.append((m.time_s, p.pod, p.node, p.gpus, p.milli, p.mig_slices))
            devices = {r.device for a in p.claims for r in a.devices if r.driver == DRIVER}
            assert devices == ({f"gpu-{j}" for j in p.gpus} if p.claims else set()), p  # the claim holds the GPUs placed

    profile = build_for(settings(policy), [p for j in workload.jobs for p in j.pods])
    result = replay(workload, profile, 7, observe=observe, observe_every_s=1e-9,
                    **kw)  # type: ignore[arg-type]
    return result, held


def assert_same(workload: Workload, policy: str = DEFAULT, **kw: object) -> ReplayResult:
    plain, plain_held = run(workload, policy, **kw)
    claims, claims_held = run(replace(workload, claims=True), policy, **kw)
    assert claims.trace == plain.trace
    assert claims_held == plain_held
    assert claims.summary() == pytest.approx(plain.summary(), nan_ok=True)
    return claims


def test_mixed_sharing_replays_through_claims_exactly_as_through_extended_resources() -> None:
    path = Path(str(resources.files("gpufleet.sim.scenarios") / "mixed-sharing.yaml"))
    result = assert_same(scenario.load(path))
    assert result.summary()["finished"] >= 4


def generated(seed: int) -> Workload:
    """A small cluster under pressure: whole-GPU and fractional jobs (some with a memory cap), gangs,
    three priorities, departures, and some jobs that never finish."""
    rng = random.Random(seed)
    nodes = (*(make_node(f"a{i}").gpus(4, model="H100", mem_gib=80).build() for i in range(2)),
             make_node("b0").gpus(2, model="A100", mem_gib=40).build())
    jobs = []
    for k in range(40):
        arrival, duration = rng.uniform(0, 600), rng.choice([None, *[rng.uniform(30, 900)] * 9])
        priority = rng.choice([0, 0, 100, 1000])
        shape = rng.random()
        if shape < 0.4:
            pod = make_pod(f"f{k}").fraction(rng.choice([100, 250, 500, 700]),
                                              rng.choice([0, 0, 8192])).priority(priority)
            jobs.append(Job((pod.build(),), arrival, duration))
        elif shape < 0.85:
            pod = make_pod(f"w{k}").gpus(rng.choice([1, 1, 2, 4])).priority(priority)
            jobs.append(Job((pod.build(),), arrival, duration))
        else:
            pods = tuple(make_pod(f"g{k}-{m}").gpus(2).gang(f"g{k}").priority(priority).build() for m in range(2))
            jobs.append(Job(pods, arrival, duration, PodGroup(f"g{k}", 2)))
    jobs.sort(key=lambda j: j.arrival_s)
    return Workload(f"generated-{seed}", nodes, tuple(jobs))


@pytest.mark.parametrize("seed", range(6))
def test_a_generated_workload_with_preemption_replays_through_claims_exactly_as_through_extended_resources(
        seed: int) -> None:
    assert_same(generated(seed))


def test_the_generated_workloads_do_exercise_preemption_fractions_and_departures() -> None:
    results = [run(replace(generated(s), claims=True))[0] for s in range(6)]
    assert sum(r.preemptions for r in results) > 0
    assert all(r.summary()["finished"] > 0 for r in results)
    assert any(p.gpu.milli < 1000 for s in range(6) for j in generated(s).jobs for p in j.pods)


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "gpufleet"])
def test_other_policies_place_claims_as_extended_resources_too(policy: str) -> None:
    assert_same(generated(11), policy)


def test_a_claims_devices_are_free_again_when_its_pod_finishes() -> None:
    nodes = (make_node("n").gpus(1).build(),)
    jobs = (Job((make_pod("first").gpus(1).build(),), 0.0, 10.0),
            Job((make_pod("second").gpus(1).build(),), 1.0, 10.0),
            Job((make_pod("share").fraction(500).build(),), 2.0, 5.0))
    result, held = run(Workload("one-gpu", nodes, jobs, claims=True))
    assert [(t, e, i) for t, e, i in result.trace if e != "arrive"] == [
        (0.0, "start", 0), (10.0, "finish", 0), (10.0, "start", 1), (20.0, "finish", 1), (20.0, "start", 2),
        (25.0, "finish", 2)]
    assert {(p, n, g) for _, p, n, g, _, _ in held} == {
        (PodUid("default/first"), "n", (0,)), (PodUid("default/second"), "n", (0,)),
        (PodUid("default/share"), "n", (0,))}


def test_a_preempted_pods_claim_gives_its_device_to_the_preemptor() -> None:
    nodes = (make_node("n").gpus(1).build(),)
    jobs = (Job((make_pod("low").gpus(1).build(),), 0.0, 100.0),
            Job((make_pod("high").gpus(1).priority(1000).build(),), 1.0, 10.0))
    result, held = run(Workload("preempt", nodes, jobs, claims=True))
    assert result.preemptions == 1
    assert [(t, e, i) for t, e, i in result.trace if e != "arrive"] == [
        (0.0, "start", 0), (1.0, "preempted", 0), (1.0, "start", 1), (11.0, "finish", 1), (11.0, "start", 0),
        (111.0, "finish", 0)]


def test_a_device_fault_takes_the_claims_gpu_and_the_job_restarts_on_another() -> None:
    nodes = (make_node("n").gpus(2).build(),)
    jobs = (Job((make_pod("a").gpus(1).build(),), 0.0, 100.0),)
    hit = InjectedFault(10.0, DeviceFault(NodeName("n"), 0, "XID 79"), FaultModel().classes[0])
    setup = FaultSetup(FaultModel(), faults.POLICIES["gpufleet"], (hit,))
    plain, plain_held = run(Workload("fault", nodes, jobs), faults=setup)
    result, held = run(Workload("fault", nodes, jobs, claims=True), faults=setup)
    assert [(t, e) for t, e, _ in result.trace] == [(0.0, "arrive"), (0.0, "start"), (10.0, "failed"),
                                                    (10.0, "start"), (110.0, "finish")]
    assert held[0] == (0.0, "default/a", "n", (0,), 1000, ()) and {h[1:] for h in held[1:]} == {("default/a", "n", (1,), 1000, ())}
    assert (result.trace, held) == (plain.trace, plain_held)


def test_gangs_and_queues_replays_through_claims_exactly_as_through_extended_resources() -> None:
    path = Path(str(resources.files("gpufleet.sim.scenarios") / "gangs-and-queues.yaml"))
    # The file names the queues its pods use; the Queue objects (a guarantee, a limit) are added here.
    workload = replace(scenario.load(path), queues=(Queue("team-a", limit={"gpu": 24_000}),
                                                    Queue("team-b", guaranteed={"gpu": 12_000})))
    result = assert_same(workload)
    assert result.summary()["finished"] >= 4 and result.preemptions > 0


def queued(seed: int) -> Workload:
    """`generated(seed)` spread over three queues (one with a guarantee, one with a GPU limit)."""
    base = generated(seed)
    names = ("research", "prod", "batch")
    jobs = tuple(replace(j, pods=tuple(replace(p, queue=names[k % 3]) for p in j.pods))
                 for k, j in enumerate(base.jobs))
    queues = (Queue("research"), Queue("prod", guaranteed={"gpu": 4000}), Queue("batch", limit={"gpu": 3000}))
    return replace(base, name=f"queued-{seed}", jobs=jobs, queues=queues)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", [DEFAULT, "bestfit"])
def test_a_generated_queued_workload_replays_through_claims_exactly_as_through_extended_resources(
        seed: int, policy: str) -> None:
    assert_same(queued(seed), policy)


def test_the_queued_workloads_do_preempt_meet_their_queue_limit_and_sample_fairness() -> None:
    results = [run(replace(queued(s), claims=True))[0] for s in range(4)]
    assert sum(r.preemptions for r in results) > 0
    assert any("queue batch: limit of 3 GPU reached" in why for r in results for why in r.unscheduled_reasons.values())
    assert all(r.queue_samples and r.jain_fairness == r.jain_fairness for r in results)  # a number, not nan


def test_a_claim_pod_reclaims_from_a_queue_over_its_share_as_an_extended_resource_pod_does() -> None:
    nodes = [make_node("n").gpus(2).build()]
    running = [Placement(PodUid(f"default/a{k}"), NodeName("n"), 1000, 1024, (k,), 1000, 81920, queue="a")
               for k in range(2)]
    pending = make_pod("b").gpus(1).queue("b").build()
    profile = build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),), queueing=QueueingConfig(reclaim=True)))
    ctx = QueueContext(QueueTree.build((Queue("a"), Queue("b"))), MappingProxyType({}), MappingProxyType({}),
                       MappingProxyType({}))
    plain = schedule(ClusterSnapshot.build(nodes, running), [pending], profile, now=100.0, rng=random.Random(0),
                     queues=ctx)
    dra = as_claims(nodes, [pending])
    snap = ClusterSnapshot.build(nodes, running, device_classes=dra.classes, slices=dra.slices, claims=dra.claims)
    claims = schedule(snap, list(dra.pods), profile, now=100.0, rng=random.Random(0), queues=ctx)
    assert [e.pod for e in plain.evictions] == ["default/a1"]
    assert [e.pod for e in claims.evictions] == [e.pod for e in plain.evictions]
    assert [(p.node, p.gpus) for p in claims.nominated] == [(p.node, p.gpus) for p in plain.nominated]


def test_a_scaler_with_claims_is_refused_by_name() -> None:
    class Never:
        interval_s = 60.0

        def step(self, *_: object) -> ScaleStep:
            return ScaleStep()

    w = Workload("w", (make_node("n").gpus(1).build(),), (Job((make_pod("a").gpus(1).build(),), 0.0, 1.0),),
                 claims=True)
    with pytest.raises(ModelError, match="replay of workload w: a scaler cannot be used .* DRA claims"):
        replay(w, profile_for("bestfit", ()), scaler=Never())


def test_a_device_fault_hits_a_pod_whose_claim_holds_the_gpus_device_without_listing_the_gpu() -> None:
    # The allocator's own placements (claims that are more than GPUs) list no GPU indices:
    # the fault still finds the pod through its claim's device linked to the failed GPU.
    nodes = (make_node("n").gpus(2).build(),)
    dra = as_claims(nodes, [make_pod("a").gpus(1).build()])
    held = ClaimAllocation(dra.claims[0].key, (AllocatedDevice("gpu", DRIVER, "n", "gpu-1"),), "n")
    snap = ClusterSnapshot.build(nodes, [Placement(PodUid("default/a"), NodeName("n"), claims=(held,))],
                                 device_classes=dra.classes, slices=dra.slices, claims=dra.claims)
    assert [e.pod for e in victims(snap, DeviceFault(NodeName("n"), 1, "XID 79"))] == ["default/a"]
    assert victims(snap, DeviceFault(NodeName("n"), 0, "XID 79")) == ()
    out = quarantine(snap, DeviceFault(NodeName("n"), 0, "XID 79"), 0.0)
    t = out.cluster.devices
    assert [bool(out.usage.dev_free[t.index[DeviceRef(DRIVER, "n", f"gpu-{j}")]]) for j in (0, 1)] == [False, False]
