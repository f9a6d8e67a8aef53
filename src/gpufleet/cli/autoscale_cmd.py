"""`gpufleet experiment autoscale`: no autoscaling, a Karpenter-like provisioner and the gpufleet
planner on a day of diurnal load drawn from the openb task mix (sim/autoscale_experiment.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, names, output_dir, output_file, positive_int
from gpufleet.sim import autoscale_experiment as ax
from gpufleet.sim import autoscale_report
from gpufleet.sim.diurnal import DiurnalSettings
from gpufleet.sim.traces import openb, trace_dir


def add_experiment(exp_sub: Any) -> None:
    a = exp_sub.add_parser("autoscale", help="autoscalers on a day of diurnal openb load (GPU-hours paid, waits)")
    a.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    a.add_argument("--seeds", type=int, default=3, help="number of seeds, 0 upwards (default: 3)")
    a.add_argument("--arms", default=",".join(ax.DEFAULT_ARMS), help=f"comma-separated, from: {', '.join(ax.ARMS)}")
    a.add_argument("--curve", help="consolidation delays (s) for the trade-off curve of the karpenter and "
                                    "gpufleet arms, comma-separated; 'none' to skip (default: "
                                    f"{','.join(f'{v:g}' for v in ax.CONSOLIDATE_AFTER_S)})")
    a.add_argument("--jobs-per-day", type=finite_float, default=DiurnalSettings().jobs_per_day,
                   help="expected jobs in the day (default: %(default)g)")
    a.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    a.add_argument("--json", type=Path, help="write the table, the curve and every run here")
    a.add_argument("--out", type=Path, help="write the plots (PNG) and the table (Markdown) into this directory")
    a.set_defaults(func=_run)


def _numbers(text: str) -> list[float]:
    if text.strip().lower() == "none":
        return []
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--curve must be comma-separated seconds, got {text!r}") from None
    if any(not 0 <= v < math.inf for v in values):
        raise UsageError(f"--curve values must be finite and non-negative, got {text!r}")
    return values


def _run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    arms = names(args.arms, ax.ARMS, "arm")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
    if not args.jobs_per_day > 0:
        raise UsageError(f"--jobs-per-day must be positive, got {args.jobs_per_day}")
    draws_curve = any(a in arms for a in ax.CURVE_ARMS)
    if args.curve is None:
        curve = list(ax.CONSOLIDATE_AFTER_S) if draws_curve else []
    else:
        curve = _numbers(args.curve)
        if curve and not draws_curve:
            raise UsageError(f"--curve draws the trade-off of the {' and '.join(ax.CURVE_ARMS)} arms, and --arms "
                             f"{','.join(arms)} has neither (leave --curve out, or add one of them)")
    if args.json is not None:
        output_file(args.json, "--json")  # now, not after the runs
    if args.out is not None:
        output_dir(args.out, "--out")
    diurnal = DiurnalSettings(jobs_per_day=args.jobs_per_day)
    jobs = openb.load(*openb.variant_files(trace_dir(args.trace_dir), "default")).jobs
    seeds = list(range(args.seeds))
    autoscalers = [a for a in arms if a != "fixed"] + (["gpufleet"] if "fixed" in arms and "gpufleet" not in arms else [])
    total = len(seeds) * (len(autoscalers) + ("fixed" in arms)
                          + sum(1 for a in ax.CURVE_ARMS if a in arms for v in curve if v != 60.0))
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"autoscale: {len(arms)} arm(s) x {len(seeds)} seed(s)", total=total)
        exp = ax.run_experiment(jobs, seeds=seeds, arms=arms, curve=curve, diurnal=diurnal,
                                workers=max(1, args.workers), on_done=lambda _r: progress.advance(task))
    fixed = next((r.spec.fixed for r in exp.runs if r.spec.arm == "fixed"), ())
    meta = {"workload": f"{diurnal.jobs_per_day:g} jobs/day drawn from openb (diurnal.py defaults otherwise)",
            "templates": [f"{t.name}: {t.gpus} x {t.gpu_model}, {t.price_per_hour:g}/h, starts in {t.start_delay_s:g} s"
                          for t in ax.TEMPLATES],
            "seeds": seeds, "checkpoint_s": ax.CHECKPOINT_S,
            "fixed_cluster_seed0": dict(fixed), "fixed_cost_per_hour_seed0": ax.fixed_cost_per_hour(fixed),
            "seconds": round(time.perf_counter() - start, 1)}
    rows = exp.table()
    autoscale_report.terminal_table(rows, f"autoscaling on a day of diurnal openb load ({len(seeds)} seed(s), "
                                          "mean ± sd)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(autoscale_report.to_json(exp, meta), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.out is not None:
        for path in autoscale_report.write_plots(exp, args.out):
            print(f"wrote {path}")
        (args.out / "autoscale-table.md").write_text(autoscale_report.markdown_table(rows) + "\n")
        print(f"wrote {args.out / 'autoscale-table.md'}")
    return 0
