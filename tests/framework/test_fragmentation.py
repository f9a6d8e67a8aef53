"""FGD's fragmentation measure: typical tasks from a workload, and F_n for a batch of node states."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.framework.plugins.fragmentation import FragModel, TypicalTask, task_spec, typical_tasks
from gpufleet.model import Cluster
from gpufleet.testing import make_node, make_pod

ANY: frozenset[str] = frozenset()
HALF_AND_WHOLE = (TypicalTask(0, 500, 1, ANY, 0.5), TypicalTask(0, 1000, 1, ANY, 0.5))
# models: 0 = A100-80GB, 1 = T4; -1 = no GPUs
CLUSTER = Cluster([make_node("a").gpus(2, model="A100-80GB").build(), make_node("b").gpus(2, model="T4").build(),
                   make_node("c").build()])

BATCH: list[tuple[str, tuple[TypicalTask, ...], int, int, list[int], float]] = [
    ("idle devices strand nothing", HALF_AND_WHOLE, 0, 64_000, [1000, 1000], 0.0),
    ("a 300-milli remainder is stranded for both tasks", HALF_AND_WHOLE, 0, 64_000, [1000, 300], 300.0),
    ("two halves serve the half task but strand everything for the whole task",
     HALF_AND_WHOLE, 0, 64_000, [600, 600], 600.0),
    ("devices too small for every task strand all their free milli", HALF_AND_WHOLE, 0, 64_000, [200, 200], 400.0),
    ("a full node has nothing to strand", HALF_AND_WHOLE, 0, 64_000, [0, 0], 0.0),
    ("a task that does not fit on the node's CPU strands all free GPU",
     (TypicalTask(4000, 500, 1, ANY, 1.0),), 0, 3999, [1000, 500], 1500.0),
    ("a task not allowed on the node's model strands all free GPU",
     (TypicalTask(0, 500, 1, frozenset({"T4"}), 1.0),), 0, 64_000, [1000, 500], 1500.0),
    ("a task allowed on the node's model counts normally",
     (TypicalTask(0, 500, 1, frozenset({"T4"}), 1.0),), 1, 64_000, [1000, 200], 200.0),
    ("a task needing no GPU strands all free GPU", (TypicalTask(1000, 0, 0, ANY, 1.0),), 0, 64_000, [1000, 400],
     1400.0),
    ("a two-GPU task fits on two whole devices and strands the rest",
     (TypicalTask(0, 1000, 2, ANY, 1.0),), 0, 64_000, [1000, 1000, 500], 500.0),
    ("a two-GPU task with only one whole device strands everything",
     (TypicalTask(0, 1000, 2, ANY, 1.0),), 0, 64_000, [1000, 500, 500], 2000.0),
]


@pytest.mark.parametrize(("tasks", "model", "cpu", "free", "expected"), [c[1:] for c in BATCH],
                         ids=[c[0] for c in BATCH])
def test_fragmentation_of_one_node(tasks: tuple[TypicalTask, ...], model: int, cpu: int, free: list[int],
                                   expected: float) -> None:
    frag = FragModel(CLUSTER, tasks)
    result = frag.batch(np.array([model], dtype=np.int64), np.array([cpu], dtype=np.int64),
                        np.array([free], dtype=np.int64))
    assert result.tolist() == pytest.approx([expected])


def test_batch_evaluates_many_node_states_at_once() -> None:
    frag = FragModel(CLUSTER, HALF_AND_WHOLE)
    free = np.array([[1000, 1000], [1000, 300], [600, 600], [200, 200]], dtype=np.int64)
    result = frag.batch(np.zeros(4, dtype=np.int64), np.full(4, 64_000, dtype=np.int64), free)
    assert result.tolist() == pytest.approx([0.0, 300.0, 600.0, 400.0])


def test_no_tasks_or_no_nodes_give_zero_fragmentation() -> None:
    empty = FragModel(CLUSTER, ())
    assert empty.batch(np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64),
                       np.full((2, 2), 1000, dtype=np.int64)).tolist() == [0.0, 0.0]
    frag = FragModel(CLUSTER, HALF_AND_WHOLE)
    assert frag.batch(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                      np.zeros((0, 2), dtype=np.int64)).shape == (0,)


def test_model_ok_columns_follow_the_cluster_models() -> None:
    frag = FragModel(CLUSTER, (TypicalTask(0, 500, 1, frozenset({"T4"}), 1.0), TypicalTask(0, 500, 1, ANY, 1.0)))
    assert CLUSTER.models == ("A100-80GB", "T4")
    assert frag.model_ok.tolist() == [[False, True, False], [True, True, False]]


def test_task_spec_maps_pods_to_cpu_milli_count_models() -> None:
    assert task_spec(make_pod("w").cpu(4000).gpus(2).models("T4").build()) == (4000, 1000, 2, frozenset({"T4"}))
    assert task_spec(make_pod("f").cpu(500).fraction(250).build()) == (500, 250, 1, ANY)
    assert task_spec(make_pod("c").cpu(100).build()) == (100, 0, 0, ANY)
    assert task_spec(make_pod("m").cpu(100).mig("1g.10gb").build()) == (100, 0, 0, ANY)


def _workload() -> list:  # type: ignore[type-arg]
    pods = [make_pod(f"f{i}").cpu(1000).fraction(500).build() for i in range(6)]
    pods += [make_pod(f"w{i}").cpu(1000).gpus(1).build() for i in range(3)]
    pods += [make_pod("c").cpu(1000).build()]
    return pods


COVERAGE: list[tuple[str, float, list[tuple[int, int, int, float]]]] = [
    ("full coverage keeps every spec, most frequent first", 1.0,
     [(1000, 500, 1, 0.6), (1000, 1000, 1, 0.3), (1000, 0, 0, 0.1)]),
    ("95% coverage still needs the rarest spec here (90% < 95%)", 0.95,
     [(1000, 500, 1, 0.6), (1000, 1000, 1, 0.3), (1000, 0, 0, 0.1)]),
    ("90% coverage drops the tail and renormalises", 0.9, [(1000, 500, 1, 6 / 9), (1000, 1000, 1, 3 / 9)]),
    ("50% coverage keeps only the most frequent spec", 0.5, [(1000, 500, 1, 1.0)]),
]


@pytest.mark.parametrize(("coverage", "expected"), [c[1:] for c in COVERAGE], ids=[c[0] for c in COVERAGE])
def test_typical_tasks_coverage(coverage: float, expected: list[tuple[int, int, int, float]]) -> None:
    tasks = typical_tasks(_workload(), coverage)
    assert [(t.cpu_milli, t.gpu_milli, t.num_gpu) for t in tasks] == [e[:3] for e in expected]
    assert [t.probability for t in tasks] == pytest.approx([e[3] for e in expected])


def test_typical_tasks_ties_keep_first_seen_order() -> None:
    pods = [make_pod("a1").gpus(2).build(), make_pod("b1").fraction(100).build(),
            make_pod("b2").fraction(100).build(), make_pod("a2").gpus(2).build()]
    assert [t.num_gpu for t in typical_tasks(pods, 1.0)] == [2, 1]
    assert [t.num_gpu for t in typical_tasks(list(reversed(pods)), 1.0)] == [2, 1]
    assert [t.gpu_milli for t in typical_tasks(pods[1:3] + pods[:1] + pods[3:], 1.0)] == [100, 1000]


def test_no_pods_give_no_typical_tasks() -> None:
    assert typical_tasks([]) == ()


def test_a_states_fragmentation_does_not_depend_on_the_batch_it_is_in() -> None:
    # Caches and the look-ahead's memo evaluate a state in whatever batch it arrives in; a
    # score that moved by one ulp with the batch would break score ties differently.
    rng = np.random.default_rng(1)
    tasks = tuple(TypicalTask(int(c), int(m), int(n), ANY, float(p)) for c, m, n, p in zip(
        rng.choice([0, 1000, 4000, 16_000], 45), rng.choice([100, 250, 500, 1000], 45),
        rng.choice([0, 1, 1, 2], 45), rng.random(45)))
    frag = FragModel(Cluster([make_node("a").gpus(4).build()]), tasks)
    k = 400
    model = np.zeros(k, dtype=np.int64)
    cpu = rng.choice([0, 2000, 8000, 64_000], k).astype(np.int64)
    free = rng.choice([0, 50, 300, 600, 1000], (k, 4)).astype(np.int64)
    whole = frag.batch(model, cpu, free)
    for start, size in [(0, 1), (3, 2), (7, 5), (20, 17), (100, 250)]:
        part = frag.batch(model[start:start + size], cpu[start:start + size], free[start:start + size])
        assert part.tolist() == whole[start:start + size].tolist()
