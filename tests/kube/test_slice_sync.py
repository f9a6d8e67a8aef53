"""`slice_sync.plan`: a pool changes only as a whole new generation, and only when it changed."""

from __future__ import annotations

import copy
from typing import Any

from gpufleet.kube.slice_sync import plan

Obj = dict[str, Any]


def sl(name: str, generation: int = 1, devices: tuple[str, ...] = ("gpu-0",), version: str = "") -> Obj:
    meta: Obj = {"name": name, **({"resourceVersion": version} if version else {})}
    return {"metadata": meta, "spec": {"driver": "d", "nodeName": "n",
                                       "pool": {"name": "n", "generation": generation, "resourceSliceCount": 1},
                                       "devices": [{"name": d} for d in devices]}}


def test_a_new_pool_is_created_at_generation_one() -> None:
    p = plan([], [sl("a", 7)])
    assert (p.generation, [o["spec"]["pool"]["generation"] for o in p.create], p.replace, p.delete) == (1, [1], (), ())


def test_the_same_slices_write_nothing_whatever_generation_they_were_built_with() -> None:
    p = plan([sl("a", 4, version="9")], [sl("a", 1)])
    assert p.empty and p.generation == 4


def test_a_server_set_taint_time_is_not_a_change() -> None:
    stored, wanted = sl("a", 2, version="9"), sl("a")
    stored["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-11-27T00:00:00Z"}]
    wanted["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert plan([stored], [wanted]).empty


def test_any_change_moves_every_slice_to_the_next_generation_and_deletes_the_rest_last() -> None:
    existing = [sl("a", 3, version="10"), sl("b", 3, version="11"), sl("c", 3, version="12")]
    wanted = [sl("a"), sl("b", devices=("gpu-0", "gpu-1")), sl("d")]
    p = plan(existing, wanted)
    assert p.generation == 4
    assert [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in p.replace] == [("a", "10"), ("b", "11")]
    assert [o["metadata"]["name"] for o in p.create] == ["d"]
    assert {o["spec"]["pool"]["generation"] for o in (*p.replace, *p.create)} == {4}
    assert p.delete == ("c",)


def test_a_missing_slice_is_a_change_even_if_the_rest_match() -> None:
    p = plan([sl("a", 2, version="5")], [sl("a"), sl("b")])
    assert p.generation == 3 and [o["metadata"]["name"] for o in p.create] == ["b"]


def test_a_new_owner_is_a_change() -> None:
    wanted = sl("a")
    wanted["metadata"]["ownerReferences"] = [{"kind": "Node", "uid": "u2"}]
    assert not plan([sl("a", 1, version="5")], [wanted]).empty


def test_nothing_wanted_deletes_the_pool_and_the_input_is_left_as_it_was() -> None:
    existing = [sl("a", 2, version="5"), sl("b", 2, version="6")]
    wanted = [sl("x")]
    before = copy.deepcopy(wanted)
    assert plan(existing, []).delete == ("a", "b")
    plan(existing, wanted)
    assert wanted == before
