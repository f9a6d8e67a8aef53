"""Autoscaling planner speed: 10,000 pending pods, 20 node templates, a 500-node cluster mostly full.

The existing cluster is `cluster_gen.nodes(500)` filled by one `schedule()` of 6,000 pods of
the `cluster_gen.pods()` mix (setup, not timed). The pending pods are 10,000 more of the same
mix, with 5 % of the fractions turned into MIG 1g.10gb requests (the mix has no MIG). The 20
templates cover four GPU models with 1/2/4/8 GPUs, three MIG layouts and one CPU-only node.

`plan()` is timed three ways: with the scheduler check (the default), without it
(`check=False`), and as it was before the check's savings and its repair rule
(`autoscale.check`, `Packer.close_all(prefer=...)`), the baseline: every check a full
queue-aware `schedule()` of all leftover pods on the whole cluster, every removal candidate
scheduled, repairs on the cheapest template, two repair rounds of two copies (today one of
three). `before()` switches those off in place, so the same code runs both. One more run
with only the savings off must give the same plan as the default (the savings are exact);
the bench says whether it did.

Beside `plan()` it runs the Karpenter-like provisioner of the simulator
(`gpufleet.sim.provisioners.karpenter_batch`) on the same pods: pod by pod, a fraction or a MIG
slice counts as a whole GPU, gang members are separate pods; each pod goes on the new node of
the batch with the fewest pods that can still take it, else on a new node, which launches as
the cheapest template that holds all its pods.
Prints a table; with --json the last line is one JSON object.

    .venv/bin/python bench/planner.py [--nodes 500] [--pods 10000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_gen  # noqa: E402

from gpufleet.autoscale import NodeTemplate, Plan, plan  # noqa: E402
from gpufleet.autoscale import check as checking  # noqa: E402
from gpufleet.autoscale.removal import Remover  # noqa: E402
from gpufleet.core import cycle as core_cycle  # noqa: E402
from gpufleet.core.cycle import schedule  # noqa: E402
from gpufleet.framework.profile import build_for  # noqa: E402
from gpufleet.framework.profiles import BUILTIN, builtin  # noqa: E402
from gpufleet.framework.queueing import QueueingConfig  # noqa: E402
from gpufleet.model import ClusterSnapshot, GpuKind, NodeName, PodSpec, mig_slices  # noqa: E402
from gpufleet.sim.provisioners import karpenter_batch  # noqa: E402

planning = importlib.import_module("gpufleet.autoscale.plan")
"""The module (the package's `plan` is the function)."""

GIB = 1024
# (model, GPU memory GiB, price per GPU-hour)
MODELS = (("H100-80GB", 80, 12.0), ("A100-80GB", 80, 8.0), ("L40S", 48, 4.0), ("A100-40GB", 40, 5.0))
MIG_LAYOUTS = (("H100-80GB", ("1g.10gb",) * 7), ("A100-80GB", ("1g.10gb",) * 7),
               ("H100-80GB", ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")))


def templates() -> list[NodeTemplate]:
    out = []
    for model, mem, per_gpu in MODELS:
        for n in (1, 2, 4, 8):
            discount = {1: 1.0, 2: 0.98, 4: 0.96, 8: 0.94}[n]
            out.append(NodeTemplate(f"{model.lower()}-x{n}", 24_000 * n, 192 * GIB * n, round(per_gpu * n * discount, 2),
                                    gpu_model=model, gpus=n, gpu_mem_mib=mem * GIB))
    for k, (model, layout) in enumerate(MIG_LAYOUTS):
        per_gpu = dict((m, p) for m, _, p in MODELS)[model]
        out.append(NodeTemplate(f"{model.lower()}-mig{k}-x4", 96_000, 768 * GIB, per_gpu * 4, gpu_model=model, gpus=4,
                                gpu_mem_mib=80 * GIB, mig_layout=layout))
    out.append(NodeTemplate("cpu-32", 32_000, 128 * GIB, 1.5))
    assert len(out) == 20
    return out


def pending(n: int, rng: random.Random) -> list[PodSpec]:
    pods, _ = cluster_gen.pods(n, rng, prefix="new-")
    out = []
    for p in pods:
        if p.gpu.kind is GpuKind.FRACTION and rng.random() < 0.05:
            p = dataclasses.replace(p, gpu=mig_slices("1g.10gb"), gpu_models=frozenset({"H100-80GB", "A100-80GB"}))
        out.append(p)
    return out


def existing(n_nodes: int, rng: random.Random) -> ClusterSnapshot:
    nodes = cluster_gen.nodes(n_nodes, rng)
    pods, groups = cluster_gen.pods(12 * n_nodes, rng, prefix="run-")
    snap = ClusterSnapshot.build(nodes, (), groups)
    result = schedule(snap, pods, build_for(builtin("default"), pods), now=0.0, rng=random.Random(0))
    return snap.apply(result.binds)


class CountingCheck(checking.Check):
    """`Check` that remembers its last outcome: how many checks ran and how many pods they scheduled."""

    last: checking.Outcome | None = None

    def run(self, planned: Sequence[tuple[NodeName, int]]) -> checking.Outcome:
        out = CountingCheck.last = super().run(planned)
        return out

    def rerun(self, old: checking.Outcome, planned: Sequence[tuple[NodeName, int]]) -> checking.Outcome:
        out = CountingCheck.last = super().rerun(old, planned)
        return out


@contextlib.contextmanager
def counting() -> Iterator[type[CountingCheck]]:
    with patched(checking, "Check", CountingCheck):
        yield CountingCheck


@contextlib.contextmanager
def before(*, repair: bool = True) -> Iterator[None]:
    """The planner as before the check's savings: queue-aware `schedule()` everywhere, every
    check in full on the whole cluster, every removal candidate scheduled; with `repair`, also
    the repairs of before (new nodes on the cheapest template a pod fits, two rounds of two copies)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(core_cycle, "plain_without_queues",
                                    lambda q, pods, now: q == QueueingConfig()))
        stack.enter_context(patched(checking, "node_local", lambda p: False))
        stack.enter_context(patched(Remover, "_each_fits_somewhere", lambda self, trial, specs: True))
        if repair:
            stack.enter_context(patched(checking, "reached", lambda outcome: None))
            stack.enter_context(patched(planning, "CHECK_ROUNDS", 2))
            stack.enter_context(patched(planning, "REPAIR_COPIES", 2))
        yield


@contextlib.contextmanager
def patched(owner: object, name: str, value: object) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def same_plan(a: Plan, b: Plan) -> bool:
    return (a.add, a.remove, a.fits_now, sorted(a.unplaceable)) == (b.add, b.remove, b.fits_now, sorted(b.unplaceable))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default="default", choices=BUILTIN,
                    help="the scheduler's profile, built with the pending pods' typical-task mix (default: default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    snap = existing(args.nodes, rng)
    pods = pending(args.pods, rng)
    tpls = templates()
    profile = build_for(builtin(args.profile), pods)
    search_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        quick = plan(pods, tpls, snap, profile=profile, check=False)
        search_times.append(time.perf_counter() - t0)
    times = []
    with counting() as counted:
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            result = plan(pods, tpls, snap, profile=profile)
            times.append(time.perf_counter() - t0)
        checks = counted.last
    full_times = []
    with before(), counting() as counted:
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            old = plan(pods, tpls, snap, profile=profile)
            full_times.append(time.perf_counter() - t0)
        full = counted.last
    with before(repair=False):
        exact = same_plan(plan(pods, tpls, snap, profile=profile), result)
    assert checks is not None and full is not None
    fits_now = set(result.fits_now)
    left = [p for p in pods if p.uid not in fits_now]
    t0 = time.perf_counter()
    base = karpenter_batch(left, tpls).summary()
    naive_s = time.perf_counter() - t0
    used = snap.gpu_allocated_milli() / max(snap.gpu_capacity_milli(), 1)
    out = {
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
        "existing_nodes": args.nodes, "existing_gpu_use": round(used, 3), "pending_pods": len(pods),
        "templates": len(tpls), "profile": args.profile,
        "plan_no_check_s": [round(t, 3) for t in search_times], "plan_no_check_s_best": round(min(search_times), 3),
        "plan_s": [round(t, 3) for t in times], "plan_s_best": round(min(times), 3),
        "plan_before_s": [round(t, 3) for t in full_times], "plan_before_s_best": round(min(full_times), 3),
        "same_plan_with_every_check_in_full": exact,
        "checks": {"schedule_calls": checks.runs, "pods_scheduled": checks.scheduled},
        "checks_before": {"schedule_calls": full.runs, "pods_scheduled": full.scheduled},
        "fits_now": len(fits_now), "served_on_new_nodes": len(result.served), "unplaceable": len(result.unplaceable),
        "planner": {"nodes": sum(a.count for a in result.add),
                    "gpus": sum(a.count * a.template.gpus for a in result.add),
                    "cost_per_hour": round(result.cost_per_hour_added, 2), "removals": len(result.remove)},
        "planner_before": {"nodes": sum(a.count for a in old.add),
                           "gpus": sum(a.count * a.template.gpus for a in old.add),
                           "cost_per_hour": round(old.cost_per_hour_added, 2), "served": len(old.served),
                           "unplaceable": len(old.unplaceable)},
        "planner_no_check": {"nodes": sum(a.count for a in quick.add),
                             "gpus": sum(a.count * a.template.gpus for a in quick.add),
                             "cost_per_hour": round(quick.cost_per_hour_added, 2), "served": len(quick.served)},
        "naive_karpenter_like": {**base, "seconds": round(naive_s, 3)},
    }
    if args.json:
        print(json.dumps(out))
        return
    print(result.summary())
    print(json.dumps(out, indent=2))
    print(f"plan(), checked: {out['plan_s_best']} s (best of {args.repeat}; {checks.runs} checks scheduled "
          f"{checks.scheduled} pods; {len(result.served)} served, {len(result.unplaceable)} unplaceable, "
          f"{out['planner']['cost_per_hour']}/h); same plan with every check in full: {exact}")
    print(f"baseline, plan() as before: {out['plan_before_s_best']} s ({full.runs} checks scheduled {full.scheduled} "
          f"pods; {len(old.served)} served, {len(old.unplaceable)} unplaceable, "
          f"{out['planner_before']['cost_per_hour']}/h)")
    print(f"plan(check=False), search only: {out['plan_no_check_s_best']} s")


if __name__ == "__main__":
    main()
