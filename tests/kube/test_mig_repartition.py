"""The scheduler's half of demand-driven MIG (kube/mig_repartition.py), without I/O: what layout it
writes for which node, from the agents' inventories (real placements) and the instances bound pods
hold; nodes waiting for their agent's answer, and GPUs whose placements are unknown, are left alone.
The write path and the agent's answer run on the real API server in tests/live/test_mig_repartition_live.py."""

from __future__ import annotations

import json
from typing import Any, cast

from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.mig_repartition import LAYOUT_ANNOTATION, STATE_ANNOTATION, Repartitioner
from gpufleet.kube import translate
from gpufleet.model import ClusterSnapshot
from gpufleet.model import annotations as ann
from gpufleet.model import mig_placement
from gpufleet.model.mig_placement import MigInstance

A100 = "NVIDIA-A100-SXM4-80GB"
ALL_1G = tuple((f"1g.10gb", s) for s in range(7))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(name: str, layout: tuple[tuple[str, int], ...] = ALL_1G, *, starts: bool = True,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    gpu = ann.InventoryGpu(f"GPU-{name}", A100, 81920, 0, mig=tuple(p for p, _ in layout),
                           mig_devices=tuple(f"MIG-{name}-{i}" for i in range(len(layout))),
                           mig_starts=tuple(s for _, s in layout) if starts else (), mig_enabled=True)
    return {"metadata": {"name": name, "annotations": {ann.INVENTORY_ANNOTATION: ann.encode_inventory((gpu,)),
                                                        **(annotations or {})}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def mig_pod(name: str, profile: str, *, on: str | None = None, slice_: int = 0) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"schedulerName": "gpufleet",
                 "containers": [{"name": "c", "resources": {"requests": {ann.mig_resource(profile): "1"},
                                                            "limits": {ann.mig_resource(profile): "1"}}}]},
        "status": {"phase": "Pending"}}
    if on is not None:
        pod["spec"]["nodeName"] = on
        pod["status"]["phase"] = "Running"
        pod["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(
            ann.GpuAssignment(on, mig=(ann.MigSliceRef(f"GPU-{on}", slice_),)))}
    return pod


def setup(*nodes: dict[str, Any], bound: tuple[dict[str, Any], ...] = ()) -> tuple[SchedulerCache, Repartitioner, Clock]:
    cache, clock = SchedulerCache(), Clock()
    rep = Repartitioner(cast(Any, None), cast(Any, None), clock=clock)  # layouts() makes no request
    for n in nodes:
        cache.upsert_node(n)
        rep.upsert_node(n)
    for p in bound:
        cache.upsert_pod(p)
    return cache, rep, clock


def written(text: str) -> tuple[int, list[MigInstance]]:
    body = json.loads(text)
    (items,) = body["gpus"].values()
    return body["generation"], sorted(MigInstance(int(s), p) for p, _, s in (i.partition("@") for i in items))


def test_a_profile_no_free_instance_serves_gets_a_valid_layout_that_keeps_what_pods_hold() -> None:
    """3g.40gb@4 would destroy three instances and 3g.40gb@0 four, but a pod holds the one at slice 4."""
    holder = mig_pod("held", "1g.10gb", on="n1", slice_=4)  # the 1g.10gb at memory slice 4
    cache, rep, _ = setup(node("n1"), bound=(holder,))
    (name, text), = rep.layouts(cache.snapshot(), ["3g.40gb"]).items()
    generation, after = written(text)
    assert name == "n1" and generation == 1
    assert MigInstance(4, "1g.10gb") in after and MigInstance(0, "3g.40gb") in after
    assert mig_placement.is_valid("A100-80GB", after)


def test_no_change_is_written_when_free_instances_serve_the_demand() -> None:
    cache, rep, _ = setup(node("n1"))
    assert rep.layouts(cache.snapshot(), ["1g.10gb"] * 7) == {}


def test_a_node_waits_for_its_agents_answer_then_gets_the_next_generation() -> None:
    cache, rep, clock = setup(node("n1"))
    assert "n1" in rep.layouts(cache.snapshot(), ["3g.40gb"])
    clock.now += 10
    assert rep.layouts(cache.snapshot(), ["3g.40gb"]) == {}  # generation 1 not answered yet: frozen
    answered = node("n1", annotations={LAYOUT_ANNOTATION: '{"generation":1,"gpus":{}}',
                                       STATE_ANNOTATION: '{"generation":1,"state":"failed","message":"x"}'})
    rep.upsert_node(answered)
    generation, _ = written(rep.layouts(cache.snapshot(), ["3g.40gb"])["n1"])
    assert generation == 2


def test_an_agent_that_never_answers_frees_its_node_after_the_timeout() -> None:
    cache, rep, clock = setup(node("n1"))
    rep.layouts(cache.snapshot(), ["3g.40gb"])
    clock.now += rep.timeout_s - 1
    assert rep.layouts(cache.snapshot(), ["3g.40gb"]) == {}
    clock.now += 2
    assert written(rep.layouts(cache.snapshot(), ["3g.40gb"])["n1"])[0] == 2


def test_a_gpu_whose_placements_the_agent_does_not_publish_is_left_alone() -> None:
    cache, rep, _ = setup(node("old", starts=False), node("new"))
    assert list(rep.layouts(cache.snapshot(), ["3g.40gb"])) == ["new"]


def test_instances_a_pending_layout_destroys_take_no_new_pod_until_the_agent_answers() -> None:
    cache, rep, _ = setup(node("n1"))
    _, after = written(rep.layouts(cache.snapshot(), ["3g.40gb"])["n1"])
    destroyed = 7 - len([i for i in after if i.profile == "1g.10gb"])  # of the seven 1g.10gb
    assert destroyed > 0
    snapshot = cache.snapshot()

    def free(s: ClusterSnapshot) -> int:
        return int(s.usage.free_slices[0, s.cluster.mig_profile_id["1g.10gb"]])
    assert free(snapshot) == 7
    assert rep.reserve(snapshot) == destroyed and free(snapshot) == 7 - destroyed
    rep.upsert_node(node("n1", annotations={STATE_ANNOTATION: '{"generation":1,"state":"success"}'}))
    again = cache.snapshot()
    assert rep.reserve(again) == 0 and free(again) == 7  # answered: the inventory is the truth again
