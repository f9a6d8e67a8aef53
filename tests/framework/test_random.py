"""Random: a uniformly random feasible node and a random fitting device, drawn from the cycle's seeded rng."""

from __future__ import annotations

import random

import numpy as np
from pluginkit import bound, holding, run, snapshot

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.plugins.fgd_baselines import RandomScore
from gpufleet.testing import make_node, make_pod

NODES = [make_node(n).gpus(4).build() for n in "abcdef"]


def test_exactly_one_node_scores_100_and_the_seed_decides_which() -> None:
    snap = snapshot(NODES)
    pod = make_pod("p").gpus(1).build()
    nodes = np.arange(6)
    picks = []
    for seed in range(30):
        s = RandomScore().score(CycleState(random.Random(seed), 0.0), pod, snap, nodes)
        again = RandomScore().score(CycleState(random.Random(seed), 0.0), pod, snap, nodes)
        assert s.tolist() == again.tolist()
        assert sorted(s.tolist()) == [0.0] * 5 + [100.0]
        picks.append(int(np.argmax(s)))
    assert set(picks) == set(range(6))


def test_no_candidates_give_no_scores() -> None:
    pod = make_pod("p").build()
    assert RandomScore().score(CycleState(random.Random(0), 0.0), pod, snapshot(NODES), np.arange(0)).size == 0


def test_the_same_seed_gives_the_same_placements() -> None:
    pods = [make_pod(f"p{i}").fraction(300).build() for i in range(8)]
    first = [bound(run(NODES, pods, "Random", seed=s)) for s in range(10)]
    again = [bound(run(NODES, pods, "Random", seed=s)) for s in range(10)]
    assert first == again
    assert len({tuple(sorted(b.items())) for b in first}) > 1


def test_a_random_fraction_device_is_always_one_that_fits() -> None:
    # a: GPU 0 full, GPU 1 unhealthy, GPU 2 MIG, GPUs 3-5 have room (GPU 5 lacks the GPU memory)
    node = make_node("a").gpus(6, model="A100-80GB").unhealthy(1).mig(2, "7g.80gb").build()
    snap = snapshot([node], [holding("r0", "a", gpus=(0,)), holding("r5", "a", gpus=(5,), milli=100,
                                                                      gpu_mem_mib=79 * 1024)])
    pod = make_pod("p").fraction(500, mem_mib=2048).build()
    chosen = {RandomScore().pick_devices(CycleState(random.Random(seed), 0.0), pod, snap, 0) for seed in range(40)}
    assert chosen == {(3,), (4,)}


def test_whole_and_mig_devices_follow_the_default_choice() -> None:
    node = make_node("a").gpus(4).mig(0, "3g.40gb", "3g.40gb").build()
    snap = snapshot([node])
    st = CycleState(random.Random(0), 0.0)
    assert RandomScore().pick_devices(st, make_pod("p").gpus(2).build(), snap, 0) == (1, 2)
    assert RandomScore().pick_devices(st, make_pod("q").mig("3g.40gb").build(), snap, 0) == (0,)
