"""`gpufleet dashboard`: the dashboard page on a dump or on a simulated replay.

    gpufleet dashboard --snapshot snap.json [--profile NAME|FILE] [--port 8081] [--address 127.0.0.1]
    gpufleet dashboard --replay [--scenario FILE | --nodes N --tasks N --load L] [--frame-s 120]
                       [--until-s S] [--profile NAME|FILE] [--seed N] [--port 8081]

A dump (`gpufleet snapshot dump`) shows as one frame, with the reasons its pending pods would
get from one cycle of the profile now. A replay runs the simulator first (the built-in
synthetic openb-like workload by default: 200 nodes, offered 3x what they hold, so a queue
builds up) up to the last arrival, keeping one frame every `--frame-s` simulated seconds; the
page steps through them. The live scheduler serves the same page
itself (`gpufleet scheduler --dashboard-port`). See docs/dashboard.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpufleet.cli.main import UsageError, finite_float, port, random_seed
from gpufleet.cli.scheduler_cmd import profile_by_name
from gpufleet.cli.stop_signals import stop_signals
from gpufleet.framework.profile import build_for
from gpufleet.framework.profiles import BUILTIN
from gpufleet.kube import snapshot_io
from gpufleet.model import read_text
from gpufleet.sim.default_workload import OPENB_NODES, default_workload
from gpufleet.sim.replay import replay
from gpufleet.sim.traces import scenario
from gpufleet.sim.workload import Workload
from gpufleet.web.server import DashboardServer
from gpufleet.web.sources import ReplayRecorder, Source, StaticSource, from_dump

REPLAY_NODES = 200
REPLAY_TASKS = 5000
REPLAY_LOAD = 3.0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("dashboard", help="serve the dashboard page on a dump or a simulated replay",
                              description=__doc__.splitlines()[0] if __doc__ else None)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--snapshot", type=Path, metavar="FILE", help="a dump written by `gpufleet snapshot dump`")
    what.add_argument("--replay", action="store_true", help="simulate a workload and step through it in time")
    p.add_argument("--profile", default="default", help=f"built-in ({', '.join(BUILTIN)}) or a YAML file "
                                                        "(default: default)")
    p.add_argument("--scenario", type=Path, metavar="FILE", help="replay: a scenario file (docs/scenarios.md) "
                                                                 "instead of the built-in workload")
    p.add_argument("--nodes", type=int, default=REPLAY_NODES,
                   help=f"replay, built-in workload: nodes (default {REPLAY_NODES})")
    p.add_argument("--tasks", type=int, default=REPLAY_TASKS,
                   help=f"replay, built-in workload: tasks to replay (default {REPLAY_TASKS})")
    p.add_argument("--load", type=finite_float, default=REPLAY_LOAD,
                   help=f"replay, built-in workload: offered GPU load (default {REPLAY_LOAD:g}: a queue builds up)")
    p.add_argument("--frame-s", type=finite_float, default=120.0, metavar="SECONDS",
                   help="replay: simulated seconds between frames (default 120)")
    p.add_argument("--until-s", type=finite_float, metavar="SECONDS",
                   help="replay: stop the simulation here (default: the built-in workload's last arrival; a "
                        "scenario runs to its end)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of the workload and the cycles (default 0)")
    p.add_argument("--address", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8081, help="port to listen on (default 8081; 0 = any free port)")
    p.set_defaults(func=run)


def source_of(args: argparse.Namespace) -> Source:
    settings = profile_by_name(args.profile)
    if args.snapshot is not None:
        for flag in ("scenario", "until_s"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} applies only to --replay")
        try:
            text = read_text(args.snapshot)
        except FileNotFoundError:
            raise UsageError(f"{args.snapshot}: no such file") from None
        dump = snapshot_io.loads(text, str(args.snapshot))
        return StaticSource([from_dump(dump, settings, f"snapshot: {args.snapshot}", os.path.getmtime(args.snapshot),
                                       args.seed)])
    if args.frame_s <= 0:
        raise UsageError(f"--frame-s must be a positive number of seconds, got {args.frame_s:g}")
    workload = _workload(args)
    recorder = ReplayRecorder(workload.name, workload.queues)
    started = time.monotonic()
    until = args.until_s
    if until is None and args.scenario is None:  # the built-in stream would drain for hours after it
        until = max((j.arrival_s for j in workload.jobs), default=0.0)
    print(f"gpufleet dashboard: replaying {workload.name}: {len(workload.nodes)} nodes, {len(workload.jobs)} jobs"
          + (f" up to t = {until:.0f} s" if until is not None else "") + f", profile {args.profile} ...",
          file=sys.stderr, flush=True)
    pods = [p for j in workload.jobs for p in j.pods]
    replay(workload, build_for(settings, pods), args.seed, until_s=until, observe=recorder,
           observe_every_s=args.frame_s)
    print(f"gpufleet dashboard: {len(recorder.fleets)} frames in {time.monotonic() - started:.1f} s",
          file=sys.stderr, flush=True)
    return StaticSource(recorder.fleets)


def _workload(args: argparse.Namespace) -> Workload:
    if args.scenario is not None:
        return scenario.load(args.scenario)
    if args.tasks < 1 or args.nodes < 1 or args.load <= 0:
        raise UsageError(f"--nodes and --tasks must be at least 1 and --load above 0, got {args.nodes}, "
                         f"{args.tasks}, {args.load:g}")
    return default_workload(scale=args.nodes / OPENB_NODES, seed=args.seed, load=args.load, tasks=args.tasks)


def run(args: argparse.Namespace) -> int:
    source = source_of(args)
    try:
        server = DashboardServer(source, args.address, args.port).start()
    except OSError as exc:
        raise UsageError(f"--port {args.port}: {exc.strerror or exc}") from None
    stop = threading.Event()
    with stop_signals(stop.set):
        print(f"gpufleet dashboard: {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        stop.wait()
    server.stop()
    return 0
