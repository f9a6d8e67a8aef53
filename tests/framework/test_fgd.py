"""FGD: score = int(100 * sigmoid((F_before - F_after) / 1000)); fractions try every device and keep the best."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
from pluginkit import bound, holding, run, scores, snapshot, state

from gpufleet.framework.plugins.fgd import Fgd, FgdArgs
from gpufleet.framework.plugins.fragmentation import TypicalTask
from gpufleet.model import Cluster, ClusterSnapshot, NodeInfo, Placement, PodSpec, Usage
from gpufleet.testing import make_node, make_pod

ANY: frozenset[str] = frozenset()
HALF_AND_WHOLE = (TypicalTask(0, 500, 1, ANY, 0.5), TypicalTask(0, 1000, 1, ANY, 0.5))
GIB = 1024

# a: two idle GPUs (F = 0) | b: GPU 0 has 600 free (F = 0.5 * 600 = 300 for the whole-GPU task)
TWO = [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()]
B_PARTLY = [holding("r", "b", gpus=(0,), milli=400)]

Case = tuple[str, tuple[TypicalTask, ...], Sequence[NodeInfo], Sequence[Placement], PodSpec, list[float],
             dict[int, tuple[int, ...]]]
CASES: list[Case] = [
    # a: either device -> [600, 1000], F 300, delta -300 -> 42 (first device kept)
    # b: device 0 -> [200, 1000], F 200, delta +100 -> 52; device 1 -> [600, 600], F 600 -> 42
    ("a fraction is scored on its best device, and that device is the one it gets",
     HALF_AND_WHOLE, TWO, B_PARTLY, make_pod("p").cpu(0).fraction(400).build(), [42.0, 52.0], {0: (0,), 1: (0,)}),
    # a: [0, 1000] F 0 -> 50 | b: first free device is 1 -> [600, 0], F stays 300 -> 50
    ("a whole GPU that changes no node's fragmentation scores 50 everywhere",
     HALF_AND_WHOLE, TWO, B_PARTLY, make_pod("p").cpu(0).gpus(1).build(), [50.0, 50.0], {0: (0,), 1: (1,)}),
    # a: 6000 cores, task needs 4000; taking 3000 strands 2000 milli: 100 * sigmoid(-2) = 11.9 -> 11
    ("a CPU-only pod that starves a node's CPU strands its GPUs and scores low",
     (TypicalTask(4000, 1000, 1, ANY, 1.0),), [make_node("a").cpu(6000).gpus(2).build(),
                                              make_node("b").cpu(64_000).gpus(2).build()],
     [], make_pod("p").cpu(3000).build(), [11.0, 50.0], {}),
    # only F_after matters; a MIG pod leaves the non-MIG devices as they were
    ("a MIG pod changes no GPU fragmentation",
     HALF_AND_WHOLE, [make_node("a").gpus(2).mig(1, "1g.10gb").build()], [], make_pod("p").cpu(0).mig("1g.10gb").build(),
     [50.0], {}),
    # device 0 has 500 milli but 1 GiB free; only device 1 has the memory. F is 0 either way.
    ("a fraction with a GPU-memory request only tries devices with enough free memory",
     (TypicalTask(0, 300, 1, ANY, 1.0),),
     [make_node("a").gpus(2, model="T4", mem_gib=16).build(), make_node("b").gpus(1, model="T4", mem_gib=16).build()],
     [holding("r", "a", gpus=(0,), milli=500, gpu_mem_mib=15 * GIB)],
     make_pod("p").cpu(0).fraction(500, mem_mib=4 * GIB).build(), [50.0, 50.0], {0: (1,), 1: (0,)}),
    ("without typical tasks every node scores 50",
     (), TWO, B_PARTLY, make_pod("p").fraction(400).build(), [50.0, 50.0], {}),
]


@pytest.mark.parametrize(("tasks", "nodes", "running", "pod", "expected", "devices"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_fgd_scores_and_devices(tasks: tuple[TypicalTask, ...], nodes: Sequence[NodeInfo],
                                running: Sequence[Placement], pod: PodSpec, expected: list[float],
                                devices: dict[int, tuple[int, ...]]) -> None:
    snap = snapshot(nodes, running)
    fgd = Fgd(FgdArgs(tasks))
    assert scores(fgd, snap, pod) == expected
    for node, chosen in devices.items():
        st = state()
        fgd.score(st, pod, snap, np.arange(snap.cluster.n_nodes))
        assert fgd.pick_devices(st, pod, snap, node) == chosen


def test_fgd_places_a_fraction_where_fragmentation_drops() -> None:
    result = run(TWO, [make_pod("p").cpu(0).fraction(400).build()], "FGD", running=B_PARTLY, tasks=HALF_AND_WHOLE)
    assert bound(result) == {"p": ("b", (0,))}


def test_fgd_never_overcommits_gpu_memory_through_its_device_choice() -> None:
    nodes = [make_node("a").gpus(2, model="T4", mem_gib=16).build(), make_node("b").gpus(1, model="T4").build()]
    running = [holding("r", "a", gpus=(0,), milli=500, gpu_mem_mib=15 * GIB)]
    result = run(nodes, [make_pod("p").cpu(0).fraction(500, mem_mib=4 * GIB).build()], "FGD", running=running,
                 tasks=(TypicalTask(0, 300, 1, ANY, 1.0),))
    assert bound(result) == {"p": ("a", (1,))}
    after = snapshot(nodes, running).apply(result.binds)
    assert [after.usage.overcommitted(i) for i in range(2)] == [None, None]


# a: GPU 0 has 600 free, GPU 1 has 300 free. Task (300 milli): a 250 fraction on GPU 0 leaves [350, 300] (F 0,
# score 50); on GPU 1 it leaves [600, 50] (F 50, score 48). FGD wants GPU 0; the tightest device is GPU 1.
ONE_NODE = [make_node("a").gpus(2).build()]
ONE_NODE_RUNNING = [holding("r0", "a", gpus=(0,), milli=400), holding("r1", "a", gpus=(1,), milli=700)]
SMALL_TASK = (TypicalTask(0, 300, 1, ANY, 1.0),)


def test_fgd_device_choice_is_used_when_several_nodes_are_feasible() -> None:
    nodes = ONE_NODE + [make_node("b").gpus(1).build()]
    result = run(nodes, [make_pod("p").cpu(0).fraction(250).build()], "FGD", running=ONE_NODE_RUNNING,
                 tasks=SMALL_TASK)
    assert bound(result) == {"p": ("a", (0,))}


def test_fgd_device_choice_is_used_when_one_node_is_feasible() -> None:
    result = run(ONE_NODE, [make_pod("p").cpu(0).fraction(250).build()], "FGD", running=ONE_NODE_RUNNING,
                 tasks=SMALL_TASK)
    assert bound(result) == {"p": ("a", (0,))}


def test_fgd_recompiles_its_typical_tasks_for_every_new_cluster() -> None:
    """A cluster's id() is reused once it is freed; FGD must not keep the old cluster's model columns."""
    tasks = (TypicalTask(0, 1000, 1, frozenset({"A100-80GB"}), 1.0),)
    fgd = Fgd(FgdArgs(tasks))
    pod = make_pod("p").cpu(0).gpus(1).build()
    old_nodes = [make_node("x").gpus(1, model="T4").build()]
    new_nodes = [make_node("a").gpus(2, model="A100-80GB").build(), make_node("b").gpus(1, model="T4").build()]
    for _ in range(10):
        old = Cluster(old_nodes)
        scores(fgd, ClusterSnapshot(old, Usage(old), {}, {}), pod)
        del old  # freed at once (refcount); no gc.collect(), which would shuffle the free lists
        cluster = Cluster(new_nodes)  # usually at the freed cluster's address
        new = ClusterSnapshot(cluster, Usage(cluster), {}, {})
        # a: the task still fits on the other A100, F stays 0 -> 50.
        # b: the task is not allowed on a T4, so all its free milli is stranded: F 1000 -> 0, delta +1000 -> 73.
        assert scores(fgd, new, pod) == scores(Fgd(FgdArgs(tasks)), new, pod) == [50.0, 73.0]
