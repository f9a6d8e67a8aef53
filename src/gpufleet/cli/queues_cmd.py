"""`gpufleet experiment queues`: queueing policies side by side on a multi-tenant trace.

Philly (default): the 15 Philly-derived virtual clusters as 15 equal queues on 500 V100s,
each job given a priority from a fixed mix. openb: the Alibaba openb trace with its QoS
classes as priorities, one queue. `--time-scale` compresses arrivals (a factor of 2 halves
every arrival time) when a trace is too light for queueing to matter.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, names, output_dir, output_file, positive_int
from gpufleet.sim import queue_experiment, queue_report
from gpufleet.sim.traces import openb, philly, trace_dir
from gpufleet.sim.workload import Workload


def add_experiment(exp_sub: Any) -> None:
    q = exp_sub.add_parser("queues", help="queueing policies on a multi-tenant trace (fairness, waits, JCT)")
    q.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    q.add_argument("--workload", choices=("philly", "openb"), default="philly",
                   help="philly: 15 virtual clusters as queues; openb: QoS classes as priorities")
    q.add_argument("--time-scale", type=finite_float, default=1.0, help="divide arrival times by this")
    q.add_argument("--policies", default=",".join(queue_experiment.QUEUE_POLICIES),
                   help=f"comma-separated, from: {', '.join(queue_experiment.QUEUE_POLICIES)}")
    q.add_argument("--checkpoint-s", type=finite_float, default=0.0,
                   help="jobs checkpoint this often; a preempted job restarts from its last checkpoint "
                        "(default 0: from zero)")
    q.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    q.add_argument("--json", type=Path, required=True, help="write the table here")
    q.add_argument("--out", type=Path, help="also write report.html and its plots into this directory")
    q.set_defaults(func=_run)


def _workload(args: argparse.Namespace) -> Workload:
    if args.time_scale <= 0:
        raise UsageError(f"--time-scale must be positive, got {args.time_scale}")
    root = trace_dir(args.trace_dir)
    if args.workload == "philly":
        base = philly.load(root, priorities=True)
    else:
        nodes, pods = openb.variant_files(root, "default")
        base = openb.with_qos_priorities(openb.load(nodes, pods))
    jobs = tuple(dataclasses.replace(j, arrival_s=j.arrival_s / args.time_scale) for j in base.jobs)
    return dataclasses.replace(base, jobs=jobs)


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    policies = names(args.policies, tuple(queue_experiment.QUEUE_POLICIES))
    if args.checkpoint_s < 0:
        raise UsageError(f"--checkpoint-s must be non-negative, got {args.checkpoint_s}")
    output_file(args.json, "--json")  # now, not after the runs
    if args.out is not None:
        output_dir(args.out, "--out")
    workload = _workload(args)
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"{workload.name}: {len(policies)} policies", total=len(policies))
        runs = queue_experiment.run_all(workload, policies, max(1, args.workers), lambda _r: progress.advance(task),
                                         args.checkpoint_s or None)
    rows = queue_experiment.table(runs)
    meta = {"workload": workload.description, "jobs": len(workload.jobs), "nodes": len(workload.nodes),
            "queues": len(workload.queues) or 1, "time_scale": args.time_scale,
            "checkpoint_s": args.checkpoint_s,
            "seconds": round(time.perf_counter() - start, 1)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "policies": rows}, indent=2) + "\n")
    queue_report.terminal_table(rows, f"{workload.name}: queueing policies (time scale {args.time_scale})")
    if args.out is not None:
        queue_report.write_html(runs, rows, args.out, meta)
        print(f"wrote {args.out}/report.html")
    print(f"wrote {args.json}")
    return 0
