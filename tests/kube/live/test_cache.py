"""The cache: pending pods, bound pods with their devices, and assumptions until the watch echo."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from typing import Any, Callable, TypeVar

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.framework.plugins.fragmentation import task_spec
from gpufleet.kube import translate
from gpufleet.kube.cache import SchedulerCache
from gpufleet.model import NodeName, Placement, PodUid
from gpufleet.model import annotations as ann
from gpufleet.model.queue import QUEUE_LABEL

from .test_translate import INVENTORY, node, pod

T = TypeVar("T")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counted(read: Callable[[Any], T], calls: list[str]) -> Callable[[Any], T]:
    """`read`, noting each call in `calls`."""
    def wrapper(obj: Any) -> T:
        calls.append("read")
        return read(obj)
    return wrapper


def gpu_node(name: str = "n1") -> dict[str, Any]:
    return node(name, **{ann.INVENTORY_ANNOTATION: INVENTORY})


def bound(p: dict[str, Any], placement: Placement, n: dict[str, Any]) -> dict[str, Any]:
    a = translate.assignment(placement, translate.node_info(n))
    p["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(a)}
    p["spec"]["nodeName"] = placement.node
    p["status"] = {"phase": "Running"}
    return p


def test_an_assumed_placement_counts_until_its_echo() -> None:
    clock = Clock()
    cache = SchedulerCache(assume_ttl_s=30, clock=clock)
    cache.upsert_node(gpu_node())
    p = pod("a", limits={"nvidia.com/gpu": 1})
    cache.upsert_pod(p)
    assert [x.key for x in cache.pending()] == ["ns/a"]
    decided = Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920)
    cache.assume("ns/a", decided)
    assert cache.pending() == [] and cache.snapshot().usage.free_whole[0] == 0
    cache.finish_binding("ns/a")
    cache.upsert_pod(bound(pod("a", limits={"nvidia.com/gpu": 1}), decided, gpu_node()))  # the echo
    snap = cache.snapshot()
    assert cache.assumed_count() == 0 and snap.placements[PodUid("uid-a")].gpus == (1,)


def test_the_echo_of_a_bind_wakes_a_cycle_only_when_it_holds_other_devices_than_assumed() -> None:
    """Hundreds of echoes a second come back while binding: one holding what was assumed changes
    nothing a cycle could decide, one holding other devices (the pod was bound elsewhere) does."""
    cache = SchedulerCache()
    for name, echoed_gpu, wakes in (("a", 1, False), ("b", 1, True)):
        n = gpu_node(f"node-{name}")
        cache.upsert_node(n)
        cache.upsert_pod(pod(name, limits={"nvidia.com/gpu": 1}))
        decided = Placement(PodUid(f"uid-{name}"), NodeName(f"node-{name}"), 0, 0, (0 if wakes else 1,), 1000, 81920)
        cache.assume(f"ns/{name}", decided)
        v = cache.version
        echoed = dataclasses.replace(decided, gpus=(echoed_gpu,))
        cache.upsert_pod(bound(pod(name, limits={"nvidia.com/gpu": 1}), echoed, n))
        assert (cache.version > v) is wakes, name
        assert cache.snapshot().placements[PodUid(f"uid-{name}")].gpus == (echoed_gpu,)


def test_an_assumption_without_echo_expires() -> None:
    clock = Clock()
    cache = SchedulerCache(assume_ttl_s=30, clock=clock)
    cache.upsert_node(gpu_node())
    cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    cache.assume("ns/a", Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920))
    cache.finish_binding("ns/a")
    clock.now += 31
    assert cache.snapshot().usage.free_whole[0] == 1 and cache.assumed_count() == 0


def test_a_failed_bind_returns_the_pod_to_the_queue() -> None:
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    cache.assume("ns/a", Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920))
    cache.forget("ns/a")
    assert [x.key for x in cache.pending()] == ["ns/a"] and cache.snapshot().usage.free_whole[0] == 1


def test_an_unknown_outcome_keeps_the_devices_until_the_watch_tells() -> None:
    clock = Clock()
    cache = SchedulerCache(assume_ttl_s=30, clock=clock)
    cache.upsert_node(gpu_node())
    cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
    cache.assume("ns/a", Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920))
    cache.finish_binding("ns/a")  # a timeout, or 409 "already bound"
    assert cache.pending() == [] and cache.snapshot().usage.free_whole[0] == 0
    clock.now += 31  # no echo at all: the pod was not bound after all
    assert cache.snapshot().usage.free_whole[0] == 1 and [x.key for x in cache.pending()] == ["ns/a"]


def test_an_update_while_binding_does_not_offer_the_pod_again() -> None:
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    p = pod("a", limits={"nvidia.com/gpu": 1})
    cache.upsert_pod(p)
    cache.assume("ns/a", Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920))
    p["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    cache.upsert_pod(p)  # e.g. our own earlier status write echoing back
    assert cache.pending() == [] and cache.assumed_count() == 1


def test_the_echo_of_a_bind_holds_the_pod_as_it_is_then() -> None:
    """The echo reuses the spec translated when the pod was scheduled, unless the pod changed since
    (here its queue, while the bind was in flight): then it is translated again. What it holds
    stays charged to the queue it was scheduled in, which the assignment records."""
    decided = Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920)
    for relabel in (False, True):
        cache = SchedulerCache()
        cache.upsert_node(gpu_node())
        cache.upsert_pod(pod("a", limits={"nvidia.com/gpu": 1}))
        cache.assume("ns/a", decided)
        p = pod("a", limits={"nvidia.com/gpu": 1})
        if relabel:
            p["metadata"]["labels"] = {"gpufleet.io/queue": "team-b"}
            cache.upsert_pod(p)
        cache.upsert_pod(bound(p, decided, gpu_node()))
        assert [s.queue for s in cache.bound_specs()] == ["team-b" if relabel else "default"]
        assert cache.snapshot().placements[PodUid("uid-a")].queue == "default"


def test_restart_rebuilds_devices_from_annotations() -> None:
    n = gpu_node()
    pods = [bound(pod("a", limits={"nvidia.com/gpu": 1}), Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920), n),
            bound(pod("b", limits={"nvidia.com/mig-3g.40gb": 1}), Placement(PodUid("uid-b"), NodeName("n1"), mig_slices=(0,)), n),
            pod("c", limits={"nvidia.com/mig-3g.40gb": 1})]
    cache = SchedulerCache()
    cache.replace_pods(pods)  # pods before nodes: placements attach when the node arrives
    cache.replace_nodes([n])
    snap = cache.snapshot()
    assert set(snap.placements) == {"uid-a", "uid-b"}
    assert list(snap.usage.slice_used) == [True, False] and snap.usage.free_whole[0] == 0
    assert [p.key for p in cache.pending()] == ["ns/c"]


def test_gpu_pods_of_other_schedulers_hold_devices_too() -> None:
    other = pod("x", limits={"nvidia.com/gpu": 1})
    other["spec"].update(schedulerName="default-scheduler", nodeName="n1")
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    cache.upsert_pod(other)
    snap = cache.snapshot()
    assert snap.placements[PodUid("uid-x")].gpus == (1,) and snap.usage.free_whole[0] == 0


def test_an_overcommitting_annotation_is_not_counted_twice() -> None:
    n = gpu_node()
    p1 = Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920)
    p2 = Placement(PodUid("uid-b"), NodeName("n1"), 0, 0, (1,), 1000, 81920)
    cache = SchedulerCache()
    cache.upsert_node(n)
    cache.upsert_pod(bound(pod("a", limits={"nvidia.com/gpu": 1}), p1, n))
    cache.upsert_pod(bound(pod("b", limits={"nvidia.com/gpu": 1}), p2, n))
    snap = cache.snapshot()
    assert len(snap.placements) == 1 and snap.usage.overcommitted(0) is None


def test_invalid_and_gated_pods_are_pending_with_a_reason() -> None:
    cache = SchedulerCache()
    cache.upsert_pod(pod("bad", limits={"nvidia.com/gpu": "1.5"}))
    cache.upsert_pod(pod("gated", schedulingGates=[{"name": "x"}]))
    cache.upsert_pod(pod("other", schedulerName="default-scheduler"))
    by_key = {p.key: p for p in cache.pending()}
    assert set(by_key) == {"ns/bad", "ns/gated"}
    assert "not a whole number" in by_key["ns/bad"].error and by_key["ns/gated"].gated


def test_terminal_pods_free_their_devices() -> None:
    n = gpu_node()
    p = bound(pod("a", limits={"nvidia.com/gpu": 1}), Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920), n)
    cache = SchedulerCache()
    cache.upsert_node(n)
    cache.upsert_pod(p)
    p["status"] = {"phase": "Succeeded"}
    cache.upsert_pod(p)
    assert cache.snapshot().placements == {}


def test_queue_status_reports_held_fair_and_waiting() -> None:
    from gpufleet.kube.queues import queue_status
    from gpufleet.model import Queue, QueueTree

    n = gpu_node()
    cache = SchedulerCache()
    cache.upsert_node(n)
    held = bound(pod("a", limits={"nvidia.com/gpu": 1}, labels={"gpufleet.io/queue": "team"}),
                 Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920, queue="team"), n)
    cache.upsert_pod(held)
    cache.upsert_pod(pod("b", limits={"nvidia.com/gpu": 1}, labels={"gpufleet.io/queue": "team"}))
    tree = QueueTree.build([Queue("team", guaranteed={"gpu": 1000})])
    status = queue_status(tree, cache.snapshot(), [p.spec for p in cache.pending() if p.spec])
    assert status["team"] == {"allocated": {"cpu": "0m", "memory": "0Mi", "nvidia.com/gpu": "1000m"},
                              "fairShare": {"cpu": "0m", "memory": "0Mi", "nvidia.com/gpu": "2000m"},
                              "pending": 1}


def test_only_updates_that_can_change_a_decision_wake_a_cycle() -> None:
    n = gpu_node()
    cache = SchedulerCache()
    cache.upsert_node(n)
    p = pod("a", limits={"nvidia.com/gpu": 1})
    cache.upsert_pod(p)
    v = cache.version
    p["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    cache.upsert_pod(p)  # our own condition echoing back
    assert cache.version == v
    running = bound(pod("b", limits={"nvidia.com/gpu": 1}), Placement(PodUid("uid-b"), NodeName("n1"), 0, 0, (1,), 1000, 81920), n)
    cache.upsert_pod(running)
    v = cache.version
    running["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:05Z"}
    cache.upsert_pod(running)  # the kubelet started it: it holds the same devices
    assert cache.version == v
    running["status"] = {"phase": "Succeeded"}
    cache.upsert_pod(running)  # capacity freed
    assert cache.version > v


def test_a_pending_pods_status_update_is_not_translated_again(monkeypatch: Any) -> None:
    """Our own PodScheduled=False echoes back for every pod that does not fit (6,600 of 10,000
    at 1,000 nodes): the pod asks what it asked, and the cache keeps what it read, with the new
    object; a change to what it asks is read again."""
    cache = SchedulerCache()
    cache.upsert_node(gpu_node())
    p = pod("a", limits={"nvidia.com/gpu": 1})
    cache.upsert_pod(p)
    calls: list[str] = []
    real = translate.pod_spec
    monkeypatch.setattr(translate, "pod_spec", counted(real, calls))
    echo = {**p, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    cache.upsert_pod(echo)
    [pending] = cache.pending()
    assert calls == [] and pending.obj is echo and pending.spec == real(p)
    asks_more = pod("a", limits={"nvidia.com/gpu": 2})
    cache.upsert_pod(asks_more)
    [pending] = cache.pending()
    assert calls == ["read"] and pending.spec is not None and pending.spec.gpu.count == 2


def test_a_bound_pod_is_read_again_only_when_what_it_asks_changes(monkeypatch: Any) -> None:
    """A running pod's status updates (its start time as it starts) keep the spec read, while an
    in-place resize (Kubernetes' InPlacePodVerticalScaling changes a bound pod's resources) is
    read again: the node's free CPU follows it."""
    n = gpu_node()
    cache = SchedulerCache()
    cache.upsert_node(n)
    placement = Placement(PodUid("uid-a"), NodeName("n1"), 1000, 0, (1,), 1000, 81920)
    p = bound(pod("a", limits={"nvidia.com/gpu": 1}, requests={"cpu": "1"}), placement, n)
    cache.upsert_pod(p)
    free_cpu = cache.snapshot().usage.free_cpu[0]
    calls: list[str] = []
    real = translate.pod_spec
    monkeypatch.setattr(translate, "pod_spec", counted(real, calls))
    started = {**p, "status": {"phase": "Running", "startTime": "2026-01-01T00:01:00Z"}}
    cache.upsert_pod(started)
    assert calls == [] and cache.bound_objects() == [started]
    resized_pod = bound(pod("a", limits={"nvidia.com/gpu": 1}, requests={"cpu": "3"}), placement, n)
    resized_pod["status"] = started["status"]
    cache.upsert_pod(resized_pod)
    assert calls == ["read"] and [s.cpu_milli for s in cache.bound_specs()] == [3000]
    assert cache.snapshot().usage.free_cpu[0] == free_cpu - 2000


SNAPSHOT_FIELDS = ("free_cpu", "free_mem", "free_pods", "gpu_used_milli", "gpu_used_mem", "slice_used", "free_whole",
                   "max_free_milli", "free_milli_total", "free_slices", "class_pods")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["bind", "assume", "forget", "delete", "run", "status", "overcommit",
                                           "relabel", "recreate"]),
                          st.integers(0, 5), st.integers(0, 1), st.integers(0, 1), st.booleans()), max_size=25))
def test_the_kept_usage_is_always_what_a_rebuild_gives(steps: list[tuple[str, int, int, int, bool]]) -> None:
    """Snapshots bring the usage they keep up to date with what changed; after any sequence of
    binds, assumptions, forgets, deletions, pods starting, status updates, overcommitting assignments, nodes
    changing and pods recreated under the same name (a StatefulSet's: a new uid, maybe the same devices),
    taken by snapshots after some steps and not others, it equals the usage rebuilt
    from scratch, and so do the counted placements. The bound pods' counts per shape (the typical-task mix) are
    always those of the bound pods, and the pods it lists as PodGroup members are the bound pods labelled so."""
    cache = SchedulerCache()
    nodes = {name: gpu_node(name) for name in ("n1", "n2")}
    for n in nodes.values():
        cache.upsert_node(n)
    for action, k, where, gpu, look in steps:
        name, n = f"p{k}", nodes[("n1", "n2")[where]]
        cpus = 1 + k % 2  # two shapes of pod
        placement = Placement(PodUid(f"uid-{name}"), NodeName(n["metadata"]["name"]), 1000 * cpus, 1024, (gpu,), 1000,
                              81920)
        requests = {"cpu": str(cpus), "memory": "1Gi"}
        group = {translate.POD_GROUP_LABEL: "g"} if (k + gpu) % 3 == 0 else {}  # a pod's label comes and goes
        if action in ("bind", "run", "status", "overcommit"):
            p = bound(pod(name, limits={"nvidia.com/gpu": 1}, requests=requests, labels=group), placement, n)
            if action == "overcommit":  # another pod's devices: refused and logged, never counted twice
                placement = dataclasses.replace(placement, gpus=(1 - gpu,))
                p = bound(pod(name, limits={"nvidia.com/gpu": 1}, requests=requests, labels=group), placement, n)
            if action in ("run", "status"):
                p["status"]["startTime"] = "2026-01-01T00:01:00Z"
            if action == "status":  # after "run": an update that changes nothing the pod holds
                p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                p["metadata"]["resourceVersion"] = str(len(steps))
            cache.upsert_pod(p)
        elif action == "assume":
            cache.upsert_pod(pod(name, limits={"nvidia.com/gpu": 1}))
            cache.assume(f"ns/{name}", placement)
        elif action == "forget":
            cache.forget(f"ns/{name}")
        elif action == "recreate":  # deleted, and created again bound to the same devices, between snapshots
            held = [o for o in cache.bound_objects() if o["metadata"]["name"] == name]
            again = copy.deepcopy(held[0]) if held else bound(pod(name, limits={"nvidia.com/gpu": 1},
                                                                  requests=requests), placement, n)
            again["metadata"]["uid"] = f"{again['metadata']['uid']}-again"
            cache.delete_pod(pod(name))
            cache.upsert_pod(again)
        elif action == "relabel":  # a node changed: its pods' placements are made again
            n["metadata"]["labels"]["zone"] = f"z{k}"
            cache.upsert_node(n)
        else:
            cache.delete_pod(pod(name))
        shapes = cache.bound_shapes()
        assert +shapes == Counter(task_spec(spec) for spec in cache.bound_specs())
        members = sorted(o["metadata"]["uid"] for o in cache.bound_group_members())
        assert members == sorted(o["metadata"]["uid"] for o in cache.bound_objects()
                                 if translate.POD_GROUP_LABEL in o["metadata"]["labels"])
        if not look:
            continue  # changes pile up until a later snapshot
        kept = cache.snapshot()
        cache._counted = None  # noqa: SLF001 - force the rebuild to compare with
        rebuilt = cache.snapshot()
        assert dict(kept.placements) == dict(rebuilt.placements)
        for field in SNAPSHOT_FIELDS:
            assert np.array_equal(getattr(kept.usage, field), getattr(rebuilt.usage, field)), field


def test_a_bound_pod_stays_charged_to_the_queue_it_was_scheduled_in() -> None:
    """A tenant relabelling a running pod into another queue of its namespace (the admission
    policy off) moves nothing it holds: the queue is read from the assignment the scheduler
    wrote, after a restart too. A pod bound before the queue was recorded follows its label."""
    n = gpu_node()
    scheduled = Placement(PodUid("uid-a"), NodeName("n1"), 0, 0, (1,), 1000, 81920, queue="vision")

    def running(label: str, recorded: bool = True) -> dict[str, Any]:
        p = bound(pod("a", limits={"nvidia.com/gpu": 1}, labels={QUEUE_LABEL: label}), scheduled, n)
        if not recorded:
            a = json.loads(p["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION])
            del a["queue"]
            p["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION] = json.dumps(a)
        return p

    def charged(*objs: dict[str, Any]) -> str:
        cache = SchedulerCache()
        cache.upsert_node(n)
        for o in objs:
            cache.upsert_pod(o)
        return cache.snapshot().placements[PodUid("uid-a")].queue

    assert charged(running("vision")) == "vision"
    assert charged(running("vision"), running("ads")) == "vision"  # relabelled while the scheduler runs
    assert charged(running("ads")) == "vision"  # the scheduler restarted after the relabel
    assert charged(running("ads", recorded=False)) == "ads"
