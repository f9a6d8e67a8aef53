"""`gpufleet agent`: the node agent's command line.

    gpufleet agent inventory [--json] [--fake FIXTURE]     what discovery sees
    gpufleet agent labels [--fake FIXTURE] [--config F]    the labels and annotation it would write
    gpufleet agent resourceslices --node-name N [--mig static|dynamic] [--memory-shares] [--fake FIXTURE]
                                                           the DRA ResourceSlices it would publish
    gpufleet agent run --config F --kubelet-dir D --node-name N [--kubeconfig K] [--fake FIXTURE]

`run` reaches the API server through `gpufleet.kube` (wired in `agent_api`), chosen so:

1. `--kubeconfig K`: that file's current context;
2. else, if `--state-file`, `--nfd-file` or `--node-label` asks for offline output or
   labels: no API server (an explicit request beats the environment);
3. else, if `KUBERNETES_SERVICE_HOST` is set (inside a pod): the pod's service account;
4. else: no API server. The kubelet is still served; fractions are refused (their
   assignments cannot be read) and the node state is not written anywhere.

`--kubeconfig` together with an offline option is an error rather than a guess.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from gpufleet.agent import configsource, draplugin, fake, inventory, mig_layout, report, resourceslices
from gpufleet.agent.backend import BackendError, GpuBackend
from gpufleet.agent.kube import KubeAccessError, NodeApi, OfflineNodeApi
from gpufleet.agent.nvml import NvmlBackend
from gpufleet.agent.plan import plan_resources
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.cli import agent_api
from gpufleet.model import ModelError
from gpufleet.model.assignment_auth import load_keyring
from gpufleet.cli.main import UsageError, port
from gpufleet.cli.stop_signals import stop_signals

DEFAULT_KUBELET_DIR = "/var/lib/kubelet/device-plugins"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("agent", help="node agent: GPU discovery, device plugin, health, labels",
                                   description=__doc__.splitlines()[0] if __doc__ else None)
    parser.set_defaults(func=lambda args: _help(parser))
    sub = parser.add_subparsers(dest="agent_command", metavar="ACTION")
    fixture_help = f"use a fake GPU backend: a shipped fixture ({', '.join(fake.fixture_names())}) or a YAML path"

    inv = sub.add_parser("inventory", help="print the GPUs discovery sees (NVML, or --fake)")
    inv.add_argument("--json", action="store_true", help="print everything as JSON")
    inv.add_argument("--fake", metavar="FIXTURE", help=fixture_help)
    inv.set_defaults(func=_inventory)

    lab = sub.add_parser("labels", help="print the node labels, annotation and capacity the agent would write")
    lab.add_argument("--fake", metavar="FIXTURE", help=fixture_help)
    _config_arguments(lab)
    lab.set_defaults(func=_labels)

    rs = sub.add_parser("resourceslices", help="print the DRA ResourceSlices for this node's GPUs (YAML, for kubectl)")
    rs.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node's name (default: $NODE_NAME)")
    rs.add_argument("--fake", metavar="FIXTURE", help=fixture_help)
    rs.add_argument("--driver", default=resourceslices.DRIVER, help=f"DRA driver name (default {resourceslices.DRIVER})")
    rs.add_argument("--mig", choices=[m.value for m in resourceslices.MigMode], default="static",
                    help="static: the MIG instances carved now; dynamic: every placement, as partitionable devices "
                         "(default static)")
    rs.add_argument("--memory-shares", action="store_true",
                    help="whole GPUs take several claims, each asking for part of the memory (consumable capacity)")
    rs.add_argument("--generation", type=int, default=1, help="the pool's generation (default 1)")
    rs.add_argument("--json", action="store_true", help="print a JSON list instead of YAML documents")
    rs.set_defaults(func=_resource_slices)

    ml = sub.add_parser("mig-layout", help="show (or with --apply, make) the change a MIG layout asks of this node",
                        description="LAYOUT is the value of the node annotation gpufleet.io/mig-layout, e.g. "
                                    '\'{"generation": 1, "gpus": {"GPU-...": ["3g.40gb@0", "3g.40gb@4"]}}\', '
                                    "or a file holding it. Without --apply nothing is changed.")
    ml.add_argument("layout", metavar="LAYOUT", help="the layout as JSON, or a file with it")
    ml.add_argument("--fake", metavar="FIXTURE", help=fixture_help)
    ml.add_argument("--apply", action="store_true",
                    help="destroy and create the instances (needs root on a real GPU; an instance running a process "
                         "is refused, but pods assigned an instance and not yet started are not known here: "
                         "the running agent checks those)")
    ml.set_defaults(func=_mig_layout)

    run = sub.add_parser("run", help="serve the device plugins, watch health, write the node")
    run.add_argument("--kubelet-dir", type=Path, default=Path(DEFAULT_KUBELET_DIR),
                     help=f"device-plugin directory holding kubelet.sock (default {DEFAULT_KUBELET_DIR})")
    run.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                     help="this node's name (default: $NODE_NAME)")
    run.add_argument("--fake", metavar="FIXTURE", help=fixture_help)
    _config_arguments(run)
    run.add_argument("--kubeconfig", type=Path,
                     help="kubeconfig of the API server (default: in-cluster config inside a pod, else none)")
    run.add_argument("--metrics-port", type=port, help="Prometheus port, 0 = off (default: config, 9402)")
    run.add_argument("--assignment-keys", type=Path, metavar="DIR",
                     help="the scheduler's assignment-signing keys (a mounted Secret, docs/security.md): serve only "
                          "GPU assignments the scheduler signed for that pod (default: trust unsigned ones)")
    run.add_argument("--kubelet-plugins-dir", type=Path, default=Path(draplugin.DEFAULT_PLUGINS_DIR),
                     help="with gpufleet.dra.publish: where the DRA socket goes, <dir>/<driver>/dra.sock "
                          f"(default {draplugin.DEFAULT_PLUGINS_DIR})")
    run.add_argument("--kubelet-registry-dir", type=Path, default=Path(draplugin.DEFAULT_REGISTRY_DIR),
                     help=f"the kubelet's plugin-registration directory (default {draplugin.DEFAULT_REGISTRY_DIR})")
    run.add_argument("--cdi-root", type=Path, default=Path(draplugin.DEFAULT_CDI_ROOT),
                     help=f"where prepared DRA claims' CDI specs go (default {draplugin.DEFAULT_CDI_ROOT})")
    run.add_argument("--state-file", type=Path, help="offline: write the node state the agent would patch here (JSON)")
    run.add_argument("--nfd-file", type=Path, help="offline: write the labels as a node-feature-discovery feature file")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.set_defaults(func=_run)


def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="config file, or a directory of named configs (default: built-in)")
    parser.add_argument("--config-default", metavar="NAME", help="config name to use when the node label does not pick one")
    parser.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE",
                        help="a node label, for choosing a config without API access (repeatable)")


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _backend(fixture: str | None) -> GpuBackend:
    try:
        return fake.load_fixture(fixture) if fixture else NvmlBackend()
    except BackendError as exc:
        raise UsageError(str(exc)) from None


def _node_labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--node-label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def _source(args: argparse.Namespace, labels: dict[str, str]) -> configsource.ConfigSource:
    return configsource.ConfigSource(args.config, args.config_default, lambda: labels)


def _discover(fixture: str | None) -> inventory.NodeGpuInventory:
    backend = _backend(fixture)
    try:
        return inventory.inventory(backend.system(), backend.devices())
    except BackendError as exc:
        raise UsageError(str(exc)) from None
    finally:
        backend.close()


def _inventory(args: argparse.Namespace) -> int:
    inv = _discover(args.fake)
    if args.json:
        print(json.dumps(inventory.to_json(inv), indent=2))
        return 0
    print(f"driver {inv.driver_version}, CUDA {inv.cuda_version[0]}.{inv.cuda_version[1]}, machine {inv.machine or 'unknown (no DMI product name)'}")
    for g in inv.gpus:
        mig = ",".join(s.profile for s in g.mig_slices) if g.mig_enabled else "-"
        print(f"{g.index:>3} {g.uuid} {g.product} {g.mem_mib} MiB numa={'-' if g.numa_node is None else g.numa_node} "
              f"nvlink={g.nvlink_domain or '-'} mig={mig}")
    return 0


def _labels(args: argparse.Namespace) -> int:
    loaded = _source(args, _node_labels(args.node_label)).poll()
    assert loaded is not None  # a first poll always returns the config
    inv = _discover(args.fake)
    plan_resources(inv, loaded.config)  # a config this node cannot serve is an error here too
    patch = report.node_patch(inv, loaded.config, {})
    print(json.dumps({"config": loaded.name, "labels": dict(sorted(patch.labels.items())),
                      "annotations": dict(patch.annotations), "capacity": dict(patch.capacity)}, indent=2))
    return 0


def _mig_layout(args: argparse.Namespace) -> int:
    text = args.layout
    if not text.lstrip().startswith("{"):
        try:
            text = Path(text).read_text()
        except OSError as exc:
            raise UsageError(f"LAYOUT {args.layout!r}: not JSON and not a readable file ({exc.strerror})") from None
    try:
        desired = mig_layout.parse(text)
    except mig_layout.LayoutError as exc:
        raise UsageError(str(exc)) from None
    backend = _backend(args.fake)
    failed = False
    try:
        for uuid, want in sorted(desired.gpus.items()):
            gpu = inventory.inventory(backend.system(), backend.devices()).gpu(uuid)
            try:
                if gpu is None:
                    raise mig_layout.LayoutError(f"GPU {uuid}: not on this node")
                change = mig_layout.diff(gpu, want)
                steps = [f"destroy {s.profile}@{s.placement_start} ({s.uuid})" for s in change.destroy] + \
                    [f"create {o.profile}@{start}" for o, start, _ in change.create]
                print(f"GPU {uuid}: " + ("; ".join(steps) if steps else "no change"))
                if args.apply and not change.empty:
                    mig_layout.apply(backend, change, frozenset())
                    print(f"GPU {uuid}: applied")
            except (mig_layout.LayoutError, BackendError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                failed = True
    finally:
        backend.close()
    return 1 if failed else 0


def _resource_slices(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise UsageError("--node-name is required (or set $NODE_NAME): the slices name the node they belong to")
    if args.generation < 1:
        raise UsageError(f"--generation {args.generation}: must be 1 or more")
    options = resourceslices.SliceOptions(args.driver, resourceslices.MigMode(args.mig), args.memory_shares)
    try:
        slices = resourceslices.resource_slices(_discover(args.fake), args.node_name, args.generation, options)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(list(slices), indent=2))
    else:
        print(yaml.safe_dump_all(slices, sort_keys=False), end="")
    return 0


def _node_api(args: argparse.Namespace) -> tuple[NodeApi, configsource.ConfigSource]:
    """The API access chosen as the module docstring says, and a config source reading labels through it."""
    offline = [name for name, value in (("--state-file", args.state_file), ("--nfd-file", args.nfd_file),
                                        ("--node-label", args.node_label)) if value]
    if args.kubeconfig and offline:
        raise UsageError(f"--kubeconfig reads and writes the node through the API; {', '.join(offline)} "
                         f"{'is' if len(offline) == 1 else 'are'} for running without it")
    if args.kubeconfig or (not offline and os.environ.get("KUBERNETES_SERVICE_HOST")):
        api = agent_api.connect(args.kubeconfig, args.node_name)
        return api, configsource.ConfigSource(args.config, args.config_default, api.node_labels)
    labels = _node_labels(args.node_label)
    return OfflineNodeApi(args.state_file, args.nfd_file, labels), _source(args, labels)


def _run(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise UsageError("--node-name is required (or set NODE_NAME)")
    if not args.kubelet_dir.is_dir():
        raise UsageError(f"--kubelet-dir {args.kubelet_dir}: no such directory")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.assignment_keys is not None:
        load_keyring(args.assignment_keys)  # a ModelError naming the directory or key, before anything starts
    api, source = _node_api(args)
    agent = Agent(lambda: _backend(args.fake), api, source,
                  AgentOptions(args.node_name, args.kubelet_dir, metrics_port=args.metrics_port,
                               assignment_keys=args.assignment_keys, dra_plugins_dir=args.kubelet_plugins_dir,
                               dra_registry_dir=args.kubelet_registry_dir, cdi_root=args.cdi_root))

    stopping = threading.Event()
    with stop_signals(stopping.set):  # before start(): a stop request during startup is kept
        try:
            agent.start()
        except (BackendError, KubeAccessError, draplugin.CheckpointError) as exc:  # KubeAccessError: node labels
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"cannot serve metrics or sockets: {exc.strerror or exc}") from None
        served = [p.plan.resource for p in agent.plugins] + \
            ([f"DRA driver {agent.dra.driver}"] if agent.dra else [])
        print(f"gpufleet agent: serving {', '.join(served) or 'nothing (idle)'} for node {args.node_name}", file=sys.stderr)
        while not stopping.wait(0.5):
            pass
        agent.stop()
    return 0
