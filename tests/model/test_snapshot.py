"""ClusterSnapshot: built from plain lists, validates running pods, and derives new snapshots by `apply()`."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

from gpufleet.model import ClusterSnapshot, ModelError, NodeInfo, NodeName, Placement, PodGroup, PodUid
from gpufleet.model.cluster import Usage
from gpufleet.testing import make_node


def _hold(pod: str, node: str = "a", *, cpu: int = 0, mem: int = 0, gpus: tuple[int, ...] = (),
          milli: int = 1000, gmem: int = 0, mig: tuple[int, ...] = (), group: str | None = None) -> Placement:
    return Placement(PodUid(pod), NodeName(node), cpu, mem, gpus, milli if gpus else 0, gmem, mig, group)


def _nodes() -> list[NodeInfo]:
    return [
        make_node("b").cpu(8000).mem_mib(8192).max_pods(3).gpus(4, model="T4", mem_gib=16).build(),
        make_node("a").cpu(4000).mem_mib(4096).max_pods(2).gpus(2).mig(1, "3g.40gb", "1g.10gb").build(),
        make_node("c").cpu(2000).mem_mib(2048).build(),
    ]


def _usage_arrays(u: Usage) -> dict[str, list[object]]:
    return {name: np.asarray(getattr(u, name)).tolist() for name in Usage.__slots__[1:] if name != "version"}


BAD_RUNNING: list[tuple[str, Sequence[Placement], str, str]] = [
    ("running pods over the node's CPU are rejected",
     [_hold("p1", cpu=3000), _hold("p2", cpu=1500)], "running pod p2 on node a", "overcommits cpu"),
    ("running pods over the node's memory are rejected",
     [_hold("p1", mem=4097)], "running pod p1 on node a", "overcommits memory"),
    ("more running pods than max pods are rejected",
     [_hold("p1"), _hold("p2"), _hold("p3")], "running pod p3 on node a", "overcommits pods"),
    ("two whole-GPU pods on one device are rejected",
     [_hold("p1", "b", gpus=(0,)), _hold("p2", "b", gpus=(0,))], "running pod p2 on node b", "overcommits GPU milli"),
    ("fractions summing over 1000 milli are rejected",
     [_hold("p1", "b", gpus=(3,), milli=600), _hold("p2", "b", gpus=(3,), milli=401)],
     "running pod p2 on node b", "overcommits GPU milli"),
    ("fractions over the device's memory are rejected",
     [_hold("p1", "b", gpus=(1,), milli=100, gmem=10_000), _hold("p2", "b", gpus=(1,), milli=100, gmem=7_000)],
     "running pod p2 on node b", "overcommits GPU memory"),
    ("a pod on an unknown node is rejected",
     [_hold("p1", "zz")], "running pod p1", "runs on unknown node 'zz'"),
    ("the same pod listed twice is rejected",
     [_hold("p1", "b"), _hold("p1", "c")], "running pod p1", "listed twice"),
    ("a GPU index the node lacks is rejected",
     [_hold("p1", "a", gpus=(2,))], "running pod p1", "GPU index 2 does not exist on node a (2 GPUs)"),
    ("a MIG slice the node lacks is rejected",
     [_hold("p1", "a", mig=(2,))], "running pod p1", "MIG slice 2 does not exist on node a"),
    ("a MIG slice used twice is rejected",
     [_hold("p1", "a", mig=(1,)), _hold("p2", "a", mig=(1,))], "running pod p2", "MIG slice 1 on node a is already in use"),
]


@pytest.mark.parametrize(("running", "where", "problem"), [c[1:] for c in BAD_RUNNING],
                         ids=[c[0] for c in BAD_RUNNING])
def test_build_rejects_bad_running_pods(running: Sequence[Placement], where: str, problem: str) -> None:
    with pytest.raises(ModelError) as err:
        ClusterSnapshot.build(_nodes(), running)
    assert (err.value.where, err.value.problem) == (where, problem)


def test_build_rejects_duplicate_node_names() -> None:
    with pytest.raises(ModelError) as err:
        ClusterSnapshot.build([make_node("a").build(), make_node("b").build(), make_node("a").build()])
    assert (err.value.where, err.value.problem) == ("node a", "appears more than once")


def test_build_orders_nodes_by_name_and_records_usage() -> None:
    running = [_hold("p1", "b", cpu=1000, mem=512, gpus=(0, 1), gmem=16 * 1024),
               _hold("p2", "b", gpus=(2,), milli=250, gmem=1000), _hold("p3", "a", mig=(1,), group="default/g")]
    snap = ClusterSnapshot.build(_nodes(), running, [PodGroup("g", 2)])
    c, u = snap.cluster, snap.usage
    assert c.names == ("a", "b", "c")
    assert (u.free_cpu.tolist(), u.free_mem.tolist(), u.free_pods.tolist()) == \
        ([4000, 7000, 2000], [4096, 7680, 2048], [1, 1, 110])
    assert u.gpu_used_milli[1].tolist() == [1000, 1000, 250, 0]
    assert u.free_whole.tolist() == [1, 1, 0]            # a: GPU 1 is MIG; b: GPU 3 only
    assert u.max_free_milli.tolist() == [1000, 1000, 0]
    assert u.free_milli_total.tolist() == [1000, 1750, 0]
    slices = {p: int(u.free_slices[0, c.mig_profile_id[p]]) for p in c.mig_profiles}
    assert slices == {"1g.10gb": 0, "3g.40gb": 1}
    assert set(snap.placements) == {"p1", "p2", "p3"}
    assert snap.pod_groups["default/g"].min_member == 2
    assert (snap.gpu_capacity_milli(), snap.gpu_allocated_milli()) == (6000, 2250)


def test_apply_binds_then_releases_round_trips_to_the_same_usage() -> None:
    base = ClusterSnapshot.build(_nodes(), [_hold("r", "b", gpus=(0,), gmem=16 * 1024, cpu=500)])
    binds = [_hold("x", "b", cpu=1000, mem=100, gpus=(1, 2), gmem=16 * 1024),
             _hold("y", "b", gpus=(3,), milli=300, gmem=2048),
             _hold("z", "a", cpu=100, mig=(0,)),
             _hold("w", "c", cpu=2000, mem=2048)]
    after = base.apply(binds)
    assert [after.usage.overcommitted(i) for i in range(3)] == [None, None, None]
    assert after.usage.free_whole.tolist() == [1, 0, 0]
    assert after.usage.gpu_used_milli[1].tolist() == [1000, 1000, 1000, 300]
    assert bool(after.usage.slice_used[0]) is True
    back = after.apply(releases=[PodUid(p) for p in "xyzw"])
    assert _usage_arrays(back.usage) == _usage_arrays(base.usage)
    assert set(back.placements) == {"r"}


def test_apply_leaves_the_original_untouched() -> None:
    base = ClusterSnapshot.build(_nodes())
    before = _usage_arrays(base.usage)
    base.apply([_hold("x", "b", gpus=(0,), gmem=1)]).apply(releases=[PodUid("x")])
    assert _usage_arrays(base.usage) == before
    assert dict(base.placements) == {}


def test_release_frees_capacity_for_a_new_bind() -> None:
    base = ClusterSnapshot.build(_nodes(), [_hold("r", "a", mig=(0,))])
    again = base.apply([_hold("s", "a", mig=(0,))], releases=[PodUid("r")])
    assert set(again.placements) == {"s"} and bool(again.usage.slice_used[0])


def test_apply_rejects_unknown_release_and_double_bind() -> None:
    base = ClusterSnapshot.build(_nodes(), [_hold("r", "b")])
    with pytest.raises(ModelError) as err:
        base.apply(releases=[PodUid("nope")])
    assert (err.value.where, err.value.problem) == ("release of pod nope", "pod is not running in this snapshot")
    with pytest.raises(ModelError) as err:
        base.apply([_hold("r", "c")])
    assert (err.value.where, err.value.problem) == ("bind of pod r", "pod already runs on b")


def test_gpu_health_change_removes_the_device_from_free_capacity() -> None:
    base = ClusterSnapshot.build(_nodes())
    sick = base.with_gpu_health(NodeName("b"), 2, False)
    assert (base.usage.free_whole[1], sick.usage.free_whole[1]) == (4, 3)
    assert sick.with_gpu_health(NodeName("b"), 2, True).usage.free_whole[1] == 4


def test_unhealthy_gpu_hides_its_mig_slices() -> None:
    snap = ClusterSnapshot.build([make_node("a").gpus(2).mig(1, "3g.40gb", "1g.10gb").unhealthy(1).build()])
    assert snap.usage.free_slices[0].tolist() == [0, 0]


def test_with_pod_groups_merges_by_key() -> None:
    snap = ClusterSnapshot.build(_nodes(), pod_groups=[PodGroup("g", 2), PodGroup("h", 1)])
    merged = snap.with_pod_groups([PodGroup("g", 5)])
    assert {k: g.min_member for k, g in merged.pod_groups.items()} == {"default/g": 5, "default/h": 1}
    assert snap.pod_groups["default/g"].min_member == 2


def test_advance_steps_an_owned_copy_forward_and_the_old_snapshot_refuses_use() -> None:
    from gpufleet.model import NodeName, Placement, PodUid
    from gpufleet.testing import make_node

    base = ClusterSnapshot.build([make_node("n1").gpus(2).build()])
    owned = base.owned()
    bind = Placement(PodUid("p"), NodeName("n1"), 100, 10, (0,), 1000, 81920)
    after = owned.advance([bind])
    assert after.placements[PodUid("p")] == bind
    assert int(after.usage.free_whole[0]) == 1
    assert int(base.usage.free_whole[0]) == 2, "owned() copied: the original is untouched"
    with pytest.raises(RuntimeError, match="consumed"):
        owned.usage
    released = after.advance(releases=[PodUid("p")])
    assert int(released.usage.free_whole[0]) == 2 and not released.placements
