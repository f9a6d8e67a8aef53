"""`gpufleet experiment faults`: fault reactions side by side on the Philly-derived trace.

Every policy meets the same injected faults (Llama 3 405B's interruption rate per GPU-hour,
scaled by `--rate-scale`) for each seed; see sim/fault_experiment.py and docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, names, output_dir, output_file, positive_int
from gpufleet.sim import fault_experiment, fault_report
from gpufleet.sim.faults import FaultModel
from gpufleet.sim.traces import philly, trace_dir


def add_experiment(exp_sub: Any) -> None:
    f = exp_sub.add_parser("faults", help="fault handling policies under injected GPU and node failures")
    f.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    f.add_argument("--seeds", type=int, default=10, help="fault streams per policy (default 10)")
    f.add_argument("--rate-scale", type=finite_float, default=1.0,
                   help="multiply the default fault rate (Llama 3 405B's per GPU-hour) by this")
    f.add_argument("--checkpoint-s", type=finite_float, default=3600.0,
                   help="jobs checkpoint this often and restart from the last checkpoint; 0 = from zero")
    f.add_argument("--policies", default=",".join(fault_experiment.ARMS),
                   help=f"comma-separated, from: {', '.join(fault_experiment.ARMS)}")
    f.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    f.add_argument("--json", type=Path, required=True, help="write the table here")
    f.add_argument("--plot", type=Path, help="also write the plot (PNG) here")
    f.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    arms = names(args.policies, fault_experiment.ARMS)
    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
    if args.checkpoint_s < 0:
        raise UsageError(f"--checkpoint-s must be non-negative, got {args.checkpoint_s}")
    try:
        model = FaultModel(rate_scale=args.rate_scale)
    except ValueError as e:
        raise UsageError(f"--rate-scale: {e}") from None
    settings = fault_experiment.Settings(model, args.checkpoint_s or None)
    output_file(args.json, "--json")  # now, not after the runs
    if args.plot is not None:
        output_file(args.plot, "--plot")
    workload = philly.load(trace_dir(args.trace_dir))
    seeds = list(range(args.seeds))
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"{workload.name}: {len(arms)} policies x {len(seeds)} seeds",
                                 total=len(arms) * len(seeds))
        runs = fault_experiment.run_all(workload, arms, seeds, settings, max(1, args.workers),
                                        lambda _r: progress.advance(task))
    rows = fault_experiment.table(runs)
    meta = {"workload": workload.description, "jobs": len(workload.jobs), "nodes": len(workload.nodes),
            "gpus": sum(len(n.gpus) for n in workload.nodes), "seeds": args.seeds, "rate_scale": args.rate_scale,
            "faults_per_gpu_hour": model.per_gpu_hour(), "checkpoint_s": args.checkpoint_s,
            "seconds": round(time.perf_counter() - start, 1)}
    per_seed = [{"policy": r.arm, "seed": r.seed, **{k: round(r.summary[k], 4) for k in fault_experiment.PER_SEED},
                 "gang_restarts_s": [round(d, 1) for d in r.gang_restarts], "never_restarted": r.never_restarted}
                for r in runs]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "policies": rows, "runs": per_seed}, indent=2) + "\n")
    title = f"{workload.name}: faults at {args.rate_scale:g}x the Llama 3 rate, {args.seeds} seeds"
    fault_report.terminal_table(rows, title)
    if args.plot is not None:
        fault_report.write_png(runs, rows, args.plot, title)
        print(f"wrote {args.plot}")
    print(f"wrote {args.json}")
    return 0
