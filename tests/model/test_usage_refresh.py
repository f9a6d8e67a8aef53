"""`Usage.refresh_rows` (array operations over many nodes) computes exactly what
`Usage.refresh_row` computes node by node, on random clusters and usage states."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import Cluster, GpuUuid, NodeInfo, NodeName
from gpufleet.model.cluster import ROWS_VECTORISED, Usage
from gpufleet.model.node import Gpu

GIB = 1024
AGGREGATES = ("free_whole", "max_free_milli", "max_free_gmem", "whole_gmem", "free_milli_total", "usable_gpus",
              "max_free_domain", "max_free_numa", "free_slices")


@st.composite
def gpus(draw: st.DrawFn, node: int) -> list[Gpu]:
    out = []
    for j in range(draw(st.integers(0, 8))):
        mig = draw(st.sampled_from(((), (), ("1g.10gb",) * 7, ("3g.40gb", "2g.20gb", "1g.10gb"))))
        out.append(Gpu(GpuUuid(f"GPU-{node}-{j}"), "H100-80GB", draw(st.sampled_from((16, 40, 80))) * GIB, j,
                       draw(st.sampled_from((None, "d0", "d1"))), draw(st.sampled_from((-1, 0, 1))),
                       draw(st.booleans()), mig))
    return out


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    n = draw(st.integers(ROWS_VECTORISED, ROWS_VECTORISED + 8))
    nodes = [NodeInfo(NodeName(f"n{i:03d}"), 64_000, 256 * GIB, gpus=tuple(draw(gpus(i)))) for i in range(n)]
    usage = Usage(Cluster(nodes))
    c = usage.cluster
    for i in range(n):
        for j in range(int(c.gpu_count[i])):
            usage.gpu_used_milli[i, j] = draw(st.sampled_from((0, 0, 100, 500, 1000)))
            usage.gpu_used_mem[i, j] = draw(st.sampled_from((0, 0, GIB, int(c.gpu_mem[i, j]))))
            usage.gpu_healthy[i, j] = draw(st.booleans())
        usage.node_ready[i] = draw(st.sampled_from((True, True, False)))
    for s in range(len(c.slice_gpu)):
        usage.slice_used[s] = draw(st.booleans())
    return usage


def by_row(usage: Usage, rows: list[int]) -> Usage:
    out = usage.copy()
    for i in rows:
        out.refresh_row(i)
    return out


@settings(max_examples=60, deadline=None)
@given(usages(), st.data())
def test_refresh_rows_equals_refresh_row(usage: Usage, data: st.DataObject) -> None:
    n = usage.cluster.n_nodes
    rows = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=ROWS_VECTORISED, max_size=n)))
    expected = by_row(usage, rows)
    got = usage.copy()
    got.refresh_rows(np.array(rows, dtype=np.int64))
    for name in AGGREGATES:
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    untouched = [i for i in range(n) if i not in set(rows)]
    assert np.array_equal(got.version[untouched], usage.version[untouched])
    stamps = got.version[rows]
    assert len(set(stamps.tolist())) == len(rows) and (stamps > usage.version.max()).all()


def test_a_new_usage_has_the_aggregates_of_refresh_row() -> None:
    nodes = [NodeInfo(NodeName(f"n{i:03d}"), 8000, 8 * GIB, gpus=
                      tuple(Gpu(GpuUuid(f"G-{i}-{j}"), "A100", 40 * GIB, j, f"d{j // 4}", j // 2,
                                healthy=(i + j) % 5 != 0) for j in range(i % 9)))
             for i in range(3 * ROWS_VECTORISED)]
    fresh = Usage(Cluster(nodes))
    expected = by_row(fresh, list(range(len(nodes))))
    for name in AGGREGATES:
        assert np.array_equal(getattr(fresh, name), getattr(expected, name)), name
    assert fresh.free_whole.tolist() == [sum((i + j) % 5 != 0 for j in range(i % 9)) for i in range(len(nodes))]


@settings(max_examples=40, deadline=None)
@given(usages(), st.data())
def test_placing_a_pod_without_gpus_keeps_the_gpu_aggregates_and_restamps_the_node(usage: Usage,
                                                                                   data: st.DataObject) -> None:
    from gpufleet.model import Placement, PodUid
    i = data.draw(st.integers(0, usage.cluster.n_nodes - 1))
    current = by_row(usage, list(range(usage.cluster.n_nodes)))  # the drawn state's own aggregates
    got = current.copy()
    got.place(Placement(PodUid("default/cpu"), usage.cluster.names[i], 1000, GIB), i)
    expected = by_row(got, [i])
    for name in AGGREGATES:
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert got.free_cpu[i] == current.free_cpu[i] - 1000 and got.free_pods[i] == current.free_pods[i] - 1
    assert got.version[i] > current.version.max()
    assert np.array_equal(np.delete(got.version, i), np.delete(current.version, i))


@settings(max_examples=60, deadline=None)
@given(usages(), st.data())
def test_overcommitted_rows_finds_exactly_the_nodes_overcommitted_names(usage: Usage, data: st.DataObject) -> None:
    """Each way a node can be overcommitted, drawn on some nodes: the nodes found at once are
    those `overcommitted` finds a reason for one by one."""
    c = usage.cluster
    for i in range(c.n_nodes):
        way = data.draw(st.sampled_from(("none", "none", "cpu", "memory", "pods", "milli", "gpu memory", "negative")))
        gpus = int(c.gpu_count[i])
        if way == "cpu":
            usage.free_cpu[i] = -1
        elif way == "memory":
            usage.free_mem[i] = -1
        elif way == "pods":
            usage.free_pods[i] = -1
        elif gpus and way == "milli":
            usage.gpu_used_milli[i, data.draw(st.integers(0, gpus - 1))] = 1001
        elif gpus and way == "gpu memory":
            j = data.draw(st.integers(0, gpus - 1))
            usage.gpu_used_mem[i, j] = int(c.gpu_mem[i, j]) + 1
        elif gpus and way == "negative":
            usage.gpu_used_milli[i, data.draw(st.integers(0, gpus - 1))] = -1
    rows = sorted(data.draw(st.sets(st.integers(0, c.n_nodes - 1), max_size=c.n_nodes)))
    found = usage.overcommitted_rows(np.array(rows, dtype=np.int64)).tolist()
    assert found == [i for i in rows if usage.overcommitted(i) is not None]
