"""Scheduling-core throughput: 5,000 nodes x 8 GPUs, 50,000 pending pods, one cycle.

Runs the default profile, then each scorer alone (with the default filters) and the other
shipped profiles, then a straightforward per-node pure-Python implementation of the
`bestfit` profile (the default until 2026-11-22; see naive.py for why not the default's
look-ahead) on a prefix of the same pods, checking that it picks the same node as the core
with that profile for every pod; `speedup` compares the two on that profile. Prints a table;
with --json the last line is one JSON object.

    .venv/bin/python bench/throughput.py [--nodes 5000] [--pods 50000] [--json]

With --dra the pods ask for whole GPUs through DRA ResourceClaims instead (`dra_gen`: one
claim per pod for 1, 2, 4 or 8 GPUs of NVIDIA's `gpu.nvidia.com` class, ResourceSlices as its
driver publishes them) and only the default profile runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_gen  # noqa: E402
import dra_gen  # noqa: E402
import naive  # noqa: E402

from gpufleet.core.cycle import schedule  # noqa: E402
from gpufleet.core.context import QueueContext  # noqa: E402
from gpufleet.framework.queueing import QueueingConfig  # noqa: E402
from gpufleet.framework.plugins.fragmentation import typical_tasks  # noqa: E402
from gpufleet.framework.profile import ProfileSettings, ScoreRef, build_profile  # noqa: E402
from gpufleet.framework.profiles import builtin  # noqa: E402
from gpufleet.framework.registry import BuildContext  # noqa: E402
from gpufleet.model import ClusterSnapshot, GpuKind, PodSpec, QueueTree  # noqa: E402

SCORERS = ("MostAllocated", "LeastAllocated", "BestFit", "DotProduct", "GpuPacking", "GpuClustering",
           "FGD", "FragAware", "PreferUsedNodes", "Random", "Topology")


def timed(snap: ClusterSnapshot, pods: list[PodSpec], settings: ProfileSettings, ctx: BuildContext,
          queues: QueueContext | None = None) -> tuple[float, int]:
    profile = build_profile(settings, ctx)
    start = time.perf_counter()
    result = schedule(snap, pods, profile, now=0.0, rng=random.Random(1), queues=queues)
    return time.perf_counter() - start, len(result.binds)


QUEUED = QueueingConfig(order="fair", reclaim=True, preemption=True, starvation_bound_seconds=3600.0)


def queued_runs(snap: ClusterSnapshot, pods: list[PodSpec], ctx: BuildContext, rng: random.Random
                ) -> dict[str, object]:
    """The default profile's plugins with 100 queues, fair order, reclaim, preemption and a
    starvation bound: (1) all pods pending on the empty cluster; (2) then, with what that
    placed running for two hours (the cluster is full), half as many new pods arrive in the
    same queues, so reclaim and preemption look for victims."""
    tree = QueueTree.build(cluster_gen.queues(rng, int(snap.cluster.gpu_count.sum())))
    leaves = sorted(q for q in tree.queues if q not in tree.children and q != "default")
    queued = cluster_gen.in_queues(pods, leaves, rng)
    profile = build_profile(dataclasses.replace(builtin("default"), queueing=QUEUED), ctx)
    context = QueueContext(tree)
    start = time.perf_counter()
    first = schedule(snap, queued, profile, now=0.0, rng=random.Random(1), queues=context)
    seconds = time.perf_counter() - start
    late, groups = cluster_gen.pods(len(pods) // 2, rng, prefix="late-")
    late = cluster_gen.in_queues(late, leaves, rng)
    busy = snap.apply(first.binds).with_pod_groups(groups)
    start = time.perf_counter()
    second = schedule(busy, late, profile, now=7200.0, rng=random.Random(1), queues=context)
    busy_s = time.perf_counter() - start
    return {"queues": len(leaves), "queues_pods_per_s": round(len(queued) / seconds), "queues_bound": len(first.binds),
            "queues_busy_pods": len(late), "queues_busy_running": len(first.binds),
            "queues_busy_pods_per_s": round(len(late) / busy_s),
            "queues_busy_evictions": len(second.evictions), "queues_busy_nominated": len(second.nominated)}


def naive_run(snap: ClusterSnapshot, pods: list[PodSpec], ctx: BuildContext) -> tuple[float, int, int]:
    """(seconds, pods, disagreements) for the pure-Python scheduler on `pods` (no gangs)."""
    core = schedule(snap, pods, build_profile(builtin("bestfit"), ctx), now=0.0, rng=random.Random(1))
    by_uid = {b.pod: b for b in core.binds}
    nodes = [naive.NaiveNode(n) for n in snap.cluster.nodes]
    disagree = 0
    start = time.perf_counter()
    for pod in pods:
        chosen = naive.schedule_one(nodes, pod)
        bind = by_uid.get(pod.uid)
        if (chosen is None) != (bind is None) or (chosen is not None and bind is not None
                                                   and chosen.info.name != bind.node):
            disagree += 1
        if chosen is not None and bind is not None and chosen.info.name == bind.node:
            naive.place(chosen, pod, bind.gpus, bind.milli, bind.gpu_mem_mib)
    return time.perf_counter() - start, len(pods), disagree


def dra_run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    nodes, slices = dra_gen.cluster(args.nodes)
    pods, claims = dra_gen.pods(args.pods, rng)
    start = time.perf_counter()
    snap = ClusterSnapshot.build(nodes, device_classes=dra_gen.classes(), slices=slices, claims=claims)
    build_s = time.perf_counter() - start
    seconds, bound = timed(snap, pods, builtin("default"), BuildContext())
    print(f"DRA, default profile: {len(pods)} claim pods on {args.nodes} nodes ({snap.cluster.devices.n_devices} devices)"
          f" in {seconds:.2f} s = {len(pods) / seconds:,.0f} pods/s ({bound} bound); snapshot {build_s:.2f} s",
          file=sys.stderr)
    return {"nodes": args.nodes, "devices": snap.cluster.devices.n_devices, "pods": len(pods), "bound": bound,
            "seconds": round(seconds, 3), "pods_per_s": round(len(pods) / seconds), "snapshot_s": round(build_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=50000)
    ap.add_argument("--naive-pods", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dra", action="store_true", help="pods ask for GPUs through DRA claims")
    args = ap.parse_args()
    if args.dra:
        out = dra_run(args)
        out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        out["machine"] = f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
        return
    rng = random.Random(args.seed)
    nodes = cluster_gen.nodes(args.nodes, rng)
    pods, groups = cluster_gen.pods(args.pods, rng)
    snap = ClusterSnapshot.build(nodes, pod_groups=groups)
    ctx = BuildContext(typical_tasks(pods))
    seconds, bound = timed(snap, pods, builtin("default"), ctx)
    out: dict[str, object] = {"nodes": args.nodes, "gpus": int(snap.cluster.gpu_count.sum()), "pods": len(pods),
                              "bound": bound, "seconds": round(seconds, 3), "pods_per_s": round(len(pods) / seconds)}
    print(f"default profile: {len(pods)} pods on {args.nodes} nodes in {seconds:.2f} s = "
          f"{len(pods) / seconds:,.0f} pods/s ({bound} bound)", file=sys.stderr)
    per_scorer = {}
    for name in SCORERS:
        s, b = timed(snap, pods, ProfileSettings(scores=(ScoreRef(name),)), ctx)
        per_scorer[name] = round(len(pods) / s)
        print(f"  {name:15s} {len(pods) / s:10,.0f} pods/s  ({b} bound)", file=sys.stderr)
    out["scorer_pods_per_s"] = per_scorer
    profile_rates: dict[str, float] = {}
    for name in ("bestfit", "gpufleet", "gpufleet-lookahead"):
        s, b = timed(snap, pods, builtin(name), ctx)
        profile_rates[name] = len(pods) / s
        out[f"{name.replace('-', '_')}_profile_pods_per_s"] = round(len(pods) / s)
        print(f"  {name} profile {len(pods) / s:9,.0f} pods/s  ({b} bound)", file=sys.stderr)
    queued = queued_runs(snap, pods, ctx, rng)
    out.update(queued)
    print(f"queues: {queued['queues']} leaf queues, fair order, reclaim, preemption, starvation bound: "
          f"{queued['queues_pods_per_s']:,} pods/s on the empty cluster; with {queued['queues_busy_running']} "
          f"pods running, {queued['queues_busy_pods_per_s']:,} pods/s for {queued['queues_busy_pods']} pending "
          f"({queued['queues_busy_evictions']} evictions, {queued['queues_busy_nominated']} nominated)",
          file=sys.stderr)
    prefix = [p for p in pods if p.pod_group is None and p.gpu.kind is not GpuKind.MIG][: args.naive_pods]
    ns, n, disagree = naive_run(snap, prefix, ctx)
    out.update(naive_pods=n, naive_pods_per_s=round(n / ns, 1), naive_disagreements=disagree,
               speedup=round(profile_rates["bestfit"] / (n / ns), 1))
    print(f"naive per-node Python, bestfit profile: {n / ns:,.1f} pods/s on {n} pods; "
          f"{disagree} placement disagreements with the core", file=sys.stderr)
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["machine"] = f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}"
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
