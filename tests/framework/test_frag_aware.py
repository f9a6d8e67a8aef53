"""FragAware (FGD + device tightness) and PreferUsedNodes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gpufleet.core.cycle import schedule
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.plugins.frag_aware import FragAware, FragAwareArgs, LookaheadValue
from gpufleet.framework.plugins.fragmentation import FragModel, TypicalTask
from gpufleet.framework.plugins.prefer_used import PreferUsedNodes
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile
from gpufleet.framework.registry import BuildContext
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid
from gpufleet.testing import make_node, make_pod

WHOLE_ONLY = (TypicalTask(1000, 1000, 1, frozenset(), 1.0),)


def snapshot_with_two_partial_devices() -> ClusterSnapshot:
    """n1: device 0 has 300 free, device 1 has 600 free; the other devices are taken."""
    node = make_node("n1").cpu(64_000).gpus(4).build()
    running = [Placement(PodUid("a"), NodeName("n1"), 0, 0, (0,), 700),
               Placement(PodUid("b"), NodeName("n1"), 0, 0, (1,), 400),
               Placement(PodUid("c"), NodeName("n1"), 0, 0, (2, 3), 1000)]
    return ClusterSnapshot.build([node], running)


def test_a_share_goes_to_the_tightest_device_when_fgd_cannot_tell_them_apart() -> None:
    # Against a whole-GPU-only mix every partly used device is all fragment, so FGD scores
    # both devices alike; FragAware picks the one left fullest.
    snap = snapshot_with_two_partial_devices()
    pod = make_pod("share").cpu(100).fraction(250).build()
    profile = build_profile(ProfileSettings(scores=(ScoreRef("FragAware"),)), BuildContext(WHOLE_ONLY))
    result = schedule(snap, [pod], profile, now=0.0, rng=random.Random(0))
    assert result.binds[0].gpus == (0,)


def test_with_zero_tightness_weight_the_device_choice_is_fgds_first_best() -> None:
    snap = snapshot_with_two_partial_devices()
    pod = make_pod("share").cpu(100).fraction(250).build()
    plugin = FragAware(FragAwareArgs(tightness_weight=0.0), WHOLE_ONLY)
    view = type("V", (), {"cluster": snap.cluster, "usage": snap.usage})()
    state = CycleState(random.Random(0), 0.0)
    plugin.score(state, pod, view, np.array([0]))
    assert plugin.pick_devices(state, pod, view, 0) == (0,)


def test_an_exact_fill_earns_the_full_tightness_weight() -> None:
    snap = snapshot_with_two_partial_devices()
    view = type("V", (), {"cluster": snap.cluster, "usage": snap.usage})()
    exact = make_pod("exact").cpu(100).fraction(300).build()
    loose = make_pod("loose").cpu(100).fraction(200).build()
    plugin = FragAware(FragAwareArgs(tightness_weight=2.0), WHOLE_ONLY)
    s_exact = plugin.score(CycleState(random.Random(0), 0.0), exact, view, np.array([0]))[0]
    s_loose = plugin.score(CycleState(random.Random(0), 0.0), loose, view, np.array([0]))[0]
    assert s_exact - int(s_exact) == pytest.approx(0.0) and s_exact % 1 == 0
    assert s_loose % 1 == pytest.approx(2.0 * 0.9 % 1)


def test_a_tightness_weight_outside_0_to_100_is_rejected() -> None:
    with pytest.raises(ValueError, match="tightnessWeight"):
        FragAware(FragAwareArgs(tightness_weight=-1.0), WHOLE_ONLY)


@pytest.mark.parametrize("running, expected", [((), [0.0, 0.0]), (("n1",), [1.0, 0.0])],
                         ids=["empty nodes score zero", "a node running a pod scores one"])
def test_prefer_used_nodes_scores_nodes_that_run_a_pod(running: tuple[str, ...], expected: list[float]) -> None:
    nodes = [make_node("n1").gpus(1).build(), make_node("n2").gpus(1).build()]
    snap = ClusterSnapshot.build(nodes, [Placement(PodUid(f"p-{n}"), NodeName(n), 100, 10) for n in running])
    view = type("V", (), {"cluster": snap.cluster, "usage": snap.usage})()
    scores = PreferUsedNodes().score(CycleState(random.Random(0), 0.0), make_pod("x").build(), view, np.array([0, 1]))
    assert scores.tolist() == expected


# ---- look-ahead (FragAwareArgs.lookahead)

ANY_A100 = frozenset({"A100-80GB"})
MIX = (TypicalTask(4000, 1000, 1, frozenset(), 0.4), TypicalTask(2000, 500, 1, frozenset(), 0.3),
       TypicalTask(8000, 1000, 2, frozenset(), 0.2), TypicalTask(1000, 0, 0, frozenset(), 0.1))


def test_lookahead_is_off_by_default() -> None:
    assert FragAwareArgs().lookahead is False


def brute_value(model: FragModel, tasks: tuple[TypicalTask, ...], m: int, c: int, row: list[int]) -> float:
    """V of one state (model id m, free CPU c, free milli per device), task by task, device by device."""
    names = TWO_MODELS.models

    def f(cpu: int, free: list[int]) -> float:
        return float(model.batch(np.array([m]), np.array([cpu]), np.array([free]))[0])

    v = 0.0
    for t in tasks:
        outcomes = [f(c, row)]
        allowed = not t.models or names[m] in t.models
        if c >= t.cpu_milli and (t.num_gpu == 0 or allowed):
            if t.num_gpu == 0:
                outcomes.append(f(c - t.cpu_milli, row))
            elif t.gpu_milli < 1000:
                outcomes += [f(c - t.cpu_milli, [x - t.gpu_milli if j == d else x for j, x in enumerate(row)])
                             for d in range(len(row)) if row[d] >= t.gpu_milli]
            elif sum(x == 1000 for x in row) >= t.num_gpu:
                left, taken = [], 0
                for x in row:
                    take = x == 1000 and taken < t.num_gpu
                    taken += take
                    left.append(0 if take else x)
                outcomes.append(f(c - t.cpu_milli, left))
        v += t.probability * min(outcomes)
    return v


TWO_MODELS = ClusterSnapshot.build([make_node("a").cpu(16_000).gpus(4, model="A100-80GB").build(),
                                    make_node("t").cpu(16_000).gpus(4, model="T4").build()]).cluster
MIXED = MIX + (TypicalTask(3000, 300, 1, frozenset({"T4"}), 0.15), TypicalTask(2000, 1000, 4, ANY_A100, 0.05),
               # the same sizes as a task above, other GPU models: one class of placements, gated per task
               TypicalTask(3000, 300, 1, ANY_A100, 0.1), TypicalTask(2000, 500, 1, frozenset({"T4"}), 0.05))


def random_states(k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    model_id = rng.choice([0, 1], size=k).astype(np.int64)
    cpu = rng.integers(0, 20_000, size=k).astype(np.int64)
    free = rng.choice([0, 200, 300, 500, 700, 1000], size=(k, 4)).astype(np.int64)
    return model_id, cpu, free


def test_lookahead_value_is_the_expected_best_fragmentation_after_one_typical_task() -> None:
    # V(s) = sum_m p_m x min over placements of m of F(s + m), F(s) when m does not fit;
    # checked against a direct per-state, per-task, per-device computation, on two GPU
    # models, with tasks restricted to one of them.
    model = FragModel(TWO_MODELS, MIXED)
    model_id, cpu, free = random_states(60, 0)
    expected = [brute_value(model, MIXED, m, c, row)
                for m, c, row in zip(model_id.tolist(), cpu.tolist(), free.tolist())]
    value = LookaheadValue(model)
    assert value.compute(model_id, cpu, free) == pytest.approx(expected)
    assert value.batch(model_id, cpu, free) == pytest.approx(expected)     # through the memo, twice
    assert value.batch(model_id, cpu, free) == pytest.approx(expected)


def test_rounding_free_cpu_down_to_the_tasks_cpu_steps_leaves_the_value_exactly_equal() -> None:
    value = LookaheadValue(FragModel(TWO_MODELS, MIXED))
    model_id, cpu, free = random_states(300, 1)
    rounded = value.model.canonical_cpu(cpu)
    assert (rounded <= cpu).all() and len(set(rounded.tolist())) < len(set(cpu.tolist()))
    assert value.compute(model_id, rounded, free).tolist() == value.compute(model_id, cpu, free).tolist()


def test_a_states_lookahead_value_does_not_depend_on_the_batch_it_is_in() -> None:
    value = LookaheadValue(FragModel(TWO_MODELS, MIXED))
    model_id, cpu, free = random_states(200, 2)
    whole = value.compute(model_id, cpu, free).tolist()
    for i in (0, 13, 77, 199):
        assert value.compute(model_id[i:i + 1], cpu[i:i + 1], free[i:i + 1]).tolist() == [whole[i]]


def test_neither_f_nor_the_lookahead_value_depends_on_the_order_of_a_states_devices() -> None:
    # The memos key a state by its devices sorted; that is exact only if order never matters.
    model = FragModel(TWO_MODELS, MIXED)
    value = LookaheadValue(model)
    model_id, cpu, free = random_states(200, 3)
    shuffled = np.random.default_rng(4).permuted(free, axis=1)
    assert (shuffled != free).any()
    assert model.batch(model_id, cpu, shuffled).tolist() == model.batch(model_id, cpu, free).tolist()
    assert value.compute(model_id, cpu, shuffled).tolist() == value.compute(model_id, cpu, free).tolist()


def test_with_lookahead_the_score_is_fgds_formula_on_the_lookahead_value() -> None:
    node = make_node("n1").cpu(16_000).gpus(4).build()
    snap = ClusterSnapshot.build([node], [Placement(PodUid("a"), NodeName("n1"), 2000, 0, (0,), 500)])
    view = type("V", (), {"cluster": snap.cluster, "usage": snap.usage})()
    pod = make_pod("whole").cpu(4000).gpus(1).build()
    plugin = FragAware(FragAwareArgs(tightness_weight=0.0, lookahead=True), MIX)
    got = plugin.score(CycleState(random.Random(0), 0.0), pod, view, np.array([0]))[0]
    value = LookaheadValue(FragModel(snap.cluster, MIX))
    zero = np.array([0])
    v_before = value.batch(zero, np.array([14_000]), np.array([[500, 1000, 1000, 1000]]))[0]
    v_after = value.batch(zero, np.array([10_000]), np.array([[500, 0, 1000, 1000]]))[0]
    assert got == pytest.approx(np.trunc(100.0 / (1.0 + np.exp(-(v_before - v_after) / 1000.0))))
