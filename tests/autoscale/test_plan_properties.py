"""Hypothesis properties of plan() on random clusters, templates and pending pods.

- every pod the plan serves on a new node is bound by `schedule()` on the current cluster
  (with what fits now bound) plus the planned nodes, on the node the plan names for it;
- pool limits (nodes and GPUs, existing nodes of the template included) are never exceeded;
- every pending pod is in exactly one of: fits now, served on a new node, unplaceable.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.autoscale import TEMPLATE_LABEL, NodeTemplate, plan
from gpufleet.core.cycle import schedule
from gpufleet.model import ClusterSnapshot, NodeInfo, PodGroup, PodSpec
from gpufleet.testing import make_node, make_pod
from template_strategies import GIB, MODELS, profile, templates

MIG_LAYOUTS = ((), ("1g.10gb",) * 7, ("3g.40gb", "3g.40gb"))
PROFILE = profile("default")


@st.composite
def pending(draw: st.DrawFn) -> tuple[list[PodSpec], list[PodGroup]]:
    pods: list[PodSpec] = []
    for i in range(draw(st.integers(0, 14))):
        b = make_pod(f"p{i}").cpu(draw(st.sampled_from((500, 2000, 8000)))).mem_mib(4 * GIB).created(float(i))
        kind = draw(st.sampled_from(("cpu", "fraction", "whole", "mig")))
        if kind == "fraction":
            b.fraction(draw(st.sampled_from((100, 250, 500, 700))), draw(st.sampled_from((0, 8 * GIB))))
        elif kind == "whole":
            b.gpus(draw(st.sampled_from((1, 2, 4, 8))))
        elif kind == "mig":
            b.mig(draw(st.sampled_from(("1g.10gb", "3g.40gb"))))
        if kind in ("fraction", "whole") and draw(st.booleans()):
            b.models(*draw(st.sets(st.sampled_from(MODELS), min_size=1, max_size=2)))
        if draw(st.integers(0, 3)) == 0:
            b.tolerate("dedicated", "ml", "NoSchedule")
        pods.append(b.build())
    groups = []
    for g in range(draw(st.integers(0, 2))):
        n, gpus = draw(st.integers(2, 4)), draw(st.sampled_from((1, 2, 8)))
        groups.append(PodGroup(f"g{g}", n))
        pods += [make_pod(f"g{g}-{k}").cpu(4000).mem_mib(8 * GIB).gpus(gpus).gang(f"g{g}").created(100.0 + g)
                 .build() for k in range(n)]
    return pods, groups


@st.composite
def cluster(draw: st.DrawFn, tpls: list[NodeTemplate]) -> list[NodeInfo]:
    nodes = []
    for i in range(draw(st.integers(0, 3))):
        b = make_node(f"n{i}").cpu(32_000).mem_gib(256).gpus(draw(st.sampled_from((1, 2, 4))),
                                                               model=draw(st.sampled_from(MODELS)))
        if tpls and draw(st.booleans()):
            b.label(TEMPLATE_LABEL, draw(st.sampled_from([t.name for t in tpls])))
        nodes.append(b.build())
    return nodes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_served_pods_are_bound_by_the_scheduler_and_pool_limits_hold(data: st.DataObject) -> None:
    tpls = data.draw(templates(layouts=MIG_LAYOUTS, varied_prices=True, pool_limits=True))
    pods, groups = data.draw(pending())
    nodes = data.draw(cluster(tpls))
    snap = ClusterSnapshot.build(nodes, (), groups)
    result = plan(pods, tpls, snap, profile=PROFILE)

    uids = {p.uid for p in pods}
    fits, served, out = set(result.fits_now), result.served, set(result.unplaceable)
    assert fits | served | out == uids
    assert not (fits & served) and not (fits & out) and not (served & out)

    first = schedule(snap, pods, PROFILE, now=0.0, rng=random.Random(0))
    after = snap.apply(first.binds)
    left = [p for p in pods if p.uid not in {b.pod for b in first.binds}]
    checked = ClusterSnapshot.build(nodes + result.nodes(), after.placements.values(), groups)
    bound = {b.pod: b.node for b in schedule(checked, left, PROFILE, now=0.0, rng=random.Random(0)).binds}
    for add in result.add:
        for name, meant in zip(add.names, add.pods):
            assert meant, f"planned node {name} hosts nothing"
            for uid in meant:
                assert bound.get(uid) == name

    for t in tpls:
        existing = [n for n in nodes if n.labels.get(TEMPLATE_LABEL) == t.name]
        new = sum(a.count for a in result.add if a.template.name == t.name)
        if t.max_nodes is not None and new:
            assert len(existing) + new <= t.max_nodes
        if t.max_gpus is not None and new:
            assert sum(len(n.gpus) for n in existing) + new * t.gpus <= t.max_gpus
