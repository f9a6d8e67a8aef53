"""Hierarchical water-filling (`core.fairshare`): hand-worked trees and a brute-force reference.

Every expected number in the hand-worked tests is derived in the comment above it, in whole
GPUs; none is computed by the code under test. The Hypothesis property compares
`fair_shares` with `reference_shares` below, which finds each sibling group's water level by
bisection instead of pouring in rounds.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.core.fairshare import fair_shares, water_fill
from gpufleet.core.quota import GPU_DIM, F64, QueueBook
from gpufleet.model import ClusterSnapshot, Queue, QueueTree
from gpufleet.model.queue import CPU, DEFAULT_QUEUE, GPU, MEMORY
from gpufleet.testing import make_node

G = 1000  # one GPU in GPU-milli
LOTS = 1000  # a demand (in GPUs) larger than any cluster here


def book_of(queues: Sequence[Queue], *, gpus: int, cpu_milli: int = 64_000) -> QueueBook:
    snap = ClusterSnapshot.build([make_node("n0").cpu(cpu_milli).mem_gib(512).gpus(gpus).build()])
    return QueueBook(QueueTree.build(queues), snap.cluster)


def gpu_shares(queues: Sequence[Queue], gpus: int, want: Mapping[str, float]) -> dict[str, float]:
    """Fair GPU share of every queue (in GPUs) when leaf `name` wants `want[name]` GPUs."""
    book = book_of(queues, gpus=gpus)
    want_leaf = np.zeros((len(book.names), len(book.dims)))
    for name, n in want.items():
        want_leaf[book.index[name], GPU_DIM] = n * G
    fair = fair_shares(book, want_leaf)
    return {name: round(float(fair[i, GPU_DIM]) / G, 9) for i, name in enumerate(book.names)}


def gpu(n: float) -> dict[str, int]:
    return {GPU: int(n * G)}


# -- weights ---------------------------------------------------------------------------------

def test_two_siblings_split_by_weight() -> None:
    # 8 GPUs, weights 1:3, both want more than the cluster: a = 8*1/4 = 2, b = 8*3/4 = 6.
    # `default` (always present, weight 1) wants nothing, so it gets nothing.
    shares = gpu_shares([Queue("a", weight=1), Queue("b", weight=3)], 8, {"a": LOTS, "b": LOTS})
    assert shares == {"a": 2, "b": 6, DEFAULT_QUEUE: 0}


def test_three_siblings_split_one_two_one() -> None:
    # 8 GPUs, weights 1:2:1 (sum 4): a = 2, b = 4, c = 2.
    queues = [Queue("a", weight=1), Queue("b", weight=2), Queue("c", weight=1)]
    shares = gpu_shares(queues, 8, {"a": LOTS, "b": LOTS, "c": LOTS})
    assert shares == {"a": 2, "b": 4, "c": 2, DEFAULT_QUEUE: 0}


def test_nested_siblings_share_their_parents_part() -> None:
    # 16 GPUs. Roots `org` and `solo` (weight 1 each) both want plenty: 8 each.
    # Inside org, x:y = 1:3 divide org's 8: x = 2, y = 6 (not 16/4 and 16*3/4).
    queues = [Queue("org"), Queue("x", parent="org", weight=1), Queue("y", parent="org", weight=3),
              Queue("solo")]
    shares = gpu_shares(queues, 16, {"x": LOTS, "y": LOTS, "solo": LOTS})
    assert shares == {"org": 8, "x": 2, "y": 6, "solo": 8, DEFAULT_QUEUE: 0}


def test_weight_of_a_child_does_not_leak_into_its_parents_level() -> None:
    # 12 GPUs. Root `org` has weight 1 and a child of weight 10; root `solo` weight 2.
    # Roots: org = 12*1/3 = 4, solo = 12*2/3 = 8. org's only child gets all of org's 4.
    queues = [Queue("org"), Queue("x", parent="org", weight=10), Queue("solo", weight=2)]
    shares = gpu_shares(queues, 12, {"x": LOTS, "solo": LOTS})
    assert shares == {"org": 4, "x": 4, "solo": 8, DEFAULT_QUEUE: 0}


# -- guarantees ------------------------------------------------------------------------------

def test_guarantees_come_first_then_leftovers_by_weight() -> None:
    # 10 GPUs. a is guaranteed 6, b nothing, equal weights, both want plenty.
    # a first gets 6; the 4 left go 1:1 -> a = 6 + 2 = 8, b = 2.
    queues = [Queue("a", guaranteed=gpu(6)), Queue("b")]
    shares = gpu_shares(queues, 10, {"a": LOTS, "b": LOTS})
    assert shares == {"a": 8, "b": 2, DEFAULT_QUEUE: 0}


def test_guarantee_beyond_what_a_queue_wants_is_lent_out() -> None:
    # 10 GPUs. a is guaranteed 6 but wants 3: it gets 3; b takes the other 7.
    queues = [Queue("a", guaranteed=gpu(6)), Queue("b")]
    shares = gpu_shares(queues, 10, {"a": 3, "b": LOTS})
    assert shares == {"a": 3, "b": 7, DEFAULT_QUEUE: 0}


def test_over_promised_guarantees_are_scaled_down_pro_rata() -> None:
    # 8 GPUs, but roots a and b are guaranteed 8 and 4 (12 in all); c has none.
    # Scale 8/12: a = 8*8/12 = 16/3, b = 4*8/12 = 8/3; nothing is left for c.
    queues = [Queue("a", guaranteed=gpu(8)), Queue("b", guaranteed=gpu(4)), Queue("c")]
    shares = gpu_shares(queues, 8, {"a": LOTS, "b": LOTS, "c": LOTS})
    assert shares == pytest.approx({"a": 16 / 3, "b": 8 / 3, "c": 0, DEFAULT_QUEUE: 0})


def test_over_promise_counts_only_what_each_queue_wants_of_its_guarantee() -> None:
    # 8 GPUs. a is guaranteed 8 but wants 2; b is guaranteed 8 and wants plenty.
    # Claimed guarantees: a min(8, 2) = 2, b 8 -> 10 > 8, scale 8/10: a = 1.6, b = 6.4.
    queues = [Queue("a", guaranteed=gpu(8)), Queue("b", guaranteed=gpu(8))]
    shares = gpu_shares(queues, 8, {"a": 2, "b": LOTS})
    assert shares == pytest.approx({"a": 1.6, "b": 6.4, DEFAULT_QUEUE: 0})


def test_over_promise_one_level_down_scales_the_childrens_guarantees_too() -> None:
    # 8 GPUs. Roots p and q are each guaranteed 8 -> scaled to 4 each.
    # p's children x and y are guaranteed 4 each (8 > p's 4) -> scaled 4/8: 2 each.
    queues = [Queue("p", guaranteed=gpu(8)), Queue("q", guaranteed=gpu(8)),
              Queue("x", parent="p", guaranteed=gpu(4)), Queue("y", parent="p", guaranteed=gpu(4), weight=5)]
    shares = gpu_shares(queues, 8, {"x": LOTS, "y": LOTS, "q": LOTS})
    assert shares == pytest.approx({"p": 4, "q": 4, "x": 2, "y": 2, DEFAULT_QUEUE: 0})


# -- caps: what a queue wants, its limit, borrow=False ---------------------------------------

def test_surplus_of_a_small_queue_is_poured_to_the_others() -> None:
    # 12 GPUs, equal weights. a wants 1, b wants 3, c wants plenty.
    # Level L with 1 + 3 + L = 12 (a and b saturate): L = 8 -> a = 1, b = 3, c = 8.
    # One round of pouring (4 each) would stop at c = 4.
    queues = [Queue("a"), Queue("b"), Queue("c")]
    shares = gpu_shares(queues, 12, {"a": 1, "b": 3, "c": LOTS})
    assert shares == {"a": 1, "b": 3, "c": 8, DEFAULT_QUEUE: 0}


def test_saturation_cascades_over_three_rounds() -> None:
    # 30 GPUs, equal weights. a wants 2, b wants 13, c wants plenty.
    # Level L with 2 + min(13, L) + L = 30 and L >= 13: L = 15 -> a = 2, b = 13, c = 15.
    # Pouring in rounds: 10 each (a stops at 2, rest 8), then 4 each (b stops at 13, rest 1),
    # then c takes the last 1 -- two rounds are not enough (c = 14).
    queues = [Queue("a"), Queue("b"), Queue("c")]
    shares = gpu_shares(queues, 30, {"a": 2, "b": 13, "c": LOTS})
    assert shares == {"a": 2, "b": 13, "c": 15, DEFAULT_QUEUE: 0}


def test_surplus_is_re_poured_by_weight() -> None:
    # 16 GPUs, weights a:b:c = 2:1:1. a wants 2.
    # Level L with 2 + L + L = 16 (a's 2*L > 2, so a saturates): L = 7 -> b = 7, c = 7.
    queues = [Queue("a", weight=2), Queue("b"), Queue("c")]
    shares = gpu_shares(queues, 16, {"a": 2, "b": LOTS, "c": LOTS})
    assert shares == {"a": 2, "b": 7, "c": 7, DEFAULT_QUEUE: 0}


def test_queue_that_may_not_borrow_is_capped_at_its_guarantee() -> None:
    # 8 GPUs. a is guaranteed 2 with borrow=False, b nothing; both want plenty.
    # a gets its 2 and no part of the leftover 6, which all go to b.
    # (With borrow allowed a would get 2 + 6/2 = 5.)
    queues = [Queue("a", guaranteed=gpu(2), borrow=False), Queue("b")]
    assert gpu_shares(queues, 8, {"a": LOTS, "b": LOTS}) == {"a": 2, "b": 6, DEFAULT_QUEUE: 0}
    # Even when b wants only 1, a stays at 2; 5 GPUs are nobody's share.
    assert gpu_shares(queues, 8, {"a": LOTS, "b": 1}) == {"a": 2, "b": 1, DEFAULT_QUEUE: 0}


def test_limit_caps_a_queue_and_the_rest_goes_to_its_siblings() -> None:
    # 8 GPUs, equal weights, a limited to 3: a = 3, b = 5 (not 4 and 4).
    queues = [Queue("a", limit=gpu(3)), Queue("b")]
    assert gpu_shares(queues, 8, {"a": LOTS, "b": LOTS}) == {"a": 3, "b": 5, DEFAULT_QUEUE: 0}


def test_limit_of_an_inner_queue_caps_its_whole_subtree() -> None:
    # 8 GPUs. org (limit 2) holds x and y; solo next to it. Roots: org = 2, solo = 6.
    # x and y split org's 2: 1 each.
    queues = [Queue("org", limit=gpu(2)), Queue("x", parent="org"), Queue("y", parent="org"), Queue("solo")]
    shares = gpu_shares(queues, 8, {"x": LOTS, "y": LOTS, "solo": LOTS})
    assert shares == {"org": 2, "x": 1, "y": 1, "solo": 6, DEFAULT_QUEUE: 0}


def test_a_queue_that_wants_nothing_gets_nothing_even_with_a_guarantee() -> None:
    # 8 GPUs. a (weight 5) and c (guaranteed 4) want nothing: b takes all 8.
    queues = [Queue("a", weight=5), Queue("b"), Queue("c", guaranteed=gpu(4))]
    shares = gpu_shares(queues, 8, {"a": 0, "b": LOTS, "c": 0})
    assert shares == {"a": 0, "b": 8, "c": 0, DEFAULT_QUEUE: 0}


def test_nobody_wanting_anything_leaves_everything_unshared() -> None:
    queues = [Queue("a"), Queue("b", guaranteed=gpu(2))]
    assert gpu_shares(queues, 8, {}) == {"a": 0, "b": 0, DEFAULT_QUEUE: 0}


# -- demand up the tree ----------------------------------------------------------------------

def test_leaf_demand_counts_in_its_grandparent() -> None:
    # 3 levels: org -> team -> {x, y}, plus root solo. 8 GPUs, equal weights.
    # org's demand is x + y = 1 + 2 = 3 (counted through team), so org gets 3 and solo 5.
    # Were the demand only added to team, org would want nothing and solo would take all 8.
    queues = [Queue("org"), Queue("team", parent="org"), Queue("x", parent="team"), Queue("y", parent="team"),
              Queue("solo")]
    shares = gpu_shares(queues, 8, {"x": 1, "y": 2, "solo": LOTS})
    assert shares == {"org": 3, "team": 3, "x": 1, "y": 2, "solo": 5, DEFAULT_QUEUE: 0}


def test_demand_written_on_inner_queues_is_ignored() -> None:
    # Only leaves' rows count: org's own row (100) does not add to x's 2, so org wants 2
    # and solo gets 8 - 2 = 6.
    queues = [Queue("org"), Queue("x", parent="org"), Queue("solo")]
    shares = gpu_shares(queues, 8, {"org": 100, "x": 2, "solo": LOTS})
    assert shares == {"org": 2, "x": 2, "solo": 6, DEFAULT_QUEUE: 0}


def test_dimensions_are_divided_independently() -> None:
    # 8 GPUs and 16 CPUs. a wants 8 GPUs and 2 CPUs, b wants 1 GPU and 16 CPUs, equal weights.
    # GPUs: b saturates at 1, a gets 7. CPUs: a saturates at 2, b gets 14.
    book = book_of([Queue("a"), Queue("b")], gpus=8, cpu_milli=16_000)
    want = np.zeros((len(book.names), len(book.dims)))
    a, b, cpu = book.index["a"], book.index["b"], book.dims.index(CPU)
    want[a, GPU_DIM], want[a, cpu] = 8 * G, 2_000
    want[b, GPU_DIM], want[b, cpu] = 1 * G, 16_000
    fair = fair_shares(book, want)
    assert (fair[a, GPU_DIM], fair[b, GPU_DIM]) == (7 * G, 1 * G)
    assert (fair[a, cpu], fair[b, cpu]) == (2_000, 14_000)


# -- water_fill on its own -------------------------------------------------------------------

def test_water_fill_gives_guarantees_then_pours_by_weight_up_to_the_caps() -> None:
    # avail 10. Claimants (cap, guarantee, weight): (1, 0, 1), (9, 4, 1), (inf, 0, 2).
    # Guarantees: 0, 4, 0 -> rest 6. Level L: 1 (saturated) + (4 + L) + 2L = 10 -> L = 5/3,
    # so the second holds 4 + 5/3 = 17/3 < 9 and the third 10/3.
    share = water_fill(np.array([10.0]), np.array([[1.0], [9.0], [np.inf]]), np.array([[0.0], [4.0], [0.0]]),
                       np.array([1.0, 1.0, 2.0]))
    np.testing.assert_allclose(share[:, 0], [1.0, 17 / 3, 10 / 3])


def test_water_fill_with_room_to_spare_gives_every_cap() -> None:
    share = water_fill(np.array([10.0]), np.array([[1.0], [2.0]]), np.array([[0.0], [0.0]]), np.array([1.0, 3.0]))
    np.testing.assert_allclose(share[:, 0], [1.0, 2.0])


def test_water_fill_divides_only_where_someone_still_wants_more() -> None:
    # Dimension 0: 8 to pour, caps 3 and unlimited -> 3 and 5. Dimension 1: 5 available but
    # nobody wants any -> 0 and 0, without dividing by its zero weight sum (no floating-point
    # error or RuntimeWarning, every cycle, for every dimension nobody asks for).
    with np.errstate(divide="raise", invalid="raise"):
        share = water_fill(np.array([8.0, 5.0]), np.array([[3.0, 0.0], [np.inf, 0.0]]), np.zeros((2, 2)),
                           np.array([1.0, 1.0]))
    np.testing.assert_array_equal(share, [[3.0, 0.0], [5.0, 0.0]])


def test_surplus_is_re_poured_at_cluster_scale() -> None:
    # Memory in MiB on 128 nodes of 512 GiB: 64 TiB = 2^26 MiB, past 2^24, where a float has
    # no digits left for a 1e-9 tolerance (cap - 1e-9 == cap), so a queue at its cap must
    # still count as saturated. a wants 20 TiB, b wants it all, equal weights: each is offered
    # 32 TiB, a keeps 20, and a's 12 TiB surplus goes to b: a = 20 TiB, b = 44 TiB.
    tib = 1024 * 1024
    snap = ClusterSnapshot.build([make_node(f"n{i:03}").mem_gib(512).build() for i in range(128)])
    book = QueueBook(QueueTree.build([Queue("a"), Queue("b")]), snap.cluster)
    mem = book.dims.index(MEMORY)
    want = np.zeros((len(book.names), len(book.dims)))
    want[book.index["a"], mem], want[book.index["b"], mem] = 20 * tib, 64 * tib
    fair = fair_shares(book, want)
    assert (fair[book.index["a"], mem], fair[book.index["b"], mem]) == (20 * tib, 44 * tib)


# -- property: equal to an independent reference ---------------------------------------------

DIMS = (CPU, GPU)


def reference_level_fill(avail: float, cap: list[float], guaranteed: list[float], weight: list[float]) -> list[float]:
    """One sibling group, one dimension, by finding the water level.

    Each claimant first claims min(guarantee, cap); if the claims exceed `avail` they are
    all multiplied by avail / total. Then one common level L >= 0 is sought with
    share_i(L) = min(cap_i, base_i + weight_i * L) summing to `avail` (or every cap, when
    the caps fit), by bisection on L.
    """
    base = [min(g, c) for g, c in zip(guaranteed, cap)]
    total = sum(base)
    if total > avail:
        base = [b * avail / total for b in base]
        return base  # nothing is left to pour
    if sum(cap) <= avail:
        return list(cap)

    def poured(level: float) -> list[float]:
        return [min(c, b + w * level) for c, b, w in zip(cap, base, weight)]

    lo, hi = 0.0, 1.0
    while sum(poured(hi)) < avail:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(poured(mid)) < avail:
            lo = mid
        else:
            hi = mid
    return poured(hi)


def reference_shares(queues: Sequence[Queue], capacity: Mapping[str, float],
                     want_leaf: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Fair share per queue and dimension, worked out from the Queue objects alone."""
    by_name = {q.name: q for q in queues}
    by_name.setdefault(DEFAULT_QUEUE, Queue(DEFAULT_QUEUE))
    kids: dict[str | None, list[str]] = {}
    for q in by_name.values():
        kids.setdefault(q.parent, []).append(q.name)

    def subtree_want(name: str, dim: str) -> float:
        below = kids.get(name, [])
        if not below:
            return want_leaf.get(name, {}).get(dim, 0.0)
        return sum(subtree_want(k, dim) for k in below)

    def cap_of(q: Queue, dim: str) -> float:
        limit = float(q.limit.get(dim, float("inf")))
        g = q.guaranteed.get(dim, 0)
        if not q.borrow and g > 0:  # a queue that may not borrow stops at its guarantee
            limit = min(limit, float(g))
        return min(subtree_want(q.name, dim), limit)

    out: dict[str, dict[str, float]] = {n: {} for n in by_name}

    def divide(parent: str | None, dim: str, avail: float) -> None:
        names = kids.get(parent, [])
        if not names:
            return
        group = [by_name[n] for n in names]
        shares = reference_level_fill(avail, [cap_of(q, dim) for q in group],
                                      [float(q.guaranteed.get(dim, 0)) for q in group],
                                      [float(q.weight) for q in group])
        for q, s in zip(group, shares):
            out[q.name][dim] = s
            divide(q.name, dim, s)

    for dim in DIMS:
        divide(None, dim, capacity[dim])
    return out


@st.composite
def forests(draw: st.DrawFn) -> list[Queue]:
    """Up to 6 queues, depth up to 3; guarantees valid for QueueTree (children fit a parent's
    guarantee where the parent states one) but free to over-promise the cluster."""
    n = draw(st.integers(1, 6))
    parents: list[int | None] = []
    depth: list[int] = []
    for i in range(n):
        options: list[int | None] = [None, *[j for j in range(i) if depth[j] < 3]]
        p = draw(st.sampled_from(options))
        parents.append(p)
        depth.append(1 if p is None else depth[p] + 1)
    names = [f"q{i}" for i in range(n)]
    amounts = st.integers(0, 12).map(lambda k: k * 500)
    guaranteed: list[dict[str, int]] = []
    for _ in range(n):
        guaranteed.append({d: draw(amounts) for d in DIMS if draw(st.booleans())})
    for i in reversed(range(n)):  # children before parents: raise a stated parent guarantee to fit
        for dim, amount in guaranteed[i].items():
            total = sum(guaranteed[k].get(dim, 0) for k in range(n) if parents[k] == i)
            guaranteed[i][dim] = max(amount, total)
    queues = []
    for i in range(n):
        limit = {d: guaranteed[i].get(d, 0) + draw(amounts) for d in DIMS if draw(st.integers(0, 3)) == 0}
        p = parents[i]
        queues.append(Queue(names[i], parent=None if p is None else names[p],
                            weight=draw(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0, 7.0])),
                            guaranteed=guaranteed[i], limit=limit, borrow=draw(st.integers(0, 3)) > 0))
    return queues


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queues=forests(), gpus=st.integers(0, 8), cpus=st.integers(0, 8), data=st.data())
def test_fair_shares_match_the_level_finding_reference(queues: list[Queue], gpus: int, cpus: int,
                                                      data: st.DataObject) -> None:
    book = book_of(queues, gpus=gpus, cpu_milli=cpus * 1000)
    demand = st.integers(0, 16).map(lambda k: k * 500.0)
    want_leaf: dict[str, dict[str, float]] = {}
    want: F64 = np.zeros((len(book.names), len(book.dims)))
    for i, name in enumerate(book.names):  # inner queues get demand too: it must be ignored
        want_leaf[name] = {d: data.draw(demand) for d in DIMS}
        for dim, amount in want_leaf[name].items():
            want[i, book.dims.index(dim)] = amount
    fair = fair_shares(book, want)
    expected = reference_shares(queues, {CPU: cpus * 1000.0, GPU: gpus * float(G)}, want_leaf)
    for i, name in enumerate(book.names):
        for dim in DIMS:
            assert fair[i, book.dims.index(dim)] == pytest.approx(expected[name][dim], abs=1e-6), (name, dim)
    for k, dim in enumerate(book.dims):
        if dim not in DIMS:  # memory and gpu/<model>: nobody wants any
            assert not fair[:, k].any()
