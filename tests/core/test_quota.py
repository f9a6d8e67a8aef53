"""QueueBook, the core's queue accounting, and explain()'s per-reason node counts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from gpufleet.core.explain import explain
from gpufleet.core.quota import QueueBook, mig_milli
from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.interfaces import FilterPlugin, View
from gpufleet.model import Cluster, NodeInfo, NodeName, Placement, PodSpec, PodUid, Queue, QueueTree
from gpufleet.model.cluster import Usage
from gpufleet.testing import make_node, make_pod

CPU, MEM, GPU = 0, 1, 2


def _book(queues: list[Queue], nodes: list[NodeInfo]) -> QueueBook:
    return QueueBook(QueueTree.build(queues), Cluster(nodes))


def _gpu_nodes() -> list[NodeInfo]:
    """Node 0: 1 T4; node 1: 3 A100-80GB (models sort as A100-80GB, T4)."""
    return [make_node("a").cpu(8000).mem_mib(4096).gpus(1, model="T4").build(),
            make_node("b").cpu(8000).mem_mib(4096).gpus(3, model="A100-80GB").build()]


def test_without_borrowing_the_limit_is_capped_at_the_guarantee_where_there_is_one() -> None:
    book = _book([Queue("q", guaranteed={"cpu": 1, "gpu": 2000}, limit={"gpu": 2500}, borrow=False),
                  Queue("open", guaranteed={"cpu": 1}, limit={"cpu": 5})], _gpu_nodes())
    q, o = book.index["q"], book.index["open"]
    assert book.limit[q, CPU] == 1  # a guarantee of 1 still caps
    assert book.limit[q, GPU] == 2000  # the lower of limit and guarantee
    assert book.limit[q, MEM] == np.inf  # nothing guaranteed: no cap
    assert book.limit[o, CPU] == 5


def test_limited_and_model_limited_cover_the_descendants_of_a_limited_queue() -> None:
    book = _book([Queue("top", limit={"cpu": 1000}), Queue("leaf", parent="top"),
                  Queue("gm", limit={"gpu/T4": 1000}), Queue("gleaf", parent="gm"), Queue("free")],
                 _gpu_nodes())
    limited = {n: book.limited[book.index[n]] for n in book.names}
    model_limited = {n: book.model_limited[book.index[n]] for n in book.names}
    assert limited == {"top": True, "leaf": True, "gm": False, "gleaf": False, "free": False, "default": False}
    assert model_limited == {"top": False, "leaf": False, "gm": True, "gleaf": True, "free": False,
                             "default": False}


def test_capacity_per_gpu_model_counts_only_that_models_gpus() -> None:
    book = _book([], _gpu_nodes())
    assert book.dims == ("cpu", "memory", "gpu", "gpu/A100-80GB", "gpu/T4")
    assert book.capacity.tolist() == [16000, 8192, 4000, 3000, 1000]


def test_a_dimension_without_capacity_never_counts_towards_the_dominant_share() -> None:
    book = _book([], [make_node("c").cpu(1).mem_mib(4096).build()])
    q = book.index["default"]
    assert book.inv_capacity.tolist() == [1.0, 1 / 4096, 0.0]
    book.add(q, book.vector(1, 0, 500))
    assert book.dominant[q] == 1.0  # 1 of the 1 milli-CPU; the 500 GPU-milli of no GPU count 0
    book.add(q, book.vector(-1, 0, 0))
    assert book.dominant[q] == 0.0


def test_only_a_queue_with_a_guarantee_starts_below_it() -> None:
    book = _book([Queue("g", guaranteed={"memory": 1}), Queue("none")], _gpu_nodes())
    assert book.below_guarantee(book.index["g"])
    assert not book.below_guarantee(book.index["none"])
    assert not book.below_guarantee(book.index["default"])


def test_pods_of_an_undefined_queue_are_counted_in_default() -> None:
    book = _book([Queue("q")], _gpu_nodes())
    assert book.queue_of("nope") == book.index["default"]
    assert book.queue_of("nope") == book.index["default"]
    assert book.queue_of("q") == book.index["q"]


def _hold(pod: str, node: str, queue: str, cpu: int = 0, mem: int = 0, gpus: tuple[int, ...] = (),
          milli: int = 0, mig: tuple[int, ...] = ()) -> Placement:
    return Placement(PodUid(pod), NodeName(node), cpu_milli=cpu, mem_mib=mem, gpus=gpus, milli=milli,
                     mig_slices=mig, queue=queue)


def test_load_sums_running_pods_per_queue_and_model_into_every_ancestor() -> None:
    nodes = [*_gpu_nodes(), make_node("m").cpu(8000).mem_mib(4096).gpus(1, model="A100-80GB")
             .mig(0, "3g.40gb", "2g.20gb").build()]
    book = _book([Queue("top"), Queue("leaf", parent="top")], nodes)
    book.load([_hold("p1", "a", "leaf", cpu=100, mem=10, gpus=(0,), milli=1000),
               _hold("p2", "b", "leaf", cpu=200, mem=20, gpus=(0, 1), milli=500),
               _hold("p3", "m", "leaf", cpu=300, mem=30, mig=(0, 1)),
               _hold("p4", "a", "nope", cpu=7, mem=3)])
    mig = mig_milli("3g.40gb") + mig_milli("2g.20gb")
    leaf = [600, 60, 1000 + 1000 + mig, 1000 + mig, 1000]
    assert book.alloc[book.index["leaf"]].tolist() == leaf
    assert book.alloc[book.index["top"]].tolist() == leaf
    assert book.alloc[book.index["default"]].tolist() == [7, 3, 0, 0, 0]


def test_a_pods_vector_names_its_gpu_model_only_when_a_node_is_given() -> None:
    book = _book([], _gpu_nodes())
    pod = make_pod("p").cpu(250).mem_mib(64).gpus(2).build()
    assert book.pod_vector(pod).tolist() == [250, 64, 2000, 0, 0]
    assert book.pod_vector(pod, 0).tolist() == [250, 64, 2000, 0, 2000]
    assert book.pod_vector(pod, 1).tolist() == [250, 64, 2000, 2000, 0]


def test_over_limit_names_the_queue_and_the_amounts() -> None:
    book = _book([Queue("top", limit={"cpu": 1000}), Queue("leaf", parent="top")], _gpu_nodes())
    leaf = book.index["leaf"]
    book.add(leaf, book.vector(1000, 0, 0))
    assert book.over_limit(leaf, book.vector(1, 0, 0)) == (
        "queue top: limit of 1 CPU reached (1 CPU in use, the pod asks 0.001 CPU)")


def test_over_limit_never_reports_a_dimension_the_pod_does_not_ask() -> None:
    book = _book([Queue("q", limit={"cpu": 1000})], _gpu_nodes())
    q = book.index["q"]
    book.add(q, book.vector(2000, 0, 0))  # already over, e.g. limits lowered under running pods
    assert book.over_limit(q, book.vector(0, 512, 1000)) is None


# explain(): fake filters over a 4-node cluster, to pin the counting rules.

@dataclass
class _Filter:
    name: str
    passes: tuple[bool, ...]
    why: tuple[tuple[str, tuple[bool, ...]], ...] = ()

    def filter(self, state: CycleState, pod: PodSpec, view: View) -> np.ndarray:
        return np.array(self.passes, dtype=np.bool_)

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, np.ndarray]]:
        return [(r, np.array(m, dtype=np.bool_)) for r, m in self.why]


@dataclass
class _View:
    cluster: Cluster
    usage: Usage


def _explain(*filters: _Filter) -> str:
    cluster = Cluster([make_node(f"n{i}").cpu(1000).mem_mib(1024).build() for i in range(4)])
    plugins: tuple[FilterPlugin, ...] = filters
    return explain(CycleState(random.Random(0), 0.0), make_pod("p").build(), _View(cluster, Usage(cluster)),
                   plugins)


@pytest.mark.parametrize("filters, message", [
    # the same reason from two filters adds up
    ((_Filter("A", (False, True, True, True), (("Insufficient cpu", (True, False, False, False)),)),
      _Filter("B", (True, False, False, True), (("Insufficient cpu", (False, True, True, False)),))),
     "0/4 nodes are available: 3 Insufficient cpu."),
    # nodes a filter gives no reason for are counted under its name, across filters of that name
    ((_Filter("X", (False, True, True, True)), _Filter("X", (True, False, False, True))),
     "0/4 nodes are available: 3 node(s) didn't pass X."),
    # a node is counted only at the first filter it fails
    ((_Filter("A", (False, True, True, True), (("a", (True, True, True, True)),)),
      _Filter("B", (True, False, True, True), (("b", (True, True, True, True)),)),
      _Filter("C", (False, True, False, True), (("c", (True, True, True, True)),))),
     "0/4 nodes are available: 1 a, 1 b, 1 c."),
])
def test_explain_counts_each_node_once_per_reason(filters: tuple[_Filter, ...], message: str) -> None:
    assert _explain(*filters) == message
