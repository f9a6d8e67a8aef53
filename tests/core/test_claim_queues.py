"""Queues count what a pod's DRA claims amount to: fair shares, guarantees, limits and reclaim
treat a claim pod as the extended-resource pod asking the same GPUs (`core.claim_gpus`), and a
running pod's claims count as the GPUs their devices hold (`quota.claims_gpu_milli`)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType
from typing import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.claim_gpus import ClaimGpus
from gpufleet.core.claims import ClaimAllocator
from gpufleet.core.context import QueueContext
from gpufleet.core.cycle import schedule
from gpufleet.core.quota import QueueBook, claims_gpu_milli, placement_gpu_milli
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import Profile, ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.model.dra import AllocatedDevice, ClaimAllocation
from gpufleet.model.dra_table import DeviceRef
from gpufleet.sim.claims import DRIVER, AsClaims, as_claims
from gpufleet.testing import make_node, make_pod

import dra_builders as b
from queue_scenarios import NOW, Scenario, scenarios

G = 1000
RECLAIM = QueueingConfig(reclaim=True)


def ctx(*queues: Queue) -> QueueContext:
    return QueueContext(QueueTree.build(queues), MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))


def profile(cfg: QueueingConfig = RECLAIM) -> Profile:
    return build_profile(ProfileSettings(scores=(ScoreRef("BestFit"),), queueing=cfg))


def through_claims(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec], running: Sequence[Placement] = (),
                   groups: Sequence[PodGroup] = ()) -> tuple[ClusterSnapshot, AsClaims]:
    dra = as_claims(nodes, pods)
    return ClusterSnapshot.build(nodes, running, groups, device_classes=dra.classes, slices=dra.slices,
                                 claims=dra.claims), dra


def run(snap: ClusterSnapshot, pods: Sequence[PodSpec], queues: QueueContext,
        cfg: QueueingConfig = RECLAIM, now: float = 100.0) -> CycleResult:
    return schedule(snap, list(pods), profile(cfg), now=now, rng=random.Random(0), queues=queues)


def devices(placements: Sequence[Placement]) -> set[str]:
    return {r.device for p in placements for a in p.claims for r in a.devices}


# -- reclaim ------------------------------------------------------------------------------

def test_a_claim_pod_of_a_queue_below_its_share_reclaims_a_claim_pod_of_a_queue_over_it_and_gets_its_device() -> None:
    nodes = [make_node("n").gpus(2).build()]
    a = [make_pod(f"a{k}").gpus(1).queue("a").created(k).build() for k in range(2)]
    pending = make_pod("b").gpus(1).queue("b").created(50).build()
    queues = ctx(Queue("a"), Queue("b"))
    snap, dra = through_claims(nodes, [*a, pending])
    claim_a, claim_b = list(dra.pods[:2]), dra.pods[2]
    first = run(snap, claim_a, queues, now=0.0)
    assert len(first.binds) == 2 and devices(first.binds) == {"gpu-0", "gpu-1"}  # queue a holds both GPUs
    snap = snap.apply(first.binds)

    result = run(snap, [claim_b], queues)

    assert [e.pod for e in result.evictions] == ["default/a1"]  # the newest of queue a, over its share of 1 GPU
    assert result.evictions[0].reason.startswith("reclaimed by queue b for pod default/b")
    (nominated,) = result.nominated
    victim = snap.placements[PodUid("default/a1")]
    assert nominated.pod == "default/b" and nominated.gpus == victim.gpus
    assert devices([nominated]) == devices([victim])  # the victim's claim gave its device back
    later = snap.apply([nominated], [victim.pod])
    t = later.cluster.devices
    assert [bool(later.usage.dev_used[t.index[DeviceRef(DRIVER, "n", f"gpu-{j}")]]) for j in (0, 1)] == [True, True]


def test_without_the_claims_counted_the_queue_below_its_share_would_reclaim_nothing() -> None:
    # What the old accounting did: the pending claim pod asked no GPU, so queue b's share stayed 0.
    nodes = [make_node("n").gpus(2).build()]
    running = [make_pod(f"a{k}").gpus(1).queue("a").build() for k in range(2)]
    pending = make_pod("b").gpus(1).queue("b").build()
    snap, dra = through_claims(nodes, [*running, pending])
    snap = snap.apply(run(snap, list(dra.pods[:2]), ctx(Queue("a"), Queue("b")), now=0.0).binds)
    book = QueueBook(QueueTree.build((Queue("a"), Queue("b"))), snap.cluster)
    assert book.pod_vector(dra.pods[2])[2] == 0  # a pod's own request: none
    claims = QueueBook(QueueTree.build((Queue("a"), Queue("b"))), snap.cluster, ClaimGpus(ClaimAllocator(snap)))
    assert claims.pod_vector(dra.pods[2])[2] == G


def test_a_fractional_claim_pod_reclaims_like_a_fractional_extended_pod() -> None:
    nodes = [make_node("n").gpus(1).build()]
    a = [make_pod(f"a{k}").fraction(500).queue("a").created(k).build() for k in range(2)]
    pending = make_pod("b").fraction(500).queue("b").created(50).build()
    queues = ctx(Queue("a"), Queue("b"))
    plain_snap = ClusterSnapshot.build(nodes).apply(run(ClusterSnapshot.build(nodes), a, queues, now=0.0).binds)
    plain = run(plain_snap, [pending], queues)
    snap, dra = through_claims(nodes, [*a, pending])
    snap = snap.apply(run(snap, list(dra.pods[:2]), queues, now=0.0).binds)
    claims = run(snap, [dra.pods[2]], queues)
    assert [e.pod for e in plain.evictions] == ["default/a1"]
    assert [e.pod for e in claims.evictions] == [e.pod for e in plain.evictions]
    assert [(p.pod, p.gpus, p.milli) for p in claims.nominated] == [(p.pod, p.gpus, p.milli) for p in plain.nominated]


# -- limits -------------------------------------------------------------------------------

def test_a_queue_limit_bounds_claim_pods_as_it_bounds_extended_resource_pods() -> None:
    nodes = [make_node("n").gpus(4).build()]
    pods = [make_pod(f"p{k}").gpus(1).queue("q").created(k).build() for k in range(3)]
    queues = ctx(Queue("q", limit={"gpu": 2 * G}))
    plain = run(ClusterSnapshot.build(nodes), pods, queues)
    snap, dra = through_claims(nodes, pods)
    claims = run(snap, dra.pods, queues)
    assert [p.pod for p in plain.binds] == ["default/p0", "default/p1"]
    assert [(p.pod, p.gpus) for p in claims.binds] == [(p.pod, p.gpus) for p in plain.binds]
    status = claims.unschedulable[PodUid("default/p2")]
    assert status.plugin == "QueueLimit" and "limit of 2 GPU reached (2 GPU in use, the pod asks 1 GPU)" in status.reasons[0]


def test_a_queue_limit_counts_running_claim_pods_whose_placement_lists_no_gpu() -> None:
    # As the live scheduler sees a bound claim pod: its placement carries the allocated claim only.
    nodes = [make_node("n").gpus(4).build()]
    pods = [make_pod(f"p{k}").gpus(1).queue("q").created(k).build() for k in range(2)]
    snap, dra = through_claims(nodes, pods)
    held = ClaimAllocation(dra.claims[0].key, (AllocatedDevice("gpu", DRIVER, "n", "gpu-3"),), "n")
    running = Placement(PodUid("default/p0"), NodeName("n"), 1000, 0, queue="q", claims=(held,))
    snap, _ = through_claims(nodes, pods, [running])
    assert placement_gpu_milli(running, snap.cluster) == G
    result = run(snap, dra.pods[1:], ctx(Queue("q", limit={"gpu": 1 * G})))
    assert result.binds == () and result.unschedulable[PodUid("default/p1")].plugin == "QueueLimit"
    result = run(snap, dra.pods[1:], ctx(Queue("q", limit={"gpu": 2 * G})))
    assert [(p.pod, p.gpus) for p in result.binds] == [("default/p1", (0,))]


def test_a_per_model_limit_masks_the_nodes_of_that_model_for_claim_pods_too() -> None:
    nodes = [make_node("a").gpus(2, model="A100").build(), make_node("h").gpus(2, model="H100").build()]
    pods = [make_pod(f"p{k}").gpus(1).queue("q").created(k).build() for k in range(3)]
    queues = ctx(Queue("q", limit={"gpu/A100": 1 * G}))
    plain = run(ClusterSnapshot.build(nodes), pods, queues)
    snap, dra = through_claims(nodes, pods)
    claims = run(snap, dra.pods, queues)
    assert sorted(p.node for p in plain.binds) == ["a", "h", "h"]
    assert [(p.pod, p.node, p.gpus) for p in claims.binds] == [(p.pod, p.node, p.gpus) for p in plain.binds]


# -- claims that are more than GPUs ---------------------------------------------------------

def test_claims_that_are_not_plain_gpus_count_what_they_hold_at_least() -> None:
    node = b.gpu_node("n", 4)
    mig = {"name": "gpu-0-mig-3g40gb-9-0", "attributes": {"type": {"string": "mig"}, "profile": {"string": "3g.40gb"},
                                                         "uuid": {"string": "MIG-n-0"},
                                                         "parentUUID": {"string": b.uuid("n", 0)}},
           "capacity": {"memory": {"value": "40Gi"}}}
    shared = b.gpu_device("n", 1, shared=True)
    shared["capacity"] = {"memory": {"value": "80Gi"}}
    slices = [b.node_slice("n", [mig, shared, b.gpu_device("n", 2), b.gpu_device("n", 3)])]
    claims = [
        b.claim("pair", [b.exactly(count=2)], [{"matchAttribute": "gpu.nvidia.com/productName"}]),
        b.claim("mig", [b.exactly(device_class="mig.nvidia.com")]),
        b.claim("memory", [b.exactly(selectors=[{"cel": {"expression": "device.allowMultipleAllocations"}}],
                                     capacity={"requests": {"memory": "20Gi"}})]),
        b.claim("either", [{"name": "gpu", "firstAvailable": [
            {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "mig", "deviceClassName": "mig.nvidia.com", "count": 1}]}]),
        b.claim("all", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]),
    ]
    snap = ClusterSnapshot.build([node], device_classes=b.nvidia_classes(), slices=slices, claims=claims)
    gpus = ClaimGpus(ClaimAllocator(snap))

    def asks(name: str) -> int:
        return gpus.milli(replace(make_pod(name).build(), claims=(f"default/{name}",)))

    assert asks("pair") == 2 * G  # two whole GPUs, whatever the constraint
    assert asks("mig") == 428  # a 3g slice: 3/7 of a GPU, as an extended-resource MIG slice counts
    assert asks("memory") == 250  # 20 of 80 GiB of a shared GPU: what Usage holds of it
    assert asks("either") == 428  # the cheapest alternative
    assert asks("all") == 0  # how many devices depends on the node: nothing until it runs
    t = snap.cluster.devices
    held = (ClaimAllocation("default/mig", (AllocatedDevice("gpu", b.NV, "n", mig["name"]),), "n"),
            ClaimAllocation("default/pair", (AllocatedDevice("gpu", b.NV, "n", "gpu-2"),
                                             AllocatedDevice("gpu", b.NV, "n", "gpu-3")), "n"))
    assert claims_gpu_milli(t, held) == 428 + 2 * G
    assert claims_gpu_milli(t, held, held_gpus=(2,)) == 428 + G  # a GPU the placement lists counts there


# -- the same schedule through claims and through extended resources -----------------------

def outcome(result: CycleResult) -> tuple[object, ...]:
    return (sorted((p.pod, p.node, p.gpus, p.milli) for p in result.binds),
            sorted((p.pod, p.node, p.gpus, p.milli) for p in result.nominated),
            sorted((e.pod, e.preemptor) for e in result.evictions), sorted(result.unschedulable))


CONFIGS = st.sampled_from([
    QueueingConfig(order="fair"), QueueingConfig(order="priority"), QueueingConfig(order="las"),
    QueueingConfig(order="fair", reclaim=True), QueueingConfig(order="fair", reclaim=True, preemption=True),
    QueueingConfig(order="priority", preemption=True), QueueingConfig(order="priority", reclaim=True, preemption=True)])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), CONFIGS)
def test_the_queued_cycle_through_claims_binds_and_evicts_what_it_does_through_extended_resources(
        s: Scenario, cfg: QueueingConfig) -> None:
    tree = s.tree
    plain = ClusterSnapshot.build(list(s.nodes), pod_groups=s.groups)
    dra = as_claims(s.nodes, [*s.first, *s.later])
    claims = ClusterSnapshot.build(list(s.nodes), pod_groups=s.groups, device_classes=dra.classes,
                                   slices=dra.slices, claims=dra.claims)
    first, later = dra.pods[:len(s.first)], dra.pods[len(s.first):]
    admit = QueueingConfig(order="fair")
    plain_first = schedule(plain, s.first, profile(admit), now=0.0, rng=random.Random(0), queues=QueueContext(tree))
    claims_first = schedule(claims, first, profile(admit), now=0.0, rng=random.Random(0), queues=QueueContext(tree))
    assert outcome(claims_first) == outcome(plain_first)
    plain, claims = plain.apply(plain_first.binds), claims.apply(claims_first.binds)
    plain_result = schedule(plain, s.later, profile(cfg), now=NOW, rng=random.Random(0), queues=QueueContext(tree))
    claims_result = schedule(claims, later, profile(cfg), now=NOW, rng=random.Random(0), queues=QueueContext(tree))
    assert outcome(claims_result) == outcome(plain_result)
    assert all(devices([p]) == {f"gpu-{j}" for j in p.gpus}
               for p in (*claims_result.binds, *claims_result.nominated))


def test_the_queue_layer_counts_a_placement_made_through_claims_once() -> None:
    # A placement of claims that amount to GPUs lists the GPUs and carries the claim: counted once.
    nodes = [make_node("n").gpus(2).build()]
    snap, dra = through_claims(nodes, [make_pod("p").gpus(2).queue("q").build()])
    (placed,) = run(snap, dra.pods, ctx(Queue("q"))).binds
    assert placed.gpus == (0, 1) and devices([placed]) == {"gpu-0", "gpu-1"}
    assert placement_gpu_milli(placed, snap.cluster) == 2 * G
