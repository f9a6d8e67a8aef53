"""`gpufleet scheduler` (the live scheduler) and `gpufleet snapshot dump|replay` (offline what-if).

    gpufleet scheduler [--kubeconfig PATH] --config PROFILE.yaml [--scheduler-name gpufleet]
                       [--leader-elect] [--lease-namespace gpufleet-system] [--lease-name gpufleet-scheduler]
                       [--http-port 8080] [--qps 50] [--burst 100] [--log-level INFO]
                       [--device-fault-grace 30] [--node-fault-grace 300] [--no-fault-eviction]
                       [--karpenter [--karpenter-provision gangs,fractions,mig] [--no-karpenter-guard]
                                    [--karpenter-release-after 30]] [--mig-repartition]
    gpufleet snapshot dump [--kubeconfig PATH] [--scheduler-name gpufleet] > snap.json
    gpufleet snapshot replay snap.json [--profile NAME|FILE] [--seed N]

Without `--kubeconfig` the pod's service account is used. The identity in leader election
is `$POD_NAME`, else the host name. SIGTERM stops the cycles, lets binds in flight finish,
releases the lease and exits 0; a lost lease exits 1 so that the Deployment restarts the
replica as a standby (kube-scheduler does the same).
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import math
import logging
import os
import random
import socket
import sys
import time
from pathlib import Path
from typing import Any

from gpufleet.core.cycle import schedule
from gpufleet.core.defrag import DefragSettings
from gpufleet.framework.profile import ProfileSettings, build_profile, load_profiles
from gpufleet.framework.profiles import BUILTIN, builtin
from gpufleet.framework.registry import BuildContext
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.kube import config as kube_config
from gpufleet.kube import snapshot_io
from gpufleet.kube.dump import collect
from gpufleet.kube.errors import KubeError
from gpufleet.kube.faults import FaultSettings
from gpufleet.kube.karpenter import KINDS, KarpenterSettings
from gpufleet.kube.leader import LeaseSettings
from gpufleet.kube.metrics import HealthServer, Metrics
from gpufleet.kube.rest import Rest
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.model import ClusterSnapshot, read_text
from gpufleet.model.annotations import SCHEDULER_NAME
from gpufleet.model.assignment_auth import load_keyring
from gpufleet.web.server import DashboardServer
from gpufleet.web.sources import LiveSource
from gpufleet.cli import main as cli_main
from gpufleet.cli.main import UsageError, finite_float, port, positive_int, random_seed
from gpufleet.cli.stop_signals import stop_signals



_DEFRAG = DefragSettings()
"""`--defrag`'s defaults."""
SWITCH_INTERVAL_S = 0.001
"""The scheduler process's GIL switch interval (`ServiceSettings.switch_interval_s`)."""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("scheduler", help="run the live scheduler for pods with schedulerName gpufleet",
                              description="Run the live scheduler (see docs/scheduler.md).")
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: the pod's service account)")
    p.add_argument("--config", type=Path, required=True, metavar="PROFILE.yaml",
                   help="scheduling profile (KubeSchedulerConfiguration-like YAML, see docs/concepts.md)")
    p.add_argument("--scheduler-name", default=SCHEDULER_NAME, help="spec.schedulerName of the pods to place")
    p.add_argument("--leader-elect", action="store_true", help="elect one active replica through a Lease")
    p.add_argument("--lease-namespace", default="gpufleet-system")
    p.add_argument("--lease-name", default="gpufleet-scheduler")
    p.add_argument("--lease-duration", type=finite_float, default=15.0, help="seconds (default 15)")
    p.add_argument("--renew-deadline", type=finite_float, default=10.0, help="seconds (default 10)")
    p.add_argument("--retry-period", type=finite_float, default=2.0, help="seconds (default 2)")
    p.add_argument("--http-port", type=port, default=8080, help="/metrics, /healthz, /readyz (0 = any free port)")
    p.add_argument("--assignment-keys", type=Path, metavar="DIR",
                   help="sign each GPU assignment for its pod with this key ring (a mounted Secret, docs/security.md), "
                        "so that agents started with the same keys serve only the scheduler's assignments "
                        "(default: unsigned)")
    p.add_argument("--dashboard-port", type=port, metavar="PORT",
                   help="serve the dashboard (docs/dashboard.md) on this port (default: off; 0 = any free port)")
    p.add_argument("--dashboard-address", default="127.0.0.1", metavar="ADDRESS",
                   help="address the dashboard listens on (default 127.0.0.1: reach it with kubectl port-forward)")
    p.add_argument("--qps", type=finite_float, default=50.0, help="client request budget per second, 0 = unlimited")
    p.add_argument("--burst", type=positive_int, default=100)
    p.add_argument("--workers", type=positive_int, default=64, help="binder threads (requests in flight)")
    p.add_argument("--api-timeout", type=finite_float, default=10.0,
                   help="seconds one API request may take (default 10)")
    p.add_argument("--assign-with", choices=["binding", "patch"], default="binding",
                   help="write the GPU assignment annotation in the Binding (one request, default) or PATCH it "
                        "before binding (for API servers that do not copy a Binding's annotations)")
    p.add_argument("--device-fault-grace", type=float, default=30.0, metavar="SECONDS",
                   help="evict the pods of a GPU unhealthy this long, and their gangs (default 30)")
    p.add_argument("--node-fault-grace", type=float, default=300.0, metavar="SECONDS",
                   help="evict the pods of a node NotReady this long, and their gangs (default 300, kube's "
                        "tolerationSeconds for not-ready/unreachable)")
    p.add_argument("--no-fault-eviction", action="store_true",
                   help="only stop placing on failed GPUs and nodes; never evict because of a fault")
    p.add_argument("--defrag", action="store_true",
                   help="move small preemptible pods (PodDisruptionBudgets respected) so that a big whole-GPU pod or "
                        "gang blocked only by fragmentation fits (docs/defragmentation.md)")
    p.add_argument("--defrag-budget", type=float, default=_DEFRAG.budget_gpu_hours_per_hour,
                   metavar="GPU_HOURS", help="GPU-hours of work moves may throw away in any hour "
                                             f"(default: {_DEFRAG.budget_gpu_hours_per_hour})")
    p.add_argument("--defrag-min-gpus", type=int, default=_DEFRAG.min_gpus, metavar="N",
                   help=f"only pods or gangs asking at least N whole GPUs (default: {_DEFRAG.min_gpus})")
    p.add_argument("--defrag-min-wait", type=float, default=_DEFRAG.min_wait_s, metavar="SECONDS",
                   help=f"only after they waited this long (default: {_DEFRAG.min_wait_s})")
    p.add_argument("--defrag-window", type=float, default=_DEFRAG.window_s, metavar="SECONDS",
                   help=f"a moved pod is not moved again for this long (default: {_DEFRAG.window_s})")
    p.add_argument("--defrag-checkpoint", type=float, default=None, metavar="SECONDS",
                   help="pods checkpoint this often, so a move loses only the work since the last checkpoint "
                        "(default: none, a move loses the pod's whole run)")
    p.add_argument("--mig-repartition", action="store_true",
                   help="change the MIG layouts of idle GPU instances for pods waiting for a MIG profile: writes "
                        "gpufleet.io/mig-layout on nodes, which their agents apply (docs/mig-repartitioning.md)")
    p.add_argument("--karpenter", action="store_true",
                   help="create karpenter.sh/v1 NodeClaims for pods Karpenter cannot size and keep "
                        "karpenter.sh/do-not-disrupt on busy GPU nodes (docs/autoscaling.md)")
    p.add_argument("--karpenter-provision", default=",".join(KINDS), metavar="KINDS",
                   help=f"which unschedulable pods gpufleet provisions for, comma-separated from {', '.join(KINDS)} "
                        "(default: all; the rest are left to Karpenter)")
    p.add_argument("--no-karpenter-guard", action="store_true",
                   help="do not manage karpenter.sh/do-not-disrupt on GPU nodes")
    p.add_argument("--karpenter-release-after", type=float, default=30.0,
                   metavar="SECONDS", help="a guarded GPU node loses karpenter.sh/do-not-disrupt once its GPUs "
                                           "have been idle this long (default: %(default)s)")
    p.add_argument("--dra-drivers", default="", metavar="DRIVERS",
                   help="DRA drivers whose ResourceSlice pools gpufleet allocates devices from, comma-separated "
                        "(e.g. gpu.nvidia.com,gpu.gpufleet.io; '*' for all; default: none). No other scheduler's "
                        "pods may use their DeviceClasses (docs/dra.md)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_run)

    s = subparsers.add_parser("snapshot", help="dump the cluster as the scheduler sees it, or replay a dump offline")
    s.set_defaults(func=lambda args: _help(s))
    sub = s.add_subparsers(dest="snapshot_command", metavar="ACTION")
    d = sub.add_parser("dump", help="print the scheduler's view of the cluster as JSON")
    d.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: the pod's service account)")
    d.add_argument("--scheduler-name", default=SCHEDULER_NAME)
    d.set_defaults(func=_dump)
    r = sub.add_parser("replay", help="run one cycle on a dump: what would the scheduler do")
    r.add_argument("file", type=Path)
    r.add_argument("--profile", default="default", help=f"built-in ({', '.join(BUILTIN)}) or a YAML file")
    r.add_argument("--seed", type=random_seed, default=0, help="seed for the cycle's random tie-breaks (default 0)")
    r.set_defaults(func=_replay)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def load_profile(path: Path, scheduler_name: str) -> ProfileSettings:
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    profiles = load_profiles(text, str(path))
    return next((p for p in profiles if p.name == scheduler_name), profiles[0])


def profile_by_name(name: str) -> ProfileSettings:
    """A built-in profile by its name, or the profile of a YAML file (`--profile NAME|FILE`)."""
    return builtin(name) if name in BUILTIN else load_profile(Path(name), SCHEDULER_NAME)


def _defrag_settings(args: argparse.Namespace) -> DefragSettings | None:
    """`--defrag` and its knobs; a value out of range is a usage error naming the flag."""
    if not args.defrag:
        return None
    for flag, value in (("--defrag-budget", args.defrag_budget), ("--defrag-min-wait", args.defrag_min_wait),
                        ("--defrag-window", args.defrag_window)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{flag}: must be a non-negative number of {'GPU-hours' if 'budget' in flag else 'seconds'}, "
                             f"got {value}")
    if args.defrag_min_gpus < 1:
        raise UsageError(f"--defrag-min-gpus: must be at least 1, got {args.defrag_min_gpus}")
    if args.defrag_checkpoint is not None and (not math.isfinite(args.defrag_checkpoint) or args.defrag_checkpoint <= 0):
        raise UsageError(f"--defrag-checkpoint: must be a positive number of seconds, got {args.defrag_checkpoint}")
    return DefragSettings(min_gpus=args.defrag_min_gpus, min_wait_s=args.defrag_min_wait, window_s=args.defrag_window,
                          budget_gpu_hours_per_hour=args.defrag_budget, checkpoint_s=args.defrag_checkpoint,
                          interval_s=10.0)


def _connect(kubeconfig: Path | None, timeout_s: float = 10.0) -> Rest:
    try:
        cfg = kube_config.from_kubeconfig(kubeconfig) if kubeconfig else kube_config.in_cluster()
        return Rest(cfg, timeout_s=timeout_s, field_manager=kube_config.SCHEDULER_FIELD_MANAGER)
    except KubeError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot load a certificate: {exc.strerror or exc}") from None


def _enable_faulthandler() -> None:
    """A crash in native code (OpenSSL, NumPy) leaves every thread's Python stack in the log. Not
    where standard error is no file (the command run in-process, under a test's capture)."""
    try:
        faulthandler.enable()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass


def _run(args: argparse.Namespace) -> int:
    _enable_faulthandler()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per request otherwise
    profile = load_profile(args.config, args.scheduler_name)
    build_profile(profile)  # unknown plugins or bad args: fail now, not in the first cycle
    if args.assignment_keys is not None:
        load_keyring(args.assignment_keys)  # a ModelError naming the directory or the key, now
    else:
        logging.getLogger("gpufleet.scheduler").warning(
            "no --assignment-keys: GPU assignments are written unsigned (docs/security.md)")
    if args.qps < 0:
        raise UsageError(f"--qps must be 0 (unlimited) or more, got {args.qps:g}")
    if args.api_timeout <= 0:
        raise UsageError(f"--api-timeout must be a positive number of seconds, got {args.api_timeout:g}")
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    lease = None
    if args.leader_elect:
        try:
            lease = LeaseSettings(args.lease_namespace, args.lease_name, args.lease_duration, args.renew_deadline,
                                  args.retry_period)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        faults = FaultSettings(args.device_fault_grace, args.node_fault_grace, evict=not args.no_fault_eviction)
        karpenter = (KarpenterSettings(frozenset(k.strip() for k in args.karpenter_provision.split(",") if k.strip()),
                                       guard=not args.no_karpenter_guard,
                                       release_after_s=args.karpenter_release_after) if args.karpenter else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    defrag = _defrag_settings(args)
    rest = _connect(args.kubeconfig, args.api_timeout)
    service = SchedulerService(rest, profile, ServiceSettings(
        scheduler_name=args.scheduler_name, identity=f"{identity}_{os.getpid()}" if not os.environ.get("POD_NAME")
        else identity, qps=args.qps, burst=args.burst, workers=args.workers, leader_election=lease,
        assign=args.assign_with, faults=faults, karpenter=karpenter, assignment_keys=args.assignment_keys,
        mig_repartition=args.mig_repartition, defrag=defrag, full_gc_interval_s=5.0,
        switch_interval_s=SWITCH_INTERVAL_S,
        dra_drivers=tuple(d.strip() for d in args.dra_drivers.split(",") if d.strip())))
    try:
        http = HealthServer(args.http_port, service.metrics, service.ready, service.leading).start()
    except OSError as exc:
        raise UsageError(f"--http-port {args.http_port}: {exc.strerror or exc}") from None

    dashboard = None
    if args.dashboard_port is not None:
        try:
            dashboard = DashboardServer(LiveSource(service), args.dashboard_address, args.dashboard_port).start()
        except OSError as exc:
            http.stop()
            raise UsageError(f"--dashboard-port {args.dashboard_port}: {exc.strerror or exc}") from None

    print(f"gpufleet scheduler: {service.settings.identity} on {rest.source}, profile {args.config} "
          f"(schedulerName {profile.name}), "
          f"http :{http.port}" + (f", dashboard {dashboard.url}" if dashboard else ""), file=sys.stderr, flush=True)
    with stop_signals(service.stop):
        service.run()
        service.shutdown()
    if dashboard is not None:
        dashboard.stop()
    http.stop()
    rest.close()
    if service.lost_lease:
        print("gpufleet scheduler: lost the lease; exiting", file=sys.stderr)
        return 1
    return 0


def _dump(args: argparse.Namespace) -> int:
    rest = _connect(args.kubeconfig)
    try:
        dump = collect(rest, Retrier(RetryPolicy(), logging.getLogger("gpufleet.snapshot")), args.scheduler_name)
    except KubeError as exc:
        raise UsageError(str(exc)) from None
    finally:
        rest.close()
    sys.stdout.write(snapshot_io.dumps(dump) + "\n")
    return 0


def _replay(args: argparse.Namespace) -> int:
    try:
        text = read_text(args.file)
    except FileNotFoundError:
        raise UsageError(f"{args.file}: no such file") from None
    dump = snapshot_io.loads(text, str(args.file))
    settings = profile_by_name(args.profile)
    snap = ClusterSnapshot.build(dump.nodes, dump.running, dump.pod_groups)
    profile = build_profile(settings, BuildContext(typical_tasks(dump.pending)))
    started = time.perf_counter()
    result = schedule(snap, dump.pending, profile, now=time.time(), rng=random.Random(args.seed))
    took = time.perf_counter() - started
    names = {p.uid: p.key for p in dump.pending}
    print(f"{len(dump.nodes)} nodes, {len(dump.running)} running, {len(dump.pending)} pending; "
          f"profile {args.profile}: {len(result.binds)} bound, {len(result.unschedulable)} unschedulable "
          f"({took * 1000:.0f} ms)")
    if result.binds:
        print(f"\n{'POD':<40} {'NODE':<24} DEVICES")
        for b in result.binds:
            devices = (f"gpus {','.join(map(str, b.gpus))}" + (f" x{b.milli}m" if b.milli < 1000 else "")
                       if b.gpus else f"mig {','.join(map(str, b.mig_slices))}" if b.mig_slices else "-")
            print(f"{names.get(b.pod, b.pod):<40} {b.node:<24} {devices}")
    if result.unschedulable or dump.invalid:
        print(f"\n{'POD':<40} REASON")
        for uid, status in result.unschedulable.items():
            print(f"{names.get(uid, uid):<40} {status.message}")
        for key, error in dump.invalid.items():
            print(f"{key:<40} {error}")
    for e in result.evictions:
        print(f"evict {e.pod}: {e.reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m gpufleet.cli.scheduler_cmd scheduler|snapshot ...`: these commands alone.

    The same commands as `gpufleet scheduler`, without importing the other subcommands (a
    container running only the scheduler need not load the simulator).
    """
    parser = argparse.ArgumentParser(prog="gpufleet")
    add_parser(parser.add_subparsers(dest="command", metavar="COMMAND"))
    return cli_main.run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
