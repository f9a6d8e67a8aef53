"""`gpufleet experiment topology`: gang topology policies side by side (sim/topology_experiment.py).

The Philly-derived multi-GPU jobs as gangs, and a synthetic gang-heavy mix, each replayed with
no topology, a preferred rack, a required rack and the shipped default (prefer one host), every
job's run time stretched by the communication-cost model of sim/comm_cost.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, names, output_file, positive_int
from gpufleet.sim import topology_experiment as tx
from gpufleet.sim.comm_cost import CROSS_RACK, load_ratios
from gpufleet.sim.traces import philly, trace_dir
from gpufleet.sim.workload import Workload

WORKLOADS = ("philly", "synthetic")


def add_experiment(exp_sub: Any) -> None:
    t = exp_sub.add_parser("topology", help="gang topology: none, preferred, required and the default "
                                            "(gangs in one domain, JCT, waits)")
    t.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    t.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from: {', '.join(WORKLOADS)}")
    t.add_argument("--policies", default=",".join(tx.POLICIES), help=f"comma-separated, from: {', '.join(tx.POLICIES)}")
    t.add_argument("--philly-jobs", type=positive_int, default=1500,
                   help="the first N of the trace's 4784 multi-GPU jobs (default 1500, about 27 days of arrivals)")
    t.add_argument("--time-scale", type=finite_float, default=1.5,
                   help="philly: divide arrival times by this (default 1.5: the first 1500 multi-GPU jobs then "
                        "offer about 0.8 of the 500 GPUs, before any slowdown)")
    t.add_argument("--gpus-per-pod", type=positive_int, default=2, help="philly: GPUs per gang member (default 2)")
    t.add_argument("--synthetic-jobs", type=positive_int, default=2000, help="synthetic: jobs in the mix (default 2000)")
    t.add_argument("--load", type=finite_float, default=0.8, help="synthetic: offered GPU load (default 0.8)")
    t.add_argument("--seed", type=int, default=0, help="synthetic: the mix's seed")
    t.add_argument("--cross-rack-factor", type=finite_float, default=CROSS_RACK,
                   help=f"the model's stretch of communication across racks (default {CROSS_RACK})")
    t.add_argument("--comm-model", choices=("gavel", "none"), default="gavel",
                   help="gavel: sim/comm_cost.py's slowdowns; none: every job runs at its consolidated speed "
                        "wherever it lands (what placement costs in waits alone)")
    t.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    t.add_argument("--json", type=Path, required=True, help="write the table here")
    t.set_defaults(func=_run)


def _workloads(args: argparse.Namespace, root: Path, which: list[str]) -> dict[str, Workload]:
    if args.time_scale <= 0 or not 0 < args.load <= 2 or args.cross_rack_factor < 1:
        raise UsageError("--time-scale must be positive, --load in (0, 2], --cross-rack-factor at least 1")
    out: dict[str, Workload] = {}
    if "philly" in which:
        out["philly"] = tx.philly_gangs(philly.load(root), args.philly_jobs, args.gpus_per_pod, args.time_scale)
    if "synthetic" in which:
        out["synthetic"] = tx.synthetic(args.synthetic_jobs, args.load, args.seed)
    return out


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    which = names(args.workloads, WORKLOADS, "workload")
    policies = names(args.policies, tx.POLICIES)
    output_file(args.json, "--json")
    root = trace_dir(args.trace_dir)
    workloads = _workloads(args, root, which)
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"topology: {len(workloads)} workloads x {len(policies)} policies",
                                 total=len(workloads) * len(policies))
        ratios, cross_rack = ((load_ratios(root), args.cross_rack_factor) if args.comm_model == "gavel"
                              else ({}, 1.0))
        runs = tx.run_all(workloads, ratios, policies, max(1, args.workers), cross_rack,
                          lambda _r: progress.advance(task))
    rows = tx.table(runs)
    meta = {"workloads": {k: {"description": w.description, "jobs": len(w.jobs), "nodes": len(w.nodes)}
                          for k, w in workloads.items()},
            "declared_level": tx.LEVEL, "cross_rack_factor": cross_rack,
            "comm_model": ("sim/comm_cost.py: Gavel V100 consolidated/unconsolidated throughput ratios; "
                           "cross-rack factor assumed") if args.comm_model == "gavel" else "none (no slowdown)",
            "seconds": round(time.perf_counter() - start, 1)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "workloads": rows}, indent=2) + "\n")
    for name, per_policy in rows.items():
        print(f"{name}:")
        for policy, row in per_policy.items():
            print(f"  {policy:10} one domain {row['gangs_one_domain_pct']}%  JCT mean {row['jct_mean_s']} s  "
                  f"wait p99 {row['wait_p99_s']} s  slowdown {row['slowdown_mean']}")
    print(f"wrote {args.json}")
    return 0
