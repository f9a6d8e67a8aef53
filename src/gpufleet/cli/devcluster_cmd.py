"""`gpufleet dev-cluster`: the real Kubernetes control plane on this machine, with KWOK GPU nodes.

    gpufleet dev-cluster --nodes 20 [--port 6443] [--kubeconfig ./dev-cluster.kubeconfig] [--seed 0] [--dir DIR]

Starts etcd, kube-apiserver, kube-controller-manager and KWOK (`gpufleet.testing.cluster`,
binaries from `make kube`), installs gpufleet's CRDs, creates N generated GPU nodes that KWOK
keeps Ready and whose pods it runs, writes an admin kubeconfig, prints how to use it, and
serves until SIGINT or SIGTERM, then stops every component. State lives in --dir (default: a
fresh temporary directory, removed at the end). See docs/control-plane.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from gpufleet.cli.main import UsageError, port, random_seed
from gpufleet.cli.stop_signals import stop_signals
from gpufleet.testing.cluster import ApiError, Cluster, ClusterOptions, ComponentFailed, MissingBinaries
from gpufleet.testing.gpu_nodes import gpu_nodes

DEFAULT_KUBECONFIG = "dev-cluster.kubeconfig"
CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev-cluster", help="run the real Kubernetes control plane locally with simulated (KWOK) GPU nodes",
        description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=10, help="simulated GPU nodes to create (default 10)")
    parser.add_argument("--port", type=port, default=0, help="kube-apiserver's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--kubeconfig", type=Path, default=Path(DEFAULT_KUBECONFIG),
                        help=f"where to write the admin kubeconfig (default ./{DEFAULT_KUBECONFIG})")
    parser.add_argument("--seed", type=random_seed, default=0, help="seed of the generated node fleet (default 0)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep certificates, etcd data and component logs here (default: a temporary directory)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.nodes < 0:
        raise UsageError(f"--nodes must be 0 or more, got {args.nodes}")
    stop = threading.Event()
    with stop_signals(stop.set):
        return _serve(args, stop)


def _serve(args: argparse.Namespace, stop: threading.Event) -> int:
    """Start the cluster, print how to reach it, and keep it until `stop` is set."""
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="gpufleet-dev-cluster-"))
    cluster = Cluster(workdir, ClusterOptions(apiserver_port=args.port))
    try:
        cluster.start()
        for crd in sorted(CRDS.glob("*.yaml")) if CRDS.is_dir() else []:
            cluster.admin.create(yaml.safe_load(crd.read_text()))
        for node in gpu_nodes(args.nodes, seed=args.seed):
            cluster.admin.create(node)
        path = cluster.write_kubeconfig(args.kubeconfig)
    except MissingBinaries as exc:
        cluster.stop()
        raise UsageError(str(exc)) from None
    except ComponentFailed as exc:
        cluster.stop()
        if args.port and "address already in use" in str(exc):
            raise UsageError(f"--port {args.port}: address already in use") from None
        raise UsageError(f"the control plane did not start (logs in {workdir / 'logs'}): "
                         f"{str(exc).splitlines()[0]}") from None
    except (ApiError, OSError) as exc:
        cluster.stop()
        raise UsageError(f"the control plane did not start (logs in {workdir / 'logs'}): {exc}") from None
    versions = ", ".join(f"{k} {v}" for k, v in cluster.versions.items())
    print(f"gpufleet dev-cluster: kube-apiserver at {cluster.url} with {args.nodes} KWOK GPU nodes ({versions})")
    print(f"  kubeconfig: {path} (admin)")
    print(f"  logs:       {workdir / 'logs'}")
    print(f"  try:        kubectl --kubeconfig {path} get nodes -L nvidia.com/gpu.product")
    print(f"              export KUBECONFIG={path.resolve()}")
    print("  stop with Ctrl-C", flush=True)
    try:
        stop.wait()
    finally:
        cluster.stop()
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print("gpufleet dev-cluster: stopped", file=sys.stderr)
    return 0
