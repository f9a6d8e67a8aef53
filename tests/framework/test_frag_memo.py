"""The fragmentation scorers' two paths give the same numbers.

A spec's first pod scores every node in one NumPy batch; later pods score the few nodes
that changed one by one through memos keyed by node state with devices sorted
(`FragScorer` in fgd.py). These tests score random clusters both ways and compare exactly.
"""

from __future__ import annotations

import random
from typing import Callable

import numpy as np
import pytest

from gpufleet.framework.plugins import fgd
from gpufleet.framework.plugins.fgd import ONE_BY_ONE_MAX, Fgd, FgdArgs, FragScorer, _distinct_rows
from gpufleet.framework.plugins.frag_aware import FragAware, FragAwareArgs, TightScore
from gpufleet.framework.plugins.fragmentation import TypicalTask
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodSpec, PodUid
from gpufleet.testing import make_node, make_pod

MODELS = ("A100-40GB", "H100-80GB")
TASKS = (TypicalTask(4000, 1000, 1, frozenset(), 0.3), TypicalTask(2000, 500, 1, frozenset(), 0.2),
         TypicalTask(1000, 250, 1, frozenset({"A100-40GB"}), 0.15), TypicalTask(8000, 1000, 2, frozenset(), 0.1),
         TypicalTask(6000, 0, 0, frozenset(), 0.1), TypicalTask(16000, 1000, 4, frozenset({"H100-80GB"}), 0.15))


def random_cluster(rng: random.Random, n: int) -> ClusterSnapshot:
    """`n` nodes of two models with 4 or 8 GPUs, shares and whole GPUs running, some devices
    sick or split by MIG; many nodes alike, as in a real cluster."""
    nodes: list[NodeInfo] = []
    running: list[Placement] = []
    for i in range(n):
        name = f"n{i:03d}"
        model = rng.choice(MODELS)
        count = rng.choice((4, 8))
        b = make_node(name).cpu(rng.choice((32_000, 64_000, 96_000))).gpus(count, model=model, mem_gib=40)
        if rng.random() < 0.05:
            b = b.unhealthy(rng.randrange(count))
        if model == "A100-40GB" and rng.random() < 0.1:
            b = b.mig(0, "3g.20gb")
        nodes.append(b.build())
        cpu_left = 20_000
        for d in range(1, count):
            kind = rng.random()
            if kind < 0.3:
                continue
            milli = 1000 if kind > 0.8 else rng.choice((100, 250, 300, 500, 700))
            cpu = rng.choice((0, 1000, 2000, 4000))
            if cpu > cpu_left:
                continue
            cpu_left -= cpu
            mem = 0 if milli == 1000 else rng.choice((0, 4096, 10_240))
            running.append(Placement(PodUid(f"r{i}-{d}"), NodeName(name), cpu, 0, (d,), milli, mem))
    return ClusterSnapshot.build(nodes, running)


def random_pods(rng: random.Random) -> list[PodSpec]:
    pods = [make_pod("cpu").cpu(rng.choice((1000, 7000, 30_000))).build(),
            make_pod("mig").cpu(1000).mig("3g.20gb").build()]
    for i in range(4):
        pods.append(make_pod(f"share{i}").cpu(rng.choice((0, 2000, 5000)))
                    .fraction(rng.choice((100, 250, 300, 500, 600)), rng.choice((0, 0, 2048, 20_480))).build())
    for i, n in enumerate((1, 2, 4, 8)):
        pods.append(make_pod(f"whole{i}").cpu(rng.choice((1000, 8000))).gpus(n).build())
    pods.append(make_pod("model").cpu(2000).fraction(500).models("H100-80GB").build())
    return pods


SCORERS: dict[str, Callable[[], FragScorer]] = {
    "FGD": lambda: Fgd(FgdArgs(TASKS)).scorer,
    "FragAware": lambda: FragAware(FragAwareArgs(), TASKS).scorer,
    "FragAware look-ahead": lambda: FragAware(FragAwareArgs(lookahead=True), TASKS).scorer,
}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", sorted(SCORERS))
def test_scoring_nodes_one_by_one_gives_what_one_batch_gives(policy: str, seed: int) -> None:
    rng = random.Random(seed)
    snap = random_cluster(rng, 3 * ONE_BY_ONE_MAX)
    every = np.arange(snap.cluster.n_nodes)
    for pod in random_pods(rng):
        batch: FragScorer = SCORERS[policy]()
        at_once = batch.scores(pod, snap, every)
        one_by_one: FragScorer = SCORERS[policy]()
        # A few nodes per call, as when only the nodes the last pods went to have changed.
        parts = [one_by_one.scores(pod, snap, every[i:i + 5]) for i in range(0, len(every), 5)]
        assert np.concatenate(parts).tolist() == at_once.tolist(), pod.uid
        assert one_by_one.devices(pod)[every].tolist() == batch.devices(pod)[every].tolist(), pod.uid
        assert np.isfinite(at_once).any(), pod.uid          # the cluster has room for every pod


NO_TASKS: dict[str, tuple[Callable[[], FragScorer], float]] = {
    "FGD": (lambda: Fgd(FgdArgs()).scorer, 50.0),
    "FragAware": (lambda: FragAware(FragAwareArgs(), ()).scorer, 52.0),
    "FragAware look-ahead": (lambda: FragAware(FragAwareArgs(lookahead=True), ()).scorer, 52.0),
}


@pytest.mark.parametrize("policy", sorted(NO_TASKS))
def test_without_typical_tasks_every_node_scores_alike_either_way(policy: str) -> None:
    # A profile built without the task mix (no workload seen yet): F and V are 0 everywhere,
    # so a whole GPU scores FGD's 50 on every node (plus FragAware's full tightness weight).
    make, expected = NO_TASKS[policy]
    snap = random_cluster(random.Random(7), 2 * ONE_BY_ONE_MAX)
    every = np.arange(snap.cluster.n_nodes)
    pod = make_pod("p").cpu(1000).gpus(1).build()
    at_once = make().scores(pod, snap, every)
    one_by_one = make()
    parts = [one_by_one.scores(pod, snap, every[i:i + 5]) for i in range(0, len(every), 5)]
    assert np.concatenate(parts).tolist() == at_once.tolist() == [expected] * len(every)


def test_distinct_rows_finds_the_rows_np_unique_finds_even_when_hashes_collide(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    rng = np.random.default_rng(0)
    key = rng.integers(0, 4, size=(500, 6))
    for _ in range(2):
        first, inverse = _distinct_rows(key)
        assert (key[first][inverse] == key).all()
        assert len(first) == len(np.unique(key, axis=0))
        monkeypatch.setattr(fgd, "_ROW_HASH", np.zeros(64, dtype=np.int64))   # every row hashes alike


@pytest.mark.parametrize("score", [fgd.OptionScore(), TightScore(2.0), TightScore(0.5)], ids=["fgd", "tight2", "tight05"])
def test_an_options_score_is_the_same_float_from_arrays_and_from_lists(score: fgd.OptionScore) -> None:
    rng = np.random.default_rng(3)
    before = rng.uniform(0, 8000, 20_000).round(rng.integers(0, 4))
    after = np.concatenate((before[:5000], rng.uniform(0, 8000, 15_000)))       # ties (score 50) too
    leftover = rng.integers(0, 1000, 20_000).astype(np.float64)
    want = score.batch(before, after, leftover).tolist()
    got = [score.each(before[i:i + 3].tolist(), after[i:i + 3].tolist(), leftover[i:i + 3].tolist())
           for i in range(0, 20_000, 3)]
    assert [x for chunk in got for x in chunk] == want


@pytest.mark.parametrize("policy", sorted(SCORERS))
def test_a_scorer_moved_to_other_clusters_scores_as_a_fresh_one(policy: str) -> None:
    # The simulator and the planner's checks hand one scorer new clusters; its state memos
    # carry over when the GPU models are the same and reset otherwise (the third cluster has
    # one model, so model ids mean something else there).
    rng = random.Random(11)
    reused = SCORERS[policy]()
    one_model = ClusterSnapshot.build([make_node(f"h{i}").cpu(64_000).gpus(8, model="H100-80GB", mem_gib=40).build()
                                       for i in range(3)])
    clusters = [random_cluster(rng, 8), random_cluster(rng, 14), one_model, random_cluster(rng, 20),
                random_cluster(rng, 26)]
    models_seen = set()
    for snap in clusters:
        models_seen.add(snap.cluster.models)
        for pod in random_pods(rng):
            nodes = np.arange(snap.cluster.n_nodes)
            for part in (nodes[: len(nodes) // 2], nodes):          # a batch, then the rest one by one
                fresh = SCORERS[policy]()
                assert reused.scores(pod, snap, part).tolist() == fresh.scores(pod, snap, part).tolist(), pod.uid
                assert reused.devices(pod)[part].tolist() == fresh.devices(pod)[part].tolist(), pod.uid
    assert len(models_seen) >= 2                                        # both branches of the reset ran
