"""plan(): which nodes to add for pending pods (gangs, fractions, MIG, constraints, limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
import pytest

from gpufleet.autoscale import NodeTemplate, Plan, plan
from gpufleet.model import ClusterSnapshot, ModelError, NodeInfo, Placement, PodGroup, PodSpec, PodUid, Taint
from gpufleet.testing import make_node, make_pod

GIB = 1024


def tpl(name: str, gpus: int = 8, model: str | None = "H100-80GB", price: float = 10.0, **kw: object) -> NodeTemplate:
    return NodeTemplate(name, cpu_milli=kw.pop("cpu", 16_000 * max(gpus, 1)),  # type: ignore[arg-type]
                        mem_mib=kw.pop("mem", 128 * GIB * max(gpus, 1)),  # type: ignore[arg-type]
                        price_per_hour=price, gpu_model=model if gpus else None, gpus=gpus,
                        gpu_mem_mib=80 * GIB if gpus else 0, **kw)  # type: ignore[arg-type]


def gang(name: str, n: int, gpus: int) -> list[PodSpec]:
    return [make_pod(f"{name}-{k}").cpu(8000).mem_mib(16 * GIB).gpus(gpus).gang(name).build() for k in range(n)]


def added(p: Plan) -> dict[str, int]:
    return {a.template.name: a.count for a in p.add}


@dataclass
class Case:
    name: str
    pods: list[PodSpec]
    templates: list[NodeTemplate]
    expect_add: dict[str, int]
    groups: list[PodGroup] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    unplaceable_contains: dict[str, str] = field(default_factory=dict)
    busy: bool = True
    """Every GPU of the current nodes is taken."""


CASES = [
    Case("a gang of 8 pods x 8 GPUs that fits nowhere gets 8 nodes of the 8-GPU template in one plan",
         gang("train", 8, 8), [tpl("h100-x8", 8, price=90.0), tpl("h100-x1", 1, price=12.0)],
         {"h100-x8": 8}, groups=[PodGroup("train", 8)]),
    Case("four 250m fractions need one GPU: one 1-GPU node, not four",
         [make_pod(f"f{k}").cpu(1000).fraction(250).build() for k in range(4)],
         [tpl("h100-x8", 8, price=90.0), tpl("h100-x1", 1, price=12.0)], {"h100-x1": 1}),
    Case("MIG pods pick the template whose MIG layout has their profile",
         [make_pod(f"m{k}").cpu(1000).mig("1g.10gb").build() for k in range(5)],
         [tpl("h100-x1", 1, price=5.0), tpl("h100-mig", 1, price=12.0, mig_layout=("1g.10gb",) * 7)],
         {"h100-mig": 1}),
    Case("a model-constrained pod gets its model's template even when another is cheaper",
         [make_pod("p").cpu(1000).gpus(1).models("A100-80GB").build()],
         [tpl("l40s-x1", 1, model="L40S", price=4.0), tpl("a100-x1", 1, model="A100-80GB", price=8.0)],
         {"a100-x1": 1}),
    Case("the cheaper template wins when both fit",
         [make_pod("p").cpu(1000).gpus(1).build()],
         [tpl("a100-x1", 1, model="A100-80GB", price=8.0), tpl("l40s-x1", 1, model="L40S", price=4.0)],
         {"l40s-x1": 1}),
    Case("a full 8-GPU node beats eight 1-GPU nodes when it costs less per pod",
         [make_pod(f"p{k}").cpu(1000).gpus(1).build() for k in range(8)],
         [tpl("h100-x1", 1, price=12.0), tpl("h100-x8", 8, price=90.0)], {"h100-x8": 1}),
    Case("pool limits cap the plan and the leftovers say why",
         [make_pod(f"p{k}").cpu(1000).gpus(1).build() for k in range(3)],
         [tpl("h100-x1", 1, price=12.0, max_nodes=2)], {"h100-x1": 2},
         unplaceable_contains={"p2": "pool limits reached"}),
    Case("a gang bigger than the pool limit is not planned at all",
         gang("big", 4, 8), [tpl("h100-x8", 8, price=90.0, max_gpus=24)], {}, groups=[PodGroup("big", 4)],
         unplaceable_contains={"big-0": "gang default/big of 4 x 8 GPUs exceeds the pool limits"}),
    Case("a pod whose GPU model no template has is reported",
         [make_pod("t4").cpu(1000).gpus(1).models("T4").build()], [tpl("h100-x1", 1)], {},
         unplaceable_contains={"t4": "no template has GPU model T4"}),
    Case("a pod bigger than every template is reported",
         [make_pod("huge").cpu(1000).gpus(16).build()], [tpl("h100-x8", 8)], {},
         unplaceable_contains={"huge": "too few GPUs"}),
    Case("a pod that does not tolerate a template's taint gets another template",
         [make_pod("p").cpu(1000).gpus(1).build()],
         [tpl("tainted", 1, price=1.0, taints=(Taint("dedicated", "training"),)), tpl("open", 1, price=9.0)],
         {"open": 1}),
    Case("a node selector picks the template with that label",
         [make_pod("p").cpu(1000).gpus(1).selector("pool", "blue").build()],
         [tpl("red", 1, price=1.0, labels={"pool": "red"}), tpl("blue", 1, price=9.0, labels={"pool": "blue"})],
         {"blue": 1}),
    Case("pods that fit on the current nodes need no new node",
         [make_pod("p").cpu(1000).gpus(1).build()], [tpl("h100-x1", 1)], {},
         nodes=[make_node("free").gpus(2).build()], busy=False),
    Case("pool limits count the template's nodes that already exist",
         [make_pod(f"p{k}").cpu(1000).gpus(2).build() for k in range(2)],
         [tpl("h100-x2", 2, price=20.0, max_nodes=2)], {"h100-x2": 1},
         nodes=[make_node("old").gpus(2).label("gpufleet.io/node-template", "h100-x2").build()],
         unplaceable_contains={"p1": "pool limits reached"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan_adds(case: Case) -> None:
    nodes = case.nodes or [make_node("busy").gpus(8).build()]
    running = [p for n in nodes for p in _fill(n)] if case.busy else []
    snap = ClusterSnapshot.build(nodes, running, case.groups)
    result = plan(case.pods, case.templates, snap)
    assert added(result) == case.expect_add
    served = result.served | set(result.fits_now)
    why = {uid.split("/")[1]: text for uid, text in result.unplaceable.items()}
    for pod, text in case.unplaceable_contains.items():
        assert text in why.get(pod, ""), why
    assert served | set(result.unplaceable) == {p.uid for p in case.pods}
    assert result.cost_per_hour_added == sum(a.count * a.template.price_per_hour for a in result.add)


def _fill(node: NodeInfo) -> list[Placement]:
    """A running pod holding every GPU of `node`."""
    return [Placement(PodUid(f"default/filler-{node.name}"), node.name, 1000, 1024, tuple(range(len(node.gpus))),
                      1000, 80 * GIB)]


def test_a_gang_is_one_add_with_a_pod_per_node() -> None:
    snap = busy_cluster().with_pod_groups([PodGroup("train", 8)])
    result = plan(gang("train", 8, 8), [tpl("h100-x8", 8, price=90.0)], snap)
    (add,) = result.add
    assert add.count == 8 and len(add.pods) == 8
    assert sorted(uid for node in add.pods for uid in node) == sorted(f"default/train-{k}" for k in range(8))
    assert all(len(node) == 1 for node in add.pods)


def test_the_summary_names_templates_counts_and_reasons() -> None:
    pods = [make_pod("p").cpu(1000).gpus(1).build(), make_pod("t4").cpu(1000).gpus(1).models("T4").build()]
    result = plan(pods, [tpl("h100-x1", 1, price=12.0, start_delay_s=90.0)], busy_cluster())
    text = result.summary()
    assert "add 1 node(s), 12.00/h, ready after 90 s" in text
    assert "+ 1 x h100-x1" in text
    assert "no template has GPU model T4" in text


def busy_cluster() -> ClusterSnapshot:
    """One 8-GPU node with every GPU taken: nothing pending fits on it."""
    node = make_node("busy").gpus(8).build()
    return ClusterSnapshot.build([node], _fill(node), [])


def test_template_names_must_be_unique() -> None:
    with pytest.raises(ModelError, match="name"):
        plan([], [tpl("a", 1), tpl("a", 2)], busy_cluster())


def test_without_the_check_the_search_reports_its_own_packing() -> None:
    pods = [make_pod(f"f{k}").cpu(1000).fraction(250).build() for k in range(4)] + gang("train", 2, 8)
    snap = busy_cluster().with_pod_groups([PodGroup("train", 2)])
    tpls = [tpl("h100-x8", 8, price=90.0), tpl("h100-x1", 1, price=12.0)]
    quick, checked = plan(pods, tpls, snap, check=False), plan(pods, tpls, snap)
    assert added(quick) == added(checked) == {"h100-x8": 2, "h100-x1": 1}
    assert quick.served == checked.served == {p.uid for p in pods}
