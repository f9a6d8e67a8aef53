"""plan().remove: idle and consolidatable GPU nodes, judged by GPU use; gangs never split."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate, plan
from gpufleet.model import ClusterSnapshot, NodeInfo, NodeName, Placement, PodGroup, PodUid
from gpufleet.testing import make_node

GIB = 1024


def node(name: str, gpus: int = 8, template: str | None = None, cpu: int = 64_000) -> NodeInfo:
    b = make_node(name).cpu(cpu).gpus(gpus) if gpus else make_node(name).cpu(cpu)
    if template:
        b.label(TEMPLATE_LABEL, template)
    return b.build()


def run(pod: str, on: str, gpus: tuple[int, ...] = (), cpu: int = 1000, group: str | None = None) -> Placement:
    return Placement(PodUid(f"default/{pod}"), NodeName(on), cpu, 1024, gpus, 1000 if gpus else 0,
                     80 * GIB if gpus else 0, (), group)


TEMPLATES = [NodeTemplate(n, 64_000, 256 * GIB, p, gpu_model="H100-80GB", gpus=8, gpu_mem_mib=80 * GIB)
             for n, p in (("cheap", 10.0), ("dear", 30.0))]


@dataclass
class Case:
    name: str
    nodes: list[NodeInfo]
    running: list[Placement]
    expect: tuple[str, ...]
    groups: list[PodGroup] = field(default_factory=list)
    max_removals: int = 10


CASES = [
    Case("an idle GPU node is removed; its CPU-only pod moves elsewhere",
         [node("a"), node("b")], [run("cpu", "a"), run("w", "b", (0, 1, 2, 3))], ("a",)),
    Case("an idle GPU node whose CPU-only pod fits nowhere else is kept",
         [node("a", cpu=64_000), node("b", cpu=8_000)], [run("big", "a", cpu=60_000), run("w", "b", tuple(range(8)), cpu=6_000)],
         ()),
    Case("a node whose GPU pods fit on other nodes' free GPUs is consolidated",
         [node("a"), node("b")], [run("two", "a", (0, 1)), run("four", "b", (0, 1, 2, 3))], ("a",)),
    Case("busy CPUs do not keep a node whose GPUs are idle",
         [node("a", cpu=64_000), node("b")], [run("cpu", "a", cpu=32_000), run("w", "b", (0,))], ("a",)),
    Case("a node running a member of a gang that cannot move whole is kept",
         [node("a"), node("b")],
         [run("g0", "a", (0, 1, 2, 3), group="default/g"), run("g1", "b", (0, 1, 2, 3), group="default/g"),
          run("other", "b", (4, 5, 6, 7))], (), groups=[PodGroup("g", 2)]),
    Case("a gang that can move whole does not keep its node",
         [node("a"), node("b")],
         [run("g0", "a", (0, 1, 2, 3), group="default/g"), run("g1", "b", (0, 1, 2, 3), group="default/g")],
         ("a",), groups=[PodGroup("g", 2)]),
    Case("nodes without GPUs are never removed", [node("cpu-only", gpus=0), node("b")],
         [run("w", "b", (0,))], ()),
    Case("at most max_removals nodes go, the most expensive idle ones first",
         [node("a", template="cheap"), node("b", template="dear"), node("c", template="dear"), node("d")],
         [run("w", "d", (0,))], ("b", "c"), max_removals=2),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_removals(case: Case) -> None:
    snap = ClusterSnapshot.build(case.nodes, case.running, case.groups)
    result = plan([], TEMPLATES, snap, max_removals=case.max_removals)
    assert result.remove == case.expect
    assert result.add == ()


def test_an_idle_node_that_pending_pods_will_use_is_not_removed() -> None:
    from gpufleet.testing import make_pod
    snap = ClusterSnapshot.build([node("a"), node("b")], [run("w", "b", tuple(range(8)), cpu=6_000)])
    result = plan([make_pod("p").cpu(1000).gpus(4).build()], TEMPLATES, snap)
    assert result.fits_now == ("default/p",) and result.remove == () and result.add == ()


def test_a_removal_trial_sees_the_moving_pods_released_and_leaves_the_working_snapshot_alone() -> None:
    from gpufleet.autoscale.removal import RemovalSettings, Remover
    from gpufleet.framework.profile import build_profile
    from gpufleet.framework.profiles import builtin
    running = [run("g0", "a", (0, 1), group="default/g"), run("g1", "b", (0, 1), group="default/g"), run("x", "b", (2,))]
    snap = ClusterSnapshot.build([node("a"), node("b")], running, [PodGroup("g", 2)])
    remover = Remover(snap, TEMPLATES, build_profile(builtin("default")), {}, RemovalSettings(), 0.0)
    trial = remover._released(running[:2])
    assert list(trial.placements) == ["default/x"] and len(trial.placements) == 1
    assert "default/g0" not in trial.placements and trial.placements["default/x"] == running[2]
    with pytest.raises(KeyError):
        trial.placements["default/g1"]
    assert trial.usage.free_whole.tolist() == [8, 7] and snap.usage.free_whole.tolist() == [6, 5]
    assert len(snap.placements) == 3
