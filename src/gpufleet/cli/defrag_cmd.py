"""`gpufleet experiment defrag`: openb replayed in time with and without defragmentation
(sim/defrag_experiment.py): the wait of jobs asking >= 4 GPUs, all jobs' wait, GPU allocation,
evictions and GPU-hours lost to them, per policy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, output_file, positive_int
from gpufleet.sim import defrag_experiment as dx
from gpufleet.sim.traces import openb, trace_dir
from gpufleet.sim.workload import Workload

POLICIES = "off,budget-1,budget-4"
QUICK = {"jobs": 8000, "seeds": "0", "policies": "off,budget-2"}


def add_experiment(exp_sub: Any) -> None:
    d = exp_sub.add_parser("defrag", help="defragmentation: big-job wait, utilisation, evictions and work lost, "
                                          "with and without moving small pods")
    d.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    d.add_argument("--policies", default=POLICIES,
                   help=f"comma-separated: off, budget-B (B GPU-hours lost per hour); default {POLICIES}")
    d.add_argument("--jobs", type=positive_int, default=20000,
                   help="openb tasks per run (default 20000: about a day of arrivals at the default load)")
    d.add_argument("--load", type=finite_float, default=0.9, help="offered GPU load (default 0.9)")
    d.add_argument("--every", type=positive_int, default=10,
                   help="take every Nth openb GPU node (default 10: 122 nodes, 623 GPUs)")
    d.add_argument("--seeds", default="0,1,2", help="comma-separated workload seeds (default 0,1,2)")
    d.add_argument("--checkpoint-s", type=finite_float, default=1800.0,
                   help="jobs checkpoint this often; a moved job loses the work since (default 1800)")
    d.add_argument("--quick", action="store_true",
                   help=f"a short run: {QUICK['jobs']} jobs, seed {QUICK['seeds']}, policies {QUICK['policies']}")
    d.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    d.add_argument("--json", type=Path, help="also write the table here")
    d.set_defaults(func=_run)


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds: comma-separated integers, got {text!r}") from None
    if not seeds:
        raise UsageError("--seeds: at least one seed")
    return seeds


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    if args.quick:
        args.jobs, args.seeds, args.policies = QUICK["jobs"], QUICK["seeds"], QUICK["policies"]
    if not args.checkpoint_s > 0:
        raise UsageError("--checkpoint-s must be positive")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    seeds = _seeds(args.seeds)
    if args.json is not None:
        output_file(args.json, "--json")
    node_file, pod_file = openb.variant_files(trace_dir(args.trace_dir))
    base = openb.load(node_file, pod_file)

    def make(seed: int) -> Workload:
        return dx.workload(base.jobs, base.nodes, jobs=args.jobs, load=args.load, every=args.every, seed=seed)
    sample = make(seeds[0])
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"defrag: {len(policies)} policies x {len(seeds)} seeds",
                                 total=len(policies) * len(seeds))
        runs = dx.run_all(make, policies, seeds, max(1, args.workers), args.checkpoint_s,
                          lambda _r: progress.advance(task))
    rows = dx.table(runs)
    meta = {"workload": sample.description.replace(f"(seed {seeds[0]})", f"(seeds {args.seeds})"),
            "nodes": len(sample.nodes), "gpus": sum(len(n.gpus) for n in sample.nodes), "jobs": args.jobs,
            "load": args.load, "seeds": seeds, "checkpoint_s": args.checkpoint_s, "big_job_gpus": dx.BIG_GPUS,
            "profile": "bestfit, default queueing", "seconds": round(time.perf_counter() - start, 1)}
    _print(rows)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"meta": meta, "policies": rows, "refusals": dx.refusals(runs),
               "runs": [{"policy": r.policy, "seed": r.seed, **r.row} for r in runs]}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _print(rows: dict[str, dict[str, float]]) -> None:
    print(f"{'policy':12} {'big jobs':>8} {'big wait mean/p95 s':>20} {'all wait mean/p95 s':>20} "
          f"{'alloc':>6} {'net':>6} {'evictions':>9} {'lost GPU-h':>10}")
    for name, r in rows.items():
        print(f"{name:12} {r['big_jobs']:8.0f} {r['big_wait_mean_s']:>10.0f}/{r['big_wait_p95_s']:<9.0f} "
              f"{r['wait_mean_s']:>10.1f}/{r['wait_p95_s']:<9.1f} {r['gpu_allocation']:6.3f} "
              f"{r['gpu_utilisation']:6.3f} {r['evictions']:9.1f} {r['gpu_hours_lost']:10.2f}")
