"""`gpufleet simulate`, `gpufleet compare` and `gpufleet experiment fgd`.

All three replay a workload through the FGD packing experiment on the shared core. The
workload is the built-in default (synthetic, from openb's published statistics) unless
`--variant` (with `--trace-dir` or GPUFLEET_TRACE_DIR) or `--nodes`/`--pods` files name a
real trace.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.cli import autoscale_cmd, defrag_cmd, faults_cmd, mig_cmd, queues_cmd, topology_cmd
from gpufleet.cli.main import UsageError, finite_float, names, output_dir, output_file, positive_int, random_seed
from gpufleet.sim import bound as sim_bound
from gpufleet.sim import compare, compare_time, queue_report, report
from gpufleet.framework.profile import load_profiles
from gpufleet.model import read_text
from gpufleet.sim.default_workload import default_workload
from gpufleet.sim.policies import DEFAULT, PAPER_POLICIES, POLICY_NAMES
from gpufleet.sim.traces import openb, philly, scenario, trace_dir
from gpufleet.sim.workload import Workload

FGD_MAX_PODS = 1001
"""The FGD simulator's per-node pod limit (so CPU and GPU, not pod count, bind)."""
TIME_TASKS = 10_000
"""Time mode, built-in default: tasks replayed unless `--tasks` says otherwise."""
TIME_LOAD = 2.0
"""Time mode, built-in default: nominal offered GPU load unless `--load` says otherwise."""


def add_parser(sub: Any) -> None:
    for name, help_text, func in (
        ("simulate", "run one policy on a workload and print its table", _simulate),
        ("compare", "run several policies x seeds, write JSON/CSV/HTML reports", _compare),
    ):
        p = sub.add_parser(name, help=help_text)
        _workload_args(p)
        if name == "simulate":
            p.add_argument("--policy", default="fgd", help=f"one of {', '.join(POLICY_NAMES)} (default: fgd)")
            p.add_argument("--seed", type=random_seed, default=42)
        else:
            p.add_argument("--policies", default=",".join(PAPER_POLICIES + ("gpufleet", "gpufleet-lookahead", DEFAULT)),
                           help=f"comma-separated, from: {', '.join(POLICY_NAMES)} (default: all)")
            p.add_argument("--seeds", type=int, default=3, help="number of seeds, 42 upwards (paper: 10)")
            p.add_argument("--out", type=Path, default=Path("reports/default"),
                           help="directory for report.html, results.json, results.csv (default: %(default)s)")
            p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                           help="worker processes (default: one per CPU)")
        p.set_defaults(func=func)
    exp = sub.add_parser("experiment", help="published experiments")
    exp_sub = exp.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    fgd = exp_sub.add_parser("fgd", help="the FGD paper's packing experiment")
    _workload_args(fgd, time_mode=False)
    fgd.add_argument("--policies", default=",".join(PAPER_POLICIES),
                     help=f"comma-separated, from: {', '.join(POLICY_NAMES)} (default: the paper's six)")
    fgd.add_argument("--seeds", type=int, default=10)
    fgd.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                     help="worker processes (default: one per CPU)")
    fgd.add_argument("--json", type=Path, required=True, help="write the summary here")
    fgd.set_defaults(func=_experiment)
    bound = exp_sub.add_parser("bound", help="the FGD experiment's offline bound: unallocated GPU % no scheduler "
                                             "can go below, and the best offline packing found")
    _workload_args(bound, time_mode=False)
    bound.add_argument("--seeds", type=int, default=10, help="arrival orders of seeds 42 upwards (default: 10)")
    bound.add_argument("--levels", default=",".join(map(str, sim_bound.LEVELS)),
                       help="arrived-%% columns (default: %(default)s)")
    bound.add_argument("--offline-levels", default="100",
                       help="columns that also get the best offline packing (slower; default: %(default)s; "
                            "'' for none)")
    bound.add_argument("--json", type=Path, required=True, help="write the bounds here")
    bound.set_defaults(func=_bound)
    queues_cmd.add_experiment(exp_sub)
    autoscale_cmd.add_experiment(exp_sub)
    faults_cmd.add_experiment(exp_sub)
    topology_cmd.add_experiment(exp_sub)
    defrag_cmd.add_experiment(exp_sub)
    mig_cmd.add_experiment(exp_sub)


def _workload_args(p: argparse.ArgumentParser, *, time_mode: bool = True) -> None:
    p.add_argument("--trace-dir", help="directory holding the traces (default: $GPUFLEET_TRACE_DIR)")
    p.add_argument("--variant", help="openb pod list variant (default, gpushare40, multigpu20, ...)")
    p.add_argument("--scenario", type=Path, metavar="FILE",
                   help="a YAML scenario (docs/scenarios.md); examples ship in gpufleet/sim/scenarios/")
    p.add_argument("--philly", action="store_true",
                   help="time mode: the Philly-derived Gavel traces (15 virtual clusters on 500 V100s)")
    p.add_argument("--nodes", type=Path, help="openb node list CSV")
    p.add_argument("--pods", type=Path, help="openb pod list CSV")
    p.add_argument("--scale", type=finite_float, help="built-in default only: cluster size factor (default: 1)")
    p.add_argument("--claims", action="store_true",
                   help="pods ask for whole GPUs and GPU shares through DRA ResourceClaims instead of extended "
                        "resources (a scenario can say so itself: requestsAs: claims); MIG stays extended")
    p.add_argument("--profile", action="append", type=Path, default=[], metavar="FILE",
                   help="also run this scheduling profile (YAML, see docs/concepts.md); repeatable")
    if not time_mode:
        p.set_defaults(mode="packing", time_scale=None, load=None, tasks=None)
        return
    p.add_argument("--mode", choices=("packing", "time"), default="packing",
                   help="packing: the FGD experiment (arrivals only); time: replay arrivals and departures")
    p.add_argument("--time-scale", type=finite_float,
                   help="time mode, traces and scenarios: divide arrival times by this (compress a lightly "
                        "loaded trace; default: 1)")
    p.add_argument("--load", type=finite_float,
                   help="time mode, built-in default: nominal offered GPU load (heavy-tailed durations "
                        f"make the realised load lower; default: {TIME_LOAD:g})")
    p.add_argument("--tasks", type=int, help=f"time mode, built-in default: number of tasks (default: {TIME_TASKS})")


def check_flags(args: argparse.Namespace) -> None:
    """Refuse workload flags that this run would ignore: the user meant something else.

    At most one workload source; `--scale` only for the built-in default; `--trace-dir` only
    where traces are read; `--time-scale` only for traces and scenarios in time mode; `--load`
    and `--tasks` only for the built-in default in time mode."""
    sources = [flag for flag, given in (("--philly", args.philly), ("--scenario", args.scenario is not None),
                                        ("--nodes/--pods", bool(args.nodes or args.pods)),
                                        ("--variant", args.variant is not None)) if given]
    if len(sources) > 1:
        raise UsageError(f"choose one workload: {' and '.join(sources)} were both given")
    builtin = not sources
    time_mode = args.mode == "time"
    if args.scale is not None and not builtin:
        raise UsageError(f"--scale sizes the built-in default workload; it does not apply to {sources[0]}")
    if args.trace_dir is not None and not (args.variant or args.philly):
        raise UsageError("--trace-dir is read only with --variant or --philly; without a workload flag the "
                         "built-in default runs")
    if args.time_scale is not None and not (time_mode and not builtin):
        raise UsageError("--time-scale applies to traces and scenarios in --mode time (the built-in default's "
                         "load is set by --load)" if time_mode else "--time-scale applies only to --mode time")
    for flag, value in (("--load", args.load), ("--tasks", args.tasks)):
        if value is not None and not (time_mode and builtin):
            raise UsageError(f"{flag} applies only to the built-in default workload in --mode time")


def load_workload(args: argparse.Namespace) -> Workload:
    workload = _load_workload(args)
    return replace(workload, claims=True) if args.claims else workload


def _load_workload(args: argparse.Namespace) -> Workload:
    check_flags(args)
    if args.philly:
        raise UsageError("--philly has no packing experiment (its jobs are whole GPUs); use --mode time")
    if args.scenario:
        return scenario.load(args.scenario)
    if args.nodes or args.pods:
        if not (args.nodes and args.pods):
            raise UsageError("--nodes and --pods go together")
        return openb.load(args.nodes, args.pods, max_pods=FGD_MAX_PODS)
    if args.variant:
        nodes, pods = openb.variant_files(trace_dir(args.trace_dir), args.variant)
        return openb.load(nodes, pods, max_pods=FGD_MAX_PODS)
    scale = _scale(args)
    return default_workload(scale=scale, seed=0, max_pods=FGD_MAX_PODS)


def _scale(args: argparse.Namespace) -> float:
    scale: float = 1.0 if args.scale is None else args.scale
    if not 0 < scale <= 4:
        raise UsageError(f"--scale must be in (0, 4], got {scale}")
    return scale


def _time_scale(args: argparse.Namespace) -> float:
    return 1.0 if args.time_scale is None else float(args.time_scale)


def time_workload(args: argparse.Namespace) -> compare_time.WorkloadFor:
    """A seed -> workload function for time mode (the built-in default varies with the seed)."""
    check_flags(args)  # load_workload checks again for traces; the built-in default needs it here
    time_scale = _time_scale(args)
    if time_scale <= 0:
        raise UsageError(f"--time-scale must be positive, got {time_scale}")
    if args.philly or args.scenario or args.nodes or args.pods or args.variant:
        # Jobs without a duration (the multigpu files, open-ended scenario jobs) hold their
        # resources to the end of the replay.
        base = replace(philly.load(trace_dir(args.trace_dir)), claims=args.claims) if args.philly \
            else load_workload(args)
        scaled = replace(base, jobs=tuple(replace(j, arrival_s=j.arrival_s / time_scale) for j in base.jobs))
        return lambda _seed: scaled
    tasks: int = TIME_TASKS if args.tasks is None else args.tasks
    load: float = TIME_LOAD if args.load is None else args.load
    if tasks < 1 or load <= 0:
        raise UsageError("--tasks and --load must be positive")
    scale = _scale(args)
    return lambda seed: replace(default_workload(scale=scale, seed=seed, load=load, tasks=tasks), claims=args.claims)


def _time_compare(args: argparse.Namespace, policies: list[str], seeds: int, out: Path | None) -> int:
    from rich.progress import Progress

    make = time_workload(args)
    start = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task(f"time replay: {len(policies)} policies x {seeds} seeds", total=len(policies) * seeds)
        runs = compare_time.run_all(make, policies, list(range(42, 42 + seeds)), max(1, getattr(args, "workers", 1)),
                                    lambda _r: progress.advance(task))
    summary = compare_time.summarise(runs)
    first = make(42)
    meta = {"workload": first.description or first.name, "nodes": len(first.nodes), "jobs": len(first.jobs),
            "seeds": seeds, "time_scale": _time_scale(args), "seconds": round(time.perf_counter() - start, 1)}
    report.time_table(summary, f"{first.name}: time-driven replay (means over seeds)")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        curves = {r.policy: r.utilisation for r in runs if r.seed == 42}
        report.write_json({p: {k: {"0": v} for k, v in m.items()} for p, m in summary.items()}, out / "results.json", meta)
        shares = [(r.policy, r.samples) for r in runs if r.seed == 42 and r.samples]
        report.write_time_html(summary, curves, out / "report.html", f"gpufleet time replay: {first.name}", meta,
                               queue_report.shares_png(shares) if shares else None)
        print(f"wrote {out}/report.html, results.json")
    return 0


def _policies(text: str, profiles: list[Path] | None = None) -> list[str]:
    chosen = names(text, POLICY_NAMES, allow_empty=bool(profiles))
    for path in profiles or []:
        # Load once here so a bad file is reported before any simulation starts.
        load_profiles(read_text(path), str(path))
        chosen.append(f"file:{path}")
    return chosen


def _run(workload: Workload, policies: list[str], seeds: int, workers: int) -> compare.Summary:
    from rich.progress import Progress

    if seeds < 1:
        raise UsageError("--seeds must be at least 1")
    with Progress(transient=False) as progress:
        task = progress.add_task(f"{workload.name}: {len(policies)} policies x {seeds} seeds",
                                 total=len(policies) * seeds)
        results = compare.run_all(workload, policies, list(range(42, 42 + seeds)), max(1, workers),
                                  lambda _r: progress.advance(task))
    return compare.summarise(results)


def _meta(workload: Workload, seeds: int, seconds: float) -> dict[str, object]:
    return {"workload": workload.name, "nodes": len(workload.nodes), "tasks": len(workload.jobs),
            "gpus": workload.gpu_capacity_milli // 1000, "seeds": f"{seeds} (42..{41 + seeds})",
            "seconds": round(seconds, 1)}


def _simulate(args: argparse.Namespace) -> int:
    if args.mode == "time":
        return _time_compare(args, _policies(args.policy, args.profile), 1, None)
    workload = load_workload(args)
    summary = compare.summarise(compare.run_all(workload, _policies(args.policy, args.profile), [args.seed], 1))
    report.terminal_table(summary, f"{workload.name}: unallocated GPU % by arrived workload")
    return 0


def _compare(args: argparse.Namespace) -> int:
    output_dir(args.out, "--out")  # now, not after the runs
    if args.mode == "time":
        return _time_compare(args, _policies(args.policies, args.profile), args.seeds, args.out)
    workload = load_workload(args)
    start = time.perf_counter()
    summary = _run(workload, _policies(args.policies, args.profile), args.seeds, args.workers)
    meta = _meta(workload, args.seeds, time.perf_counter() - start)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(summary, args.out / "results.json", meta)
    report.write_csv(summary, args.out / "results.csv")
    report.write_html(summary, args.out / "report.html", f"gpufleet compare: {workload.name}", meta)
    report.terminal_table(summary, f"{workload.name}: unallocated GPU % by arrived workload (mean ± sd)")
    print(f"wrote {args.out}/report.html, results.json, results.csv")
    return 0


def _experiment(args: argparse.Namespace) -> int:
    output_file(args.json, "--json")  # now, not after the runs
    workload = load_workload(args)
    start = time.perf_counter()
    summary = _run(workload, _policies(args.policies, args.profile), args.seeds, args.workers)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(summary, args.json, _meta(workload, args.seeds, time.perf_counter() - start))
    report.terminal_table(summary, f"{workload.name}: unallocated GPU % (mean ± sd)")
    print(f"wrote {args.json}")
    return 0


def _levels(text: str, flag: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag}: comma-separated whole arrived-% values, got {text!r}") from None
    if any(not 1 <= x <= 130 for x in levels):
        raise UsageError(f"{flag}: each arrived-% must be in 1..130, got {text!r}")
    return levels


def _bound(args: argparse.Namespace) -> int:
    import json

    output_file(args.json, "--json")  # now, not after the runs
    if args.claims or args.profile:
        raise UsageError("the bound holds for every scheduler: --claims and --profile do not apply")
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    levels = _levels(args.levels, "--levels")
    offline = _levels(args.offline_levels, "--offline-levels")
    if not levels or not set(offline) <= set(levels):
        raise UsageError("--levels must name at least one column, and --offline-levels only columns of --levels")
    workload = load_workload(args)
    start = time.perf_counter()
    originals = [p for job in workload.jobs for p in job.pods]
    prob = sim_bound.problem(workload.nodes, originals)
    results = []
    for seed in range(42, 42 + args.seeds):
        results += sim_bound.seed_bounds(workload, seed, levels, offline_levels=offline, prob=prob,
                                         progress=lambda line: print(f"{workload.name}: {line}", flush=True))
    meta = _meta(workload, args.seeds, time.perf_counter() - start)
    meta["offline_policy"] = sim_bound.OFFLINE_POLICY
    table = sim_bound.summary(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "arrived_pct": table}, indent=1) + "\n")
    for level, row in table.items():
        best = "" if row["offline_best"] is None else f", offline best {row['offline_best']:.2f}"
        print(f"arrived {level} %: lower bound {row['lower_bound']:.2f}{best} (unallocated GPU %, mean of {args.seeds} seeds)")
    print(f"wrote {args.json}")
    return 0
