"""`web.fleet` and `web.view`: the numbers the dashboard shows, from model objects."""

from __future__ import annotations

import json
import random
from types import MappingProxyType

from gpufleet.core.cycle import schedule
from gpufleet.framework.profile import build_for
from gpufleet.framework.profiles import builtin
from gpufleet.kube.snapshot_io import Dump
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid, Queue
from gpufleet.testing import make_node, make_pod
from gpufleet.web.fleet import (Fleet, PodRef, QueueRow, Waiting, pool_of, queue_rows, reason_group, request_text,
                                waiting_of)
from gpufleet.web.sources import from_dump
from gpufleet.web.view import document


def place(pod: str, node: str, gpus: tuple[int, ...] = (), milli: int = 1000, mig: tuple[int, ...] = ()) -> Placement:
    return Placement(PodUid(pod), NodeName(node), 100, 100, gpus, milli if gpus else 0, 0, mig)


def fleet() -> Fleet:
    nodes = (make_node("a").gpus(4).label("karpenter.sh/nodepool", "train").unhealthy(3).build(),
             make_node("b").gpus(2, model="A100-80GB").mig(1, "3g.40gb", "3g.40gb").build(),
             make_node("c").gpus(1, model="T4").build())
    placements = (place("u1", "a", (0, 1)), place("u2", "a", (2,), 250), place("u3", "a", (2,), 500),
                  place("u4", "b", mig=(1,)), place("u5", "c", (0,)), place("cpu", "b"))
    pods = {PodUid(u): PodRef(f"ml/{u}", "ml", "team-a") for u in ("u1", "u2", "u3", "u4")}
    waiting = (Waiting("ml/big", "ml", "team-a", "8 GPUs", "Unschedulable",
                       "0/3 nodes are available: 2 Insufficient GPU, 1 node(s) didn't match Pod's node affinity/selector."),
               Waiting("web/big2", "web", "default", "8 GPUs", "Unschedulable",
                       "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient GPU."),
               Waiting("web/new", "web", "default", "1 GPU", "Waiting"))
    return Fleet("test", 0.0, nodes, placements, MappingProxyType(pods), waiting, not_ready=frozenset({"c"}))


def test_summary_counts_fractions_mig_health_and_readiness() -> None:
    s = document(fleet())["summary"]
    # a: 2 whole + 0.75 on GPU 2 (two fractions), GPU 3 unhealthy; b: GPU 0 whole-capable and free,
    # GPU 1 carved in 2 slices with 1 used; c: its 1 GPU in use, and the node not ready.
    assert s["gpus"] == 7 and s["gpusAllocated"] == 3.75 and s["gpusFull"] == 3
    assert s["gpusUnhealthy"] == 1 and s["migSlices"] == 2 and s["migSlicesUsed"] == 1
    assert s["gpusFree"] == 1  # b's GPU 0 only: a's GPU 3 is unhealthy, c is not ready
    assert s["nodes"] == 3 and s["readyNodes"] == 2 and s["running"] == 6 and s["pending"] == 3


def test_nodes_name_their_holders_and_slices() -> None:
    doc = document(fleet())
    a, b, c = doc["nodes"]
    assert doc["pools"][a[1]] == "train" and doc["pools"][b[1]] == "-" and doc["models"][b[2]] == "A100-80GB"
    assert [g[0] for g in a[4]] == [1000, 1000, 750, 0] and [g[1] for g in a[4]] == [1, 1, 1, 0]
    assert [doc["pods"][h][0] for h in a[4][2][2]] == ["ml/u2", "ml/u3"]
    assert b[4][1][3] == [["3g.40gb", -1], ["3g.40gb", b[4][1][3][1][1]]] and doc["pods"][b[4][1][3][1][1]][0] == "ml/u4"
    assert c[3] == 0 and doc["pods"][c[4][0][2][0]][0] == "u5"  # no PodRef: the UID
    assert doc["queueNames"][doc["pods"][a[4][0][2][0]][2]] == "team-a"


def test_pending_pods_group_by_reason_whatever_the_counts_and_order() -> None:
    doc = document(fleet())
    big, big2, new = doc["pending"]
    assert big[5] == big2[5] >= 0 and new[5] == -1 and new[4] == "Waiting"
    assert doc["reasons"][big[5]][0] == "Insufficient GPU, node(s) didn't match Pod's node affinity/selector"
    assert doc["reasons"][big[5]][1].startswith("0/3 nodes are available: 2 Insufficient GPU")
    assert doc["namespaces"][big2[1]] == "web"


def test_reason_group_keeps_other_messages_whole() -> None:
    assert reason_group("queue team-b: limit of 12 GPU reached (11.75 GPU in use, the pod asks 0.5 GPU)") == \
        "queue team-b: limit of 12 GPU reached"
    assert reason_group("pod group default/big: only 2 of minMember 3 fit") == "pod group default/big: only 2 of minMember 3 fit"
    assert reason_group("0/4 nodes are available: 4 Insufficient GPU.") == "Insufficient GPU"


def test_request_text_says_what_a_pod_asks() -> None:
    assert request_text(make_pod("p").gpus(2).build().gpu) == "2 GPUs"
    assert request_text(make_pod("p").gpus(1).build().gpu) == "1 GPU"
    assert request_text(make_pod("p").fraction(250, mem_mib=8192).build().gpu) == "250m GPU, 8192 MiB"
    assert request_text(make_pod("p").mig("1g.10gb", 2).build().gpu) == "MIG 1g.10gb x2"
    assert request_text(make_pod("p").build().gpu) == "no GPU"


def test_pool_follows_the_providers_labels_in_order() -> None:
    assert pool_of(make_node("n").label("eks.amazonaws.com/nodegroup", "ng").build()) == "ng"
    assert pool_of(make_node("n").label("eks.amazonaws.com/nodegroup", "ng")
                   .label("karpenter.sh/nodepool", "kp").build()) == "kp"
    assert pool_of(make_node("n").build()) == "-"


def test_queue_rows_in_gpus_with_default_and_pending_counted_up_the_tree() -> None:
    nodes = [make_node("a").gpus(8).build()]
    snap = ClusterSnapshot.build(nodes, [Placement(PodUid("r"), NodeName("a"), 0, 0, (0, 1), 1000, 0, (), None,
                                                   "child")])
    pending = [make_pod("p").gpus(2).queue("child").build(), make_pod("q").gpus(1).build()]
    rows = {r.name: r for r in queue_rows([Queue("parent", guaranteed={"gpu": 4000}, limit={"gpu": 6000}),
                                           Queue("child", "parent")], snap, pending)}
    assert set(rows) == {"default", "parent", "child"}
    assert rows["child"].allocated == 2.0 and rows["parent"].allocated == 2.0
    assert rows["parent"].guaranteed == 4.0 and rows["parent"].limit == 6.0 and rows["child"].limit is None
    assert rows["parent"].pending == 1 and rows["child"].pending == 1 and rows["default"].pending == 1
    assert rows["child"].fair_share >= 4.0  # held plus asked, within the parent's guarantee
    assert [r.name for r in queue_rows([], snap, pending)] == ["default"]
    assert queue_rows([Queue("x", "missing")], snap, pending) == ()  # a tree that does not validate


def test_a_dump_shows_the_reasons_one_cycle_gives() -> None:
    nodes = (make_node("a").gpus(2).build(),)
    pending = (make_pod("fits").gpus(1).build(), make_pod("big").gpus(4).build())
    dump = Dump(nodes, (), (), (), pending, {"ml/bad": "nvidia.com/gpu: 1.5 is not a whole number"})
    f = from_dump(dump, builtin("default"), "snapshot: x", 100.0)
    expected = schedule(ClusterSnapshot.build(nodes), list(pending), build_for(builtin("default"), pending),
                        now=100.0, rng=random.Random(0)).unschedulable
    by_pod = {w.pod: w for w in f.waiting}
    assert by_pod["default/big"].message == expected[pending[1].uid].message
    assert by_pod["default/big"].reason == "Unschedulable" and by_pod["default/fits"].reason == "Waiting"
    assert by_pod["ml/bad"].reason == "InvalidRequest" and "1.5" in by_pod["ml/bad"].message
    assert [r.name for r in f.queues] == ["default"]


def test_the_document_is_plain_json_and_waiting_of_marks_reasons() -> None:
    json.dumps(document(fleet()))
    pods = [make_pod("a").build(), make_pod("b").build()]
    w = waiting_of(pods, {pods[0].uid: "why"})
    assert [(x.reason, x.message) for x in w] == [("Unschedulable", "why"), ("Waiting", "")]
    assert QueueRow("q", None, 1.0, 0, 0, None, None, 0).name == "q"
