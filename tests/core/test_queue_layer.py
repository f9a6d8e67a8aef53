"""The queue layer's promises that the mutation run found unchecked (docs/queues.md):
held nodes for the head of the line, a rolled-back gang's members given back to the queue's
books, the fair order on decayed usage, and the messages of limits (CPU, memory, MIG, per model)."""

from __future__ import annotations

import random
from typing import Sequence

import pytest

from gpufleet.core.cycle import schedule
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.status import Code, Status
from gpufleet.model import ClusterSnapshot, NodeInfo, PodGroup, PodSpec, PodUid, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

G = 1000  # one GPU in GPU-milli
NOW = 1000.0
FAIR = QueueingConfig(order="fair")
BOUND = QueueingConfig(order="fair", starvation_bound_seconds=10.0)  # pods created before 990 starve


def node(name: str, gpus: int = 8, model: str = "H100-80GB") -> NodeInfo:
    return make_node(name).cpu(64_000).mem_gib(512).gpus(gpus, model=model).label("host", name).build()


def run(snap: ClusterSnapshot, pods: Sequence[PodSpec], cfg: QueueingConfig, queues: Sequence[Queue] = (),
        *, usage_share: dict[str, float] | None = None) -> CycleResult:
    profile = build_profile(ProfileSettings(queueing=cfg))
    ctx = QueueContext(QueueTree.build(queues), usage_share=usage_share or {})
    return schedule(snap, pods, profile, now=NOW, rng=random.Random(0), queues=ctx)


def running(snap: ClusterSnapshot, pods: Sequence[PodSpec]) -> ClusterSnapshot:
    """`snap` with `pods` placed (each pins its node with a `host` selector; all must fit)."""
    result = schedule(snap, pods, build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
    assert not result.unschedulable, result.unschedulable
    return snap.apply(result.binds)


def fillers(gpus_used: dict[str, int], queue: str = "other") -> list[PodSpec]:
    """One whole-GPU pod per used GPU, pinned to its node."""
    return [make_pod(f"fill-{n}-{i}").gpus(1).queue(queue).selector("host", n).build()
            for n, used in gpus_used.items() for i in range(used)]


def held_note(held: Sequence[str], shown: str) -> str:
    return f"waiting longer than the starvation bound: {len(held)} node(s) held for it until it fits ({shown})"


def gang(name: str, n: int, queue: str = "a", *, gpus: int = 1, milli: int = 0, created: float = 0.0
         ) -> list[PodSpec]:
    def member(i: int) -> PodSpec:
        b = make_pod(f"{name}{i}").queue(queue).gang(name).created(created)
        return (b.fraction(milli) if milli else b.gpus(gpus)).build()
    return [member(i) for i in range(n)]


# -- starvation: which nodes are held, how many, and what the pod is told -------------------------

def test_the_emptiest_nodes_are_held_just_enough_for_the_starving_gangs_members() -> None:
    """Free GPUs 2, 3, 2, 4: twelve 1-GPU members fit on the two emptiest nodes once they drain
    (8 per node), so n3 and n1 are held; the younger pods start on n0 and n2 only."""
    snap = running(ClusterSnapshot.build([node(f"n{i}") for i in range(4)], pod_groups=[PodGroup("g", 12)]),
                   fillers({"n0": 6, "n1": 5, "n2": 6, "n3": 4}))
    starving = gang("g", 12)
    young = [make_pod(f"y{i}").gpus(1).queue("b").created(995.0).build() for i in range(3)]
    result = run(snap, [*starving, *young], BOUND, [Queue("a"), Queue("b"), Queue("other")])

    assert len(result.binds) == 3 and {b.node for b in result.binds} <= {"n0", "n2"}
    note = held_note(["n3", "n1"], "n3, n1")
    for member in starving:
        status = result.unschedulable[member.uid]
        assert status.code is Code.UNSCHEDULABLE and status.plugin == "Gang"
        assert status.reasons[0].startswith("pod group default/g: only")
        assert status.reasons[-1] == note


def test_without_a_starvation_bound_no_node_is_held() -> None:
    """The same cluster and gang without a bound: nobody is told of held nodes."""
    snap = running(ClusterSnapshot.build([node(f"n{i}") for i in range(4)], pod_groups=[PodGroup("g", 12)]),
                   fillers({"n0": 6, "n1": 5, "n2": 6, "n3": 4}))
    starving = gang("g", 12)
    result = run(snap, starving, FAIR, [Queue("a"), Queue("other")])
    assert not any("starvation bound" in s.message for s in result.unschedulable.values())


@pytest.mark.parametrize(("members", "shown"), [
    (5, "n0, n1, n2, n3, n4"),
    (6, "n0, n1, n2, n3, n4 ..."),
], ids=["five held nodes are all named", "past five names the message ends with dots"])
def test_the_message_names_the_first_five_held_nodes(members: int, shown: str) -> None:
    """Members of 8 GPUs on eight 8-GPU nodes with one GPU busy each: one node per member."""
    names = [f"n{i}" for i in range(8)]
    snap = running(ClusterSnapshot.build([node(n) for n in names], pod_groups=[PodGroup("g", members)]),
                   fillers({n: 1 for n in names}))
    starving = gang("g", members, gpus=8)
    young = [make_pod(f"y{i}").gpus(1).queue("b").created(995.0).build() for i in range(8)]
    result = run(snap, [*starving, *young], BOUND, [Queue("a"), Queue("b"), Queue("other")])

    assert result.unschedulable[starving[0].uid].reasons[-1] == held_note(names[:members], shown)
    assert len(result.binds) == 8 and {b.node for b in result.binds} <= set(names[members:])


def test_a_single_starving_pod_holds_its_only_node() -> None:
    snap = running(ClusterSnapshot.build([node("n0")]), fillers({"n0": 4}))
    old = make_pod("old").gpus(8).queue("a").created(0.0).build()
    young = make_pod("young").gpus(1).queue("b").created(995.0).build()
    result = run(snap, [old, young], BOUND, [Queue("a"), Queue("b"), Queue("other")])

    assert not result.binds
    assert result.unschedulable[old.uid].reasons[-1] == held_note(["n0"], "n0")
    assert "starvation bound" not in result.unschedulable[young.uid].message


def test_a_starving_gang_of_fractions_holds_one_node_per_member() -> None:
    """A fraction gets no whole GPU count: each member is counted as needing a node of its own."""
    names = [f"n{i}" for i in range(4)]
    fill = [make_pod(f"fill-{n}-{i}").fraction(600).queue("other").selector("host", n).build()
            for n in names for i in range(2)]
    snap = running(ClusterSnapshot.build([node(n, gpus=2) for n in names], pod_groups=[PodGroup("g", 3)]),
                   fill)
    starving = gang("g", 3, milli=600)
    result = run(snap, starving, BOUND, [Queue("a"), Queue("other")])

    assert result.unschedulable[starving[0].uid].reasons[-1] == held_note(names[:3], "n0, n1, n2")


# -- limits: a rolled-back gang gives its members back; the messages -----------------------------

def test_a_gang_rolled_back_gives_its_tentative_members_back_to_the_queue_limit() -> None:
    """Two members of a gang of three are placed tentatively, the third fits nowhere: the gang is
    rolled back, and the queue's later pods may again use all 4 GPUs of its limit, no more."""
    snap = ClusterSnapshot.build([node("n0")], pod_groups=[PodGroup("g", 3)])
    members = [make_pod(f"g{i}").gpus(1).queue("a").gang("g").created(0.0).build() for i in range(2)]
    members.append(make_pod("g2").gpus(1).queue("a").gang("g").created(0.0).selector("host", "nowhere").build())
    later = [make_pod(f"p{i}").gpus(1).queue("a").created(10.0 + i).build() for i in range(6)]
    result = run(snap, [*members, *later], FAIR, [Queue("a", limit={"gpu": 4 * G})])

    assert sorted(b.pod for b in result.binds) == [p.uid for p in later[:4]]
    assert all(result.unschedulable[m.uid].plugin == "Gang" for m in members)
    assert result.unschedulable[later[4].uid] == Status(
        Code.UNSCHEDULABLE, ("queue a: limit of 4 GPU reached (4 GPU in use, the pod asks 1 GPU)",), "QueueLimit")


def test_a_pod_naming_an_inner_queue_is_unschedulable_by_the_queue_plugin() -> None:
    snap = ClusterSnapshot.build([node("n0")])
    pod = make_pod("x").gpus(1).queue("lab").build()
    result = run(snap, [pod], FAIR, [Queue("lab"), Queue("r1", parent="lab")])
    assert result.unschedulable[pod.uid] == Status(
        Code.UNSCHEDULABLE, ("queue lab has child queues: pods must name a leaf queue",), "Queue")


@pytest.mark.parametrize(("limit", "cpu", "mem", "message"), [
    ({"cpu": 4000}, 3000, 1024, "queue a: limit of 4 CPU reached (3 CPU in use, the pod asks 3 CPU)"),
    ({"memory": 4096}, 100, 3072,
     "queue a: limit of 4 GiB memory reached (3 GiB memory in use, the pod asks 3 GiB memory)"),
], ids=["a CPU limit counts in CPUs", "a memory limit counts in GiB"])
def test_a_cpu_or_memory_limit_message_gives_amounts_in_their_units(
        limit: dict[str, int], cpu: int, mem: int, message: str) -> None:
    snap = ClusterSnapshot.build([node("n0")])
    pods = [make_pod(f"p{i}").cpu(cpu).mem_mib(mem).queue("a").created(float(i)).build() for i in range(2)]
    result = run(snap, pods, FAIR, [Queue("a", limit=limit)])
    assert [b.pod for b in result.binds] == [pods[0].uid]
    assert result.unschedulable[pods[1].uid].message == message


def test_a_mig_slice_counts_as_its_compute_share_of_a_gpu_against_a_limit() -> None:
    """A 3g.40gb slice is 3/7 of a GPU (428 GPU-milli): two fit in a limit of 1 GPU, a third does not."""
    mig = (make_node("m").gpus(2, model="A100-80GB").mig(0, "3g.40gb", "3g.40gb")
           .mig(1, "3g.40gb", "3g.40gb").build())
    snap = ClusterSnapshot.build([mig])
    pods = [make_pod(f"p{i}").mig("3g.40gb").queue("a").created(float(i)).build() for i in range(3)]
    result = run(snap, pods, FAIR, [Queue("a", limit={"gpu": 1 * G})])
    assert sorted(b.pod for b in result.binds) == [pods[0].uid, pods[1].uid]
    assert result.unschedulable[pods[2].uid].message == (
        "queue a: limit of 1 GPU reached (0.856 GPU in use, the pod asks 0.428 GPU)")


def test_a_per_model_limit_not_reached_is_not_named_when_a_pod_fits_nowhere() -> None:
    """Queue a holds 1 of its 2 T4 GPUs (and 2 GPUs in all): a 1-GPU pod that finds the cluster
    full is told so, not that the T4 limit was reached (1 + 1 is within 2)."""
    snap = running(ClusterSnapshot.build([node("t", gpus=2, model="T4"), node("y", gpus=2, model="A100-80GB")]), [
        make_pod("a-t").gpus(1).queue("a").selector("host", "t").build(),
        make_pod("a-y").gpus(1).queue("a").selector("host", "y").build(),
        *fillers({"t": 1, "y": 1}, queue="b")])
    pod = make_pod("p").gpus(1).queue("a").created(10.0).build()
    result = run(snap, [pod], FAIR, [Queue("a", limit={"gpu/T4": 2 * G}), Queue("b")])
    status = result.unschedulable[pod.uid]
    assert len(status.reasons) == 1 and "limit" not in status.message


# -- fair order on decayed usage ------------------------------------------------------------------

def _first_bound(usage_share: dict[str, float] | None, queues: Sequence[Queue], pods: Sequence[PodSpec]) -> str:
    """Which pod gets the cluster's only GPU."""
    snap = ClusterSnapshot.build([node("n0", gpus=1)])
    result = run(snap, pods, FAIR, queues, usage_share=usage_share)
    (bind,) = result.binds
    return bind.pod.split("/")[1]


def test_the_fair_order_follows_decayed_usage_when_the_driver_gives_it() -> None:
    """Nothing runs, so by current allocation the tie goes to queue a (by name); by decayed usage
    queue b, which used less, goes first. A queue the tree no longer has is ignored."""
    queues = [Queue("a"), Queue("b")]
    pods = [make_pod("a0").gpus(1).queue("a").created(0.0).build(),
            make_pod("b0").gpus(1).queue("b").created(100.0).build()]
    assert _first_bound(None, queues, pods) == "a0"
    assert _first_bound({"a": 0.5, "b": 0.1, "gone": 0.9}, queues, pods) == "b0"


def test_decayed_usage_is_divided_by_the_queues_weight() -> None:
    """y used nothing, x used 0.1 with weight 2 (0.05): y goes first; by name x would."""
    queues = [Queue("x", weight=2), Queue("y")]
    pods = [make_pod("x0").gpus(1).queue("x").created(0.0).build(),
            make_pod("y0").gpus(1).queue("y").created(0.0).build()]
    assert _first_bound({"x": 0.1, "y": 0.0}, queues, pods) == "y0"


def test_an_inner_queues_decayed_usage_is_the_sum_of_its_childrens() -> None:
    """lab's children used 0.3 each (0.6 in all), prod 0.4: prod goes first; by name lab would."""
    queues = [Queue("lab"), Queue("r1", parent="lab"), Queue("r2", parent="lab"), Queue("prod")]
    pods = [make_pod("r").gpus(1).queue("r1").created(0.0).build(),
            make_pod("p").gpus(1).queue("prod").created(100.0).build()]
    assert _first_bound(None, queues, pods) == "r"
    assert _first_bound({"r1": 0.3, "r2": 0.3, "prod": 0.4}, queues, pods) == "p"


def test_with_decayed_usage_queues_still_interleave_within_a_cycle() -> None:
    """What a queue is given in this cycle adds to its decayed usage: with equal past usage two
    queues share one 8-GPU node 4 : 4, and a past usage lower by 0.2 buys a head start of two
    pods (each GPU is 1/8 of the cluster: a goes at 0.1 and 0.225, then they alternate), not the
    whole node."""
    queues = [Queue("a"), Queue("b")]
    pods = [make_pod(f"{q}{i}").gpus(1).queue(q).created(float(i)).build() for q in "ab" for i in range(8)]
    snap = ClusterSnapshot.build([node("n0")])
    for usage, a_gpus in (({"a": 0.1, "b": 0.1}, 4), ({"a": 0.1, "b": 0.3}, 5)):
        binds = run(snap, pods, FAIR, queues, usage_share=usage).binds
        assert sum(b.queue == "a" for b in binds) == a_gpus, (usage, [b.pod for b in binds])


def test_a_pod_a_per_model_limit_keeps_off_a_model_is_told_both_why_and_which_limit() -> None:
    """The T4 node has room, but queue a's T4 limit is reached: the pod's reasons are the
    cluster's (no room on the A100 node) and then the limit's; the status is the filters'."""
    snap = running(ClusterSnapshot.build([node("t", gpus=2, model="T4"), node("y", gpus=2, model="A100-80GB")]), [
        make_pod("a-t").gpus(1).queue("a").selector("host", "t").build(), *fillers({"y": 2}, queue="b")])
    pod = make_pod("p").gpus(1).queue("a").created(10.0).build()
    result = run(snap, [pod], FAIR, [Queue("a", limit={"gpu/T4": 1 * G}), Queue("b")])
    status = result.unschedulable[pod.uid]
    assert status.code is Code.UNSCHEDULABLE and status.plugin == ""
    assert len(status.reasons) == 2 and status.reasons[0].startswith("0/2 nodes are available")
    assert status.reasons[1] == "queue a: limit of 1 T4 GPU reached (1 T4 GPU in use), its nodes left out"


def test_a_cpu_only_pod_is_not_told_of_a_gpu_model_limit() -> None:
    """Queue a runs 2 T4 GPUs over its (since lowered) T4 limit of 1; its CPU-only pod that fits
    nowhere is told only why it fits nowhere: GPU limits do not concern it."""
    snap = running(ClusterSnapshot.build([node("t", gpus=2, model="T4")]),
                   fillers({"t": 2}, queue="a"))
    pod = make_pod("p").cpu(100_000).queue("a").created(10.0).build()
    result = run(snap, [pod], FAIR, [Queue("a", limit={"gpu/T4": 1 * G})])
    status = result.unschedulable[pod.uid]
    assert len(status.reasons) == 1 and "limit" not in status.message


def test_each_mig_slice_counts_as_its_own_profiles_share() -> None:
    """Slices 1g.10gb, 1g.10gb, 3g.40gb on one GPU: two 1g pods hold 2 x 142 GPU-milli, whichever
    slices they got, so a third is over a limit of 0.3 GPU with 0.284 in use."""
    mig = make_node("m").gpus(1, model="A100-80GB").mig(0, "1g.10gb", "1g.10gb", "3g.40gb").build()
    snap = ClusterSnapshot.build([mig])
    pods = [make_pod(f"p{i}").mig("1g.10gb").queue("a").created(float(i)).build() for i in range(3)]
    result = run(snap, pods, FAIR, [Queue("a", limit={"gpu": 300})])
    assert sorted(b.pod for b in result.binds) == [pods[0].uid, pods[1].uid]
    assert result.unschedulable[pods[2].uid].message == (
        "queue a: limit of 0.3 GPU reached (0.284 GPU in use, the pod asks 0.142 GPU)")


# -- who starves: the bound, measured from creation, inclusive ------------------------------------

def _starve_one(bound: float, old_created: float, young_created: float, old_queue: str = "a") -> CycleResult:
    """n0 has 4 of 8 GPUs busy: an 8-GPU pod and a younger 1-GPU pod of another queue."""
    snap = running(ClusterSnapshot.build([node("n0")]), fillers({"n0": 4}))
    old = make_pod("old").gpus(8).queue(old_queue).created(old_created).build()
    young = make_pod("young").gpus(1).queue("b").created(young_created).build()
    queues = [Queue("a"), Queue("b"), Queue("other"), Queue("lab"), Queue("r1", parent="lab")]
    return run(snap, [old, young], QueueingConfig(order="fair", starvation_bound_seconds=bound), queues)


@pytest.mark.parametrize(("bound", "old_created"), [(0.5, 0.0), (10.0, 990.0)],
                         ids=["a bound under a second holds", "a pod waiting exactly the bound starves"])
def test_a_pod_waiting_at_least_the_bound_holds_its_node(bound: float, old_created: float) -> None:
    result = _starve_one(bound, old_created, 999.9)
    assert not result.binds
    assert result.unschedulable[PodUid("default/old")].reasons[-1] == held_note(["n0"], "n0")


def test_a_pod_younger_than_the_bound_holds_nothing() -> None:
    result = _starve_one(10.0, 995.0, 996.0)
    assert [b.pod for b in result.binds] == [PodUid("default/young")]
    assert "starvation bound" not in result.unschedulable[PodUid("default/old")].message


def test_a_starving_pod_naming_an_inner_queue_holds_nothing() -> None:
    """Holding nodes cannot help a pod no queue admits: the younger pod takes the GPU."""
    result = _starve_one(10.0, 0.0, 995.0, old_queue="lab")
    assert [b.pod for b in result.binds] == [PodUid("default/young")]
    assert result.unschedulable[PodUid("default/old")].reasons == (
        "queue lab has child queues: pods must name a leaf queue",)


def test_a_held_node_stays_held_for_a_pod_of_a_queue_with_a_model_limit() -> None:
    """The young pod's queue has a per-model limit it is well within: the held n0 is still
    closed to it (and a CPU-only node does not count as a model it could take)."""
    cpu_only = make_node("c").cpu(64_000).mem_gib(512).label("host", "c").build()
    snap = running(ClusterSnapshot.build([node("n0"), cpu_only]), fillers({"n0": 4}))
    old = make_pod("old").gpus(8).queue("a").created(0.0).build()
    young = make_pod("young").gpus(1).queue("b").created(995.0).build()
    queues = [Queue("a"), Queue("b", limit={"gpu/H100-80GB": 8 * G}), Queue("other")]
    result = run(snap, [old, young], BOUND, queues)
    assert not result.binds
    assert result.unschedulable[old.uid].reasons[-1] == held_note(["n0"], "n0")


# -- order keys -----------------------------------------------------------------------------------

def test_fifo_order_goes_by_arrival_not_priority() -> None:
    snap = ClusterSnapshot.build([node("n0", gpus=1)])
    old = make_pod("old").gpus(1).queue("a").priority(0).created(0.0).build()
    urgent = make_pod("urgent").gpus(1).queue("a").priority(10).created(5.0).build()
    result = run(snap, [old, urgent], QueueingConfig(order="fifo"), [Queue("a")])
    assert [b.pod for b in result.binds] == [old.uid]


def test_las_counts_a_pod_without_history_as_having_received_nothing() -> None:
    """Threshold 0.5 GPU-s: a pod with no record is at level 0, like one with 0.2: age decides."""
    snap = ClusterSnapshot.build([node("n0", gpus=1)])
    fresh = make_pod("fresh").gpus(1).queue("a").created(0.0).build()
    used = make_pod("used").gpus(1).queue("a").created(5.0).build()
    cfg = QueueingConfig(order="las", las_thresholds_gpu_seconds=(0.5,))
    ctx = QueueContext(QueueTree.build([Queue("a")]), attained_gpu_s={used.uid: 0.2})
    result = schedule(snap, [fresh, used], build_profile(ProfileSettings(queueing=cfg)), now=NOW,
                      rng=random.Random(0), queues=ctx)
    assert [b.pod for b in result.binds] == [fresh.uid]


def test_decayed_usage_adds_only_what_was_placed_in_this_cycle() -> None:
    """Queue a already runs one of two GPUs; with equal decayed usage the tie goes to a by name:
    what a ran before the cycle is in its decayed usage, not counted again."""
    snap = running(ClusterSnapshot.build([node("n0", gpus=2)]), fillers({"n0": 1}, queue="a"))
    pods = [make_pod("a0").gpus(1).queue("a").created(0.0).build(),
            make_pod("b0").gpus(1).queue("b").created(0.0).build()]
    result = run(snap, pods, FAIR, [Queue("a"), Queue("b")], usage_share={"a": 0.1, "b": 0.1})
    assert [b.pod for b in result.binds] == [pods[0].uid]


# -- gangs against limits: running members count toward minMember ----------------------------------

def _with_running_members(group: PodGroup, n: int) -> ClusterSnapshot:
    """n0 with `n` 1-GPU members of gang g (queue a) running and `group` as its PodGroup."""
    started = schedule(ClusterSnapshot.build([node("n0")]), gang("g", n, created=-1.0),
                       build_profile(ProfileSettings()), now=0.0, rng=random.Random(0))
    assert len(started.binds) == n
    return ClusterSnapshot.build([node("n0")], pod_groups=[group]).apply(started.binds)


def test_a_gang_with_running_members_is_checked_against_the_limit_for_what_it_lacks() -> None:
    """minMember 4, 2 running, limit 5 GPUs: the gang lacks 2 (4 GPUs in all), so it starts, and
    one extra member fits the limit; the fourth pending member is stopped by it."""
    snap = _with_running_members(PodGroup("g", 4), 2)
    pending = [make_pod(f"p{i}").gpus(1).queue("a").gang("g").created(float(i)).build() for i in range(4)]
    result = run(snap, pending, FAIR, [Queue("a", limit={"gpu": 5 * G})])
    assert sorted(b.pod for b in result.binds) == [p.uid for p in pending[:3]]
    assert result.unschedulable[pending[3].uid] == Status(
        Code.UNSCHEDULABLE, ("queue a: limit of 5 GPU reached (5 GPU in use, the pod asks 1 GPU)",), "QueueLimit")


def test_a_gang_at_minmember_takes_any_extra_member_within_the_limit() -> None:
    """minMember 2, both running, limit 3: the gang needs nobody, so a 2-GPU member over the
    limit does not stop a 1-GPU member that fits."""
    snap = _with_running_members(PodGroup("g", 2), 2)
    big = make_pod("big").gpus(2).queue("a").gang("g").created(0.0).build()
    small = make_pod("small").gpus(1).queue("a").gang("g").created(1.0).build()
    result = run(snap, [big, small], FAIR, [Queue("a", limit={"gpu": 3 * G})])
    assert [b.pod for b in result.binds] == [small.uid]
    assert result.unschedulable[big.uid].plugin == "QueueLimit"


def test_a_gang_without_a_podgroup_object_is_checked_whole_against_the_limit() -> None:
    snap = ClusterSnapshot.build([node("n0")])
    members = gang("g", 2)
    result = run(snap, members, FAIR, [Queue("a", limit={"gpu": 4 * G})])
    assert sorted(b.pod for b in result.binds) == [m.uid for m in members]


# -- limits: a pod with a GPU model limit; CPU-only pods are not kept off a model's nodes ----------

def test_a_cpu_only_pod_may_use_the_nodes_of_a_model_its_queue_is_over() -> None:
    snap = running(ClusterSnapshot.build([node("t", gpus=2, model="T4")]), fillers({"t": 2}, queue="a"))
    pod = make_pod("p").cpu(100).queue("a").created(10.0).build()
    result = run(snap, [pod], FAIR, [Queue("a", limit={"gpu/T4": 1 * G})])
    assert [b.node for b in result.binds] == ["t"]


# -- preemption attempts: a unit its queue rejects still uses an attempt ---------------------------

@pytest.mark.parametrize("rejected", ["inner", "limited"])
def test_the_attempts_per_cycle_count_units_the_queues_rejected(rejected: str) -> None:
    """One attempt per cycle, taken by the older urgent pod that its queue rejects: the younger
    urgent pod does not preempt the low-priority pod in this cycle."""
    snap = running(ClusterSnapshot.build([node("n0", gpus=1)]),
                   [make_pod("low").gpus(1).queue("a").priority(0).selector("host", "n0").build()])
    queue = "lab" if rejected == "inner" else "c"
    x = make_pod("x").gpus(2).queue(queue).priority(10).created(900.0).build()
    hi = make_pod("hi").gpus(1).queue("a").priority(10).created(950.0).build()
    queues = [Queue("a"), Queue("lab"), Queue("r1", parent="lab"), Queue("c", limit={"gpu": 1 * G})]
    cfg = QueueingConfig(order="priority", preemption=True, preemption_attempts_per_cycle=1)
    result = run(snap, [x, hi], cfg, queues)
    assert not result.evictions
    cfg2 = QueueingConfig(order="priority", preemption=True, preemption_attempts_per_cycle=2)
    assert [e.pod for e in run(snap, [x, hi], cfg2, queues).evictions] == [PodUid("default/low")]


# -- demand shapes fair shares, and fair shares decide reclaim -------------------------------------

RECLAIM = QueueingConfig(order="fair", reclaim=True)


def _cpu_node() -> NodeInfo:
    return make_node("n0").cpu(64_000).mem_gib(64).label("host", "n0").build()


@pytest.mark.parametrize(("cpu", "mem"), [(16_000, 1024), (100, 16 * 1024)], ids=["cpu", "memory"])
def test_every_pending_pod_of_a_queue_adds_to_its_demand(cpu: int, mem: int) -> None:
    """b holds the whole node (4 pods of a quarter); a asks two quarters: fair shares are half
    each, so two of b's pods are reclaimed (with one quarter asked, only one would be)."""
    b = [make_pod(f"b{i}").cpu(cpu).mem_mib(mem).queue("b").build() for i in range(4)]
    snap = running(ClusterSnapshot.build([_cpu_node()]), b)
    a = [make_pod(f"a{i}").cpu(cpu).mem_mib(mem).queue("a").created(950.0 + i).build() for i in range(2)]
    result = run(snap, a, RECLAIM, [Queue("a"), Queue("b")])
    assert len(result.evictions) == 2


def test_a_queues_demand_adds_to_what_it_holds() -> None:
    """a holds a quarter and asks one more; b holds three: a wants half, so b gives one back."""
    snap = running(ClusterSnapshot.build([_cpu_node()]),
                   [make_pod("a-run").cpu(16_000).mem_mib(1024).queue("a").build()]
                   + [make_pod(f"b{i}").cpu(16_000).mem_mib(1024).queue("b").build() for i in range(3)])
    ask = make_pod("a0").cpu(16_000).mem_mib(1024).queue("a").created(950.0).build()
    result = run(snap, [ask], RECLAIM, [Queue("a"), Queue("b")])
    assert len(result.evictions) == 1 and [p.pod for p in result.nominated] == [ask.uid]


def test_a_pod_failing_under_held_nodes_is_not_given_the_failure_from_before_the_hold() -> None:
    """The head fails before n0 is held; a pod of the same shape fails after the hold, once the
    CPU pod has filled n1: its reasons are its own (n1 now lacks CPU too), not the head's reused."""
    snap = running(ClusterSnapshot.build([node("n0"), node("n1", gpus=4)]), fillers({"n0": 4}))
    head = make_pod("head").gpus(8).queue("z").created(0.0).build()
    twin = make_pod("twin").gpus(8).queue("z").created(995.0).build()
    hog = make_pod("hog").cpu(64_000).queue("b").created(995.0).build()
    result = run(snap, [head, twin, hog], BOUND, [Queue("z"), Queue("b"), Queue("other")])
    assert [b.node for b in result.binds] == ["n1"]
    assert result.unschedulable[head.uid].reasons[0] == "0/2 nodes are available: 2 Insufficient GPU."
    assert result.unschedulable[twin.uid].reasons == (
        "0/2 nodes are available: 1 Insufficient GPU, 1 Insufficient cpu.",)


@pytest.mark.parametrize(("cpu", "mem", "gpus"), [(8000, 1024, 0), (100, 8 * 1024, 0), (100, 1024, 1)],
                         ids=["cpu", "memory", "gpu"])
def test_a_queue_holding_exactly_its_fair_share_gives_nothing_back(cpu: int, mem: int, gpus: int) -> None:
    """Two nodes of 4 units (CPUs of 8 cores, 8 GiB of memory, or GPUs) each; b holds 3 on each,
    a asks 2 on one node, which neither has free: the wants sum to the cluster exactly, so b's
    fair share is exactly what it holds and nothing is reclaimed."""
    def host(i: int) -> NodeInfo:
        b = make_node(f"n{i}").cpu(4 * cpu if cpu > 100 else 64_000)
        b = b.mem_mib(4 * mem if mem > 1024 else 512 * 1024).label("host", f"n{i}")
        return (b.gpus(4) if gpus else b).build()

    def ask(name: str, times: int, node: str | None = None) -> PodSpec:
        b = make_pod(name).cpu(times * cpu).mem_mib(times * mem).queue("a" if node is None else "b")
        b = b.gpus(times * gpus) if gpus else b
        return (b.selector("host", node) if node else b.created(950.0)).build()

    snap = running(ClusterSnapshot.build([host(0), host(1)]),
                   [ask(f"b{n}{i}", 1, f"n{n}") for n in range(2) for i in range(3)])
    result = run(snap, [ask("a0", 2)], RECLAIM, [Queue("a"), Queue("b")])
    assert not result.evictions and not result.binds
