"""`gpufleet dev-cluster`: a local Kubernetes API test server with simulated GPU nodes.

    gpufleet dev-cluster --nodes 20 [--port 6443] [--kubeconfig ./dev-cluster.kubeconfig] [--seed 0]

Starts `gpufleet.testing.apiserver.ApiServer` with N generated GPU nodes and simulated
kubelets, writes a kubeconfig pointing at it, prints how to use it with kubectl, and serves
until SIGINT or SIGTERM. It is test infrastructure (no auth, no persistence), meant for
trying the scheduler and the manifests on a laptop: see docs/apiserver.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from gpufleet.cli.main import UsageError, port, random_seed
from gpufleet.testing.apiserver import ApiServer, gpu_nodes

DEFAULT_KUBECONFIG = "dev-cluster.kubeconfig"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev-cluster", help="serve a local Kubernetes API test server with simulated GPU nodes",
        description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=10, help="simulated GPU nodes to create (default 10)")
    parser.add_argument("--port", type=port, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--kubeconfig", type=Path, default=Path(DEFAULT_KUBECONFIG),
                        help=f"where to write the kubeconfig (default ./{DEFAULT_KUBECONFIG})")
    parser.add_argument("--seed", type=random_seed, default=0, help="seed of the generated node fleet (default 0)")
    parser.add_argument("--no-kubelet", action="store_true", help="do not simulate kubelets (bound pods stay Pending)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.nodes < 0:
        raise UsageError(f"--nodes must be 0 or more, got {args.nodes}")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        server = ApiServer(port=args.port, kubelet=not args.no_kubelet)
    except OSError as exc:
        raise UsageError(f"cannot listen on port {args.port}: {exc.strerror or exc}") from None
    with server:
        for node in gpu_nodes(args.nodes, seed=args.seed):
            server.create(node)
        path = server.write_kubeconfig(args.kubeconfig)
        print(f"gpufleet dev-cluster: serving the Kubernetes API at {server.url} with {args.nodes} GPU nodes "
              "(test server: no auth, nothing persisted)")
        print(f"  kubeconfig: {path}")
        print(f"  try:        kubectl --kubeconfig {path} get nodes -L nvidia.com/gpu.product")
        print(f"              export KUBECONFIG={path.resolve()}")
        print("  stop with Ctrl-C", flush=True)
        stop.wait()
    print("gpufleet dev-cluster: stopped", file=sys.stderr)
    return 0
