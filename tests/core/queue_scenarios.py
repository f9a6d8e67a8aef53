"""Hypothesis strategies for the queue layer's hard cases: nested queue trees with weights,
guarantees that over-promise the cluster, limits per resource and per GPU model, elastic
gangs (minMember < members, maxMember above or below the number of members)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from hypothesis import strategies as st

from gpufleet.core.cycle import schedule
from gpufleet.core.context import QueueContext
from gpufleet.core.result import CycleResult
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.model import ClusterSnapshot, NodeInfo, Placement, PodGroup, PodSpec, Queue, QueueTree
from gpufleet.testing import make_node, make_pod

G = 1000
MODELS = ("T4", "A100-80GB")
NOW = 1000.0


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[NodeInfo, ...]
    queues: tuple[Queue, ...]
    groups: tuple[PodGroup, ...]
    first: tuple[PodSpec, ...]
    """Admitted at t=0 under the same queues (fair order, no preemption)."""
    later: tuple[PodSpec, ...]

    @property
    def tree(self) -> QueueTree:
        return QueueTree.build(self.queues)

    def leaves(self) -> list[str]:
        tree = self.tree
        return [q for q in tree.queues if not tree.children.get(q)]


@st.composite
def queue_trees(draw: st.DrawFn, gpus_in_cluster: int) -> tuple[Queue, ...]:
    """3 to 6 queues up to three levels deep; guarantees may add up to twice the cluster."""
    n = draw(st.integers(3, 6))
    parents: dict[str, str | None] = {}
    depth: dict[str, int] = {}
    for i in range(n):
        name = f"q{i}"
        options: list[str | None] = [None, *(p for p in parents if depth[p] < 3)]
        parent = draw(st.sampled_from(options))
        parents[name] = parent
        depth[name] = 1 if parent is None else depth[parent] + 1
    guaranteed: dict[str, int] = {}
    out: list[Queue] = []
    for name, parent in parents.items():  # parents come before their children
        room = 2 * gpus_in_cluster if parent is None else guaranteed.get(parent, 0) - sum(
            guaranteed.get(s, 0) for s, p in parents.items() if p == parent and s != name and s in guaranteed)
        g = draw(st.integers(0, max(room, 0))) if draw(st.booleans()) else 0
        if g:
            guaranteed[name] = g
        limit: dict[str, int] = {}
        if draw(st.integers(0, 2)) == 0:
            limit["gpu"] = max(g, draw(st.integers(0, gpus_in_cluster))) * G
        if draw(st.integers(0, 2)) == 0:
            limit[f"gpu/{draw(st.sampled_from(MODELS))}"] = draw(st.integers(0, 4)) * G
        out.append(Queue(name, parent=parent, weight=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                         guaranteed={"gpu": g * G} if g else {}, limit=limit,
                         borrow=draw(st.integers(0, 4)) > 0))
    return tuple(out)


@st.composite
def pods(draw: st.DrawFn, prefix: str, created: float, leaves: Sequence[str], groups: list[PodGroup],
         gangs: bool = True) -> list[PodSpec]:
    out: list[PodSpec] = []
    for i in range(draw(st.integers(0, 10))):
        queue = draw(st.sampled_from([*leaves, "default"]))
        prio = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["gpu", "gpu", "frac", "cpu", "model"] + (["gang", "gang"] if gangs else [])))
        b = make_pod(f"{prefix}{i}").queue(queue).priority(prio).created(created + i).cpu(1000)
        if kind == "gang":
            members = draw(st.integers(2, 4))
            min_member = draw(st.integers(1, members))
            max_member = draw(st.sampled_from([None, members, members + 1, max(min_member, members - 1)]))
            name = f"g-{prefix}{i}"
            groups.append(PodGroup(name, min_member, max_member=max_member))
            size = draw(st.sampled_from([1, 2]))
            out.extend(make_pod(f"{prefix}{i}m{m}").queue(queue).priority(prio).created(created + i).cpu(1000)
                       .gpus(size).gang(name).build() for m in range(members))
            continue
        if kind == "gpu":
            b = b.gpus(draw(st.sampled_from([1, 1, 2, 4])))
        elif kind == "model":
            b = b.gpus(draw(st.sampled_from([1, 2]))).models(draw(st.sampled_from(MODELS)))
        elif kind == "frac":
            b = b.fraction(draw(st.sampled_from([250, 500])))
        out.append(b.build())
    return out


@st.composite
def scenarios(draw: st.DrawFn, gangs: bool = True) -> Scenario:
    nodes = tuple(make_node(f"n{i}").cpu(32_000).mem_gib(256).gpus(4, model=draw(st.sampled_from(MODELS))).build()
                  for i in range(draw(st.integers(1, 4))))
    queues = draw(queue_trees(4 * len(nodes)))
    tree = QueueTree.build(queues)
    leaves = [q for q in tree.queues if not tree.children.get(q)]
    groups: list[PodGroup] = []
    first = draw(pods("r", 0.0, leaves, groups, gangs))
    later = draw(pods("p", 100.0, leaves, groups, gangs))
    return Scenario(nodes, queues, tuple(groups), tuple(first), tuple(later))


def cycle(snap: ClusterSnapshot, todo: Sequence[PodSpec], cfg: QueueingConfig, tree: QueueTree,
          now: float = NOW) -> CycleResult:
    return schedule(snap, todo, build_profile(ProfileSettings(queueing=cfg)), now=now,
                    rng=random.Random(0), queues=QueueContext(tree))


def admitted(s: Scenario) -> ClusterSnapshot:
    """The cluster with `s.first` placed by the queue-aware cycle at t=0 (within the same limits)."""
    snap = ClusterSnapshot.build(list(s.nodes), pod_groups=s.groups)
    return snap.apply(cycle(snap, s.first, QueueingConfig(order="fair"), s.tree, now=0.0).binds)


def after(snap: ClusterSnapshot, result: CycleResult) -> list[Placement]:
    """What runs once the cycle's evictions are done and its binds and nominations start."""
    gone = {e.pod for e in result.evictions}
    return [p for p in [*snap.placements.values(), *result.binds, *result.nominated] if p.pod not in gone]
