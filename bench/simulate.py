"""Simulator speed: one full FGD packing run, and a per-node pure-Python FGD baseline.

Uses the openb default trace when GPUFLEET_TRACE_DIR is set (the issue's setting: 1,213
nodes, ~10,800 task attempts, metrics after every task), else the built-in default. The
baseline (bench/naive.py: FGD evaluated node by node, task by task, in plain Python) runs
on the first --baseline-tasks tasks of the same run and is compared per task.

    .venv/bin/python bench/simulate.py [--policies fgd,bestfit,gpufleet] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import naive  # noqa: E402

from gpufleet.core.cycle import schedule  # noqa: E402
from gpufleet.framework.plugins.fragmentation import typical_tasks  # noqa: E402
from gpufleet.model import ClusterSnapshot  # noqa: E402
from gpufleet.sim import fgd_experiment as fe  # noqa: E402
from gpufleet.sim.default_workload import default_workload  # noqa: E402
from gpufleet.sim.policies import profile_for  # noqa: E402
from gpufleet.sim.traces import openb  # noqa: E402
from gpufleet.sim.workload import Workload  # noqa: E402


def workload() -> Workload:
    root = os.environ.get("GPUFLEET_TRACE_DIR")
    if root:
        return openb.load(*openb.variant_files(Path(root), "default"), max_pods=1001)
    return default_workload(max_pods=1001)


def baseline(w: Workload, n: int) -> tuple[float, float]:
    """Seconds per task for the core and for the naive FGD, on the same first n tasks."""
    originals = sorted((p for j in w.jobs for p in j.pods), key=lambda p: p.name)
    tm = typical_tasks(originals)
    snap = ClusterSnapshot.build(fe.renamed_nodes(w.nodes, 42))
    tasks = fe.task_list(originals, 42, snap.gpu_capacity_milli())[:n]
    profile = profile_for("fgd", tm)
    rng = random.Random(42)
    start = time.perf_counter()
    for i, pod in enumerate(tasks):
        result = schedule(snap, (pod,), profile, now=float(i), rng=rng)
        snap = snap.apply(result.binds)
    core = (time.perf_counter() - start) / n
    plain = [(t.cpu_milli, t.gpu_milli, t.num_gpu, t.models, t.probability) for t in tm]
    nodes = [naive.NaiveNode(x) for x in ClusterSnapshot.build(fe.renamed_nodes(w.nodes, 42)).cluster.nodes]
    start = time.perf_counter()
    for pod in tasks:
        pick = naive.fgd_pick(nodes, pod, plain)
        if pick is not None:
            node, devices = pick
            naive.place(node, pod, devices, pod.gpu.milli, pod.gpu.mem_mib)
    return core, (time.perf_counter() - start) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="fgd,bestfit,gpufleet")
    ap.add_argument("--baseline-tasks", type=int, default=150)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    w = workload()
    load_s = time.perf_counter() - start
    print(f"loading the workload: {load_s:.2f} s", file=sys.stderr)
    out: dict[str, object] = {"workload": w.name, "nodes": len(w.nodes), "machine": platform.machine(),
                              "load_s": round(load_s, 2)}
    runs = {}
    for policy in args.policies.split(","):
        start = time.perf_counter()
        run = fe.run(w, policy, 42)
        seconds = time.perf_counter() - start
        runs[policy] = round(seconds, 2)
        print(f"{policy:10s} one full run: {seconds:6.2f} s for {run.placed + run.failed} task attempts", file=sys.stderr)
    core, plain = baseline(w, args.baseline_tasks)
    print(f"first {args.baseline_tasks} tasks, FGD: core {core * 1e3:.2f} ms/task, "
          f"per-node pure Python {plain * 1e3:.1f} ms/task ({plain / core:.0f}x)", file=sys.stderr)
    out.update(runs_s=runs, baseline_tasks=args.baseline_tasks, core_ms_per_task=round(core * 1e3, 3),
               naive_ms_per_task=round(plain * 1e3, 2), seconds_per_run=runs.get("fgd", next(iter(runs.values()))))
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
