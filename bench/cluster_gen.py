"""Synthetic large clusters and pod mixes for benchmarks (deterministic for a seed)."""

from __future__ import annotations

import dataclasses
import random

from gpufleet.model import NodeInfo, PodGroup, PodSpec, Queue
from gpufleet.testing import make_node, make_pod

# (model, GPU memory GiB, NVLink domains per 8-GPU node, share of nodes)
NODE_TYPES = (("H100-80GB", 80, 1, 0.4), ("A100-80GB", 80, 1, 0.3), ("L40S", 48, 4, 0.2), ("A100-40GB", 40, 1, 0.1))


def nodes(n: int, rng: random.Random) -> list[NodeInfo]:
    out = []
    for i in range(n):
        r, acc = rng.random(), 0.0
        for model, mem, domains, share in NODE_TYPES:
            acc += share
            if r < acc:
                break
        b = (make_node(f"node-{i:05d}").cpu(128_000).mem_gib(1024).gpus(8, model=model, mem_gib=mem,
             nvlink_domains=domains, numa_nodes=2)
             .label("topology.gpufleet.io/rack", f"rack-{i // 40}").label("topology.kubernetes.io/zone", f"z{i % 3}"))
        if rng.random() < 0.1:
            b.taint("dedicated", "training")
        out.append(b.build())
    return out


def pods(n: int, rng: random.Random, prefix: str = "") -> tuple[list[PodSpec], list[PodGroup]]:
    """CPU-only 20 %, fractions 35 %, 1/2/4/8 GPUs 30/7/4/2 %, gangs of 4 x 8 GPUs ~2 % of pods."""
    out: list[PodSpec] = []
    groups: list[PodGroup] = []
    models = [t[0] for t in NODE_TYPES]
    while len(out) < n:
        i = len(out)
        r = rng.random()
        if r < 0.02:
            name = f"{prefix}gang-{i}"
            groups.append(PodGroup(name, 4))
            for k in range(4):
                out.append(make_pod(f"{name}-{k}").cpu(32_000).mem_mib(65_536).gpus(8).gang(name)
                           .created(float(i)).build())
            continue
        b = make_pod(f"{prefix}pod-{i:06d}").created(float(i))
        if r < 0.22:
            b.cpu(rng.choice((500, 1000, 2000, 4000))).mem_mib(rng.choice((1024, 4096, 8192)))
        elif r < 0.57:
            b.cpu(rng.choice((2000, 4000, 8000))).mem_mib(16_384).fraction(rng.choice((100, 250, 300, 500, 700)),
                                                                             rng.choice((0, 0, 8192)))
        else:
            count = rng.choices((1, 2, 4, 8), weights=(30, 7, 4, 2))[0]
            b.cpu(8000 * count).mem_mib(32_768 * count).gpus(count)
        if rng.random() < 0.15:
            b.models(*rng.sample(models, 2))
        if rng.random() < 0.1:
            b.tolerate("dedicated", "training", "NoSchedule")
        out.append(b.build())
    return out[:n], groups


def queues(rng: random.Random, gpus: int, departments: int = 10, teams: int = 10) -> list[Queue]:
    """departments x teams leaf queues under department queues. Departments are guaranteed
    80 % of the GPUs between them; teams split their department's guarantee unevenly, some
    may not borrow, some have a GPU limit and a per-model limit."""
    out: list[Queue] = []
    per_dept = 0.8 * gpus * 1000 / departments
    for d in range(departments):
        dept = f"dept-{d}"
        out.append(Queue(dept, weight=rng.choice((1, 1, 2))))
        shares = [rng.random() for _ in range(teams)]
        for t, share in enumerate(shares):
            guaranteed = int(per_dept * share / sum(shares))
            limit = {"gpu": guaranteed * 3} if rng.random() < 0.3 else {}
            if rng.random() < 0.2:
                limit["gpu/H100-80GB"] = guaranteed
            out.append(Queue(f"{dept}-team-{t}", parent=dept, weight=rng.choice((1, 2, 4)),
                             guaranteed={"gpu": guaranteed}, limit=limit, borrow=rng.random() > 0.1))
        out[-teams - 1] = Queue(dept, weight=out[-teams - 1].weight,
                                guaranteed={"gpu": sum(q.guaranteed.get("gpu", 0) for q in out[-teams:])})
    return out


def in_queues(pods: list[PodSpec], leaves: list[str], rng: random.Random) -> list[PodSpec]:
    """The pods spread over `leaves`, with priorities 0..3; a gang stays in one queue."""
    by_group: dict[str, tuple[str, int]] = {}
    out = []
    for p in pods:
        if p.pod_group is not None:
            queue, prio = by_group.setdefault(p.pod_group, (rng.choice(leaves), rng.randrange(4)))
        else:
            queue, prio = rng.choice(leaves), rng.randrange(4)
        out.append(dataclasses.replace(p, queue=queue, priority=prio))
    return out
