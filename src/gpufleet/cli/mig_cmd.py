"""`gpufleet experiment mig`: static MIG layouts against demand-driven repartitioning
(sim/mig_experiment.py): unallocated GPU %, waits and reconfigurations per policy.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, names, output_file, positive_int
from gpufleet.sim import mig_experiment as mx
from gpufleet.sim.mig_reconfig import RECONFIG_DELAY_S
from gpufleet.sim.traces import TraceDirError, openb, trace_dir
from gpufleet.sim.workload import Workload

WORKLOADS = ("openb", "diurnal")


def add_experiment(exp_sub: Any) -> None:
    m = exp_sub.add_parser("mig", help="MIG: static layouts (all-1g, balanced, best static, a static mix) against "
                                       "demand-driven repartitioning (unallocated GPU share, waits, reconfigurations)")
    m.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR); "
                                       "without one the openb workload is skipped, with a note")
    m.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from: {', '.join(WORKLOADS)}")
    m.add_argument("--policies", default=",".join(mx.POLICIES), help=f"comma-separated, from: {', '.join(mx.POLICIES)}")
    m.add_argument("--openb-nodes", type=positive_int, default=4, help="openb: 8-GPU nodes (default 4, 32 GPUs)")
    m.add_argument("--openb-jobs", type=positive_int, default=None,
                   help="openb: the first N fractional tasks (default: all 3078)")
    m.add_argument("--diurnal-nodes", type=positive_int, default=4, help="diurnal: 8-GPU nodes (default 4)")
    m.add_argument("--days", type=finite_float, default=1.0, help="diurnal: days of arrivals (default 1)")
    m.add_argument("--load", type=finite_float, default=0.85,
                   help="offered compute slices as a share of the cluster's, both workloads (default 0.85)")
    m.add_argument("--seed", type=int, default=0, help="diurnal: the mix's seed")
    m.add_argument("--reconfig-delay", type=finite_float, default=RECONFIG_DELAY_S,
                   help=f"seconds before a change's new instances are usable (default {RECONFIG_DELAY_S:g}, "
                        "an assumption: sim/mig_reconfig.py)")
    m.add_argument("--quick", action="store_true",
                   help="a small run: the first 600 openb tasks on 2 nodes, 0.25 days of the mix on 2 nodes")
    m.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    m.add_argument("--json", type=Path, help="write the table here")
    m.set_defaults(func=_run)


def _workloads(args: argparse.Namespace, which: list[str]) -> tuple[dict[str, Workload], list[str]]:
    if not 0 < args.load <= 2 or args.days <= 0 or args.reconfig_delay < 0:
        raise UsageError("--load must be in (0, 2], --days positive, --reconfig-delay non-negative")
    notes: list[str] = []
    out: dict[str, Workload] = {}
    quick = args.quick
    if "openb" in which:
        try:
            root = trace_dir(args.trace_dir)
        except TraceDirError as e:  # no trace directory: the synthetic mix still runs
            notes.append(f"openb skipped: {e}")
        else:
            base = openb.load(*openb.variant_files(root, "default"))
            out["openb"] = mx.openb_mig(base, 2 if quick else args.openb_nodes, args.load,
                                        600 if quick else args.openb_jobs)
    if "diurnal" in which:
        out["diurnal"] = mx.diurnal(2 if quick else args.diurnal_nodes, args.load, 0.25 if quick else args.days,
                                    args.seed)
    if not out:
        raise UsageError("no workload to run: " + "; ".join(notes))
    return out, notes


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    which = names(args.workloads, WORKLOADS, "workload")
    policies = names(args.policies, mx.POLICIES)
    if args.json is not None:
        output_file(args.json, "--json")
    workloads, notes = _workloads(args, which)
    for note in notes:
        print(note)
    start = time.perf_counter()
    with Progress() as progress:
        total = mx.job_count(policies, workloads)
        task = progress.add_task(f"mig: {len(workloads)} workloads x {len(policies)} policies ({total} replays)",
                                 total=total)
        runs = mx.run_all(workloads, policies, max(1, args.workers), args.reconfig_delay,
                          lambda _r: progress.advance(task))
    rows = mx.table(runs)
    meta = {"workloads": {k: {"description": w.description, "jobs": len(w.jobs), "nodes": len(w.nodes),
                              "gpus": sum(len(n.gpus) for n in w.nodes)} for k, w in workloads.items()},
            "reconfig_delay_s": args.reconfig_delay, "quick": args.quick, "notes": notes,
            "unallocated_gpu_pct": "MIG compute slices not held by a running pod while a MIG request is pending, "
                                   "time-averaged over first to last arrival, as % of all slices",
            "seconds": round(time.perf_counter() - start, 1)}
    for name, per_policy in rows.items():
        print(f"{name}: {meta['workloads'][name]['description']}")
        for policy, row in per_policy.items():
            p95 = "unbounded" if row["wait_p95_s"] is None else f"{row['wait_p95_s']} s"
            print(f"  {policy:12} unallocated {row['unallocated_gpu_pct']}%  wait p95 {p95} (started: "
                  f"{row['wait_p95_started_s']} s)  never started {row['never_started']}  "
                  f"reconfigurations {row['reconfigurations']}"
                  + (f"  layouts {row['layout']}" if policy in ("best-static", "static-mix") else ""))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "workloads": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
