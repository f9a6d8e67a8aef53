"""`Fleet`: what the dashboard shows, whichever source it came from.

Three sources fill it (`web/sources.py`): the live scheduler's cache, a dump written by
`gpufleet snapshot dump`, and a simulated replay stepping through time. This module is pure:
it turns model objects (nodes, placements, pending pods, queues) into a `Fleet`, and knows
nothing of HTTP or the API server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from gpufleet.kube.queues import queue_figures
from gpufleet.model import ClusterSnapshot, GpuKind, GpuRequest, ModelError, NodeInfo, Placement, PodSpec, PodUid
from gpufleet.model import Queue, QueueTree
from gpufleet.model.queue import GPU

POOL_LABELS = ("karpenter.sh/nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
               "kubernetes.azure.com/agentpool")
"""Node labels naming a node's pool, first found wins: Karpenter's NodePool, then the managed node
groups of GKE, EKS and AKS. A node with none of them is in pool `-`."""
NO_POOL = "-"


@dataclass(frozen=True, slots=True)
class PodRef:
    """A running pod as the dashboard names it."""

    name: str
    """`namespace/name`, or the pod's UID where only that is known (a dump's running pods)."""
    namespace: str = ""
    queue: str = "default"


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending pod and why it waits (the scheduler's own words)."""

    pod: str
    namespace: str
    queue: str
    request: str
    reason: str
    """`Unschedulable`, `SchedulingGated`, `InvalidRequest` or `Waiting` (not tried yet)."""
    message: str = ""


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue in GPUs: what it holds against its fair share, guarantee and limit."""

    name: str
    parent: str | None
    weight: float
    allocated: float
    fair_share: float
    guaranteed: float | None
    limit: float | None
    pending: int
    """Pods waiting in this queue or below it."""


@dataclass(frozen=True, slots=True)
class FleetEvent:
    time: float
    reason: str
    """`Preempted`, `Evicted`, `GpuFault`, `NodeNotReady`, ..."""
    subject: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Fleet:
    source: str
    """What is shown: `live: <identity>`, `snapshot: FILE`, `replay: <workload>`."""
    time: float
    """Seconds: wall time (epoch) for live and snapshot sources, simulated time for a replay."""
    nodes: tuple[NodeInfo, ...]
    placements: tuple[Placement, ...]
    pods: Mapping[PodUid, PodRef] = field(default_factory=lambda: MappingProxyType({}))
    waiting: tuple[Waiting, ...] = ()
    queues: tuple[QueueRow, ...] = ()
    events: tuple[FleetEvent, ...] = ()
    not_ready: frozenset[str] = frozenset()
    """Nodes the scheduler does not place on right now (NotReady, or failed in a replay)."""
    unhealthy: frozenset[tuple[str, int]] = frozenset()
    """(node, device position) of GPUs out of service beyond what the nodes' own `Gpu.healthy` say."""
    simulated: bool = False


def out_of_service(snap: ClusterSnapshot) -> tuple[frozenset[str], frozenset[tuple[str, int]]]:
    """Nodes not ready and unhealthy devices as the snapshot's usage holds them (quarantined by a
    fault, or marked by the agent)."""
    u, c = snap.usage, snap.cluster
    down = frozenset(str(n.name) for i, n in enumerate(c.nodes) if not u.node_ready[i])
    sick = frozenset((str(n.name), j) for i, n in enumerate(c.nodes) for j in range(len(n.gpus))
                     if not u.gpu_healthy[i, j])
    return down, sick


def pool_of(node: NodeInfo) -> str:
    for label in POOL_LABELS:
        value = node.labels.get(label)
        if value:
            return value
    return NO_POOL


def model_of(node: NodeInfo) -> str:
    return node.gpus[0].model if node.gpus else "-"


def request_text(gpu: GpuRequest) -> str:
    """What a pod asks of GPUs, as a person would say it: `2 GPUs`, `250m GPU`, `MIG 1g.10gb`."""
    if gpu.kind is GpuKind.WHOLE:
        return f"{gpu.count} GPU" + ("s" if gpu.count != 1 else "")
    if gpu.kind is GpuKind.FRACTION:
        return f"{gpu.milli}m GPU" + (f", {gpu.mem_mib} MiB" if gpu.mem_mib else "")
    if gpu.kind is GpuKind.MIG:
        return f"MIG {gpu.mig_profile}" + (f" x{gpu.count}" if gpu.count > 1 else "")
    return "no GPU"


_NODES_AVAILABLE = re.compile(r"^0/\d+ nodes are available: (.*?)\.?$")
_COUNT = re.compile(r"^\d+ ")
_DETAIL = re.compile(r" \([^()]*\)\.?$")


def reason_group(message: str) -> str:
    """A pending message without its node counts and in a fixed order, so that pods waiting for the
    same reasons group together: `0/200 nodes are available: 150 Insufficient GPU, 50 node(s) had
    untolerated taint.` -> `Insufficient GPU, node(s) had untolerated taint`. Other messages (a
    queue's limit, a gang short of members) lose only a closing detail in parentheses: `queue
    team-b: limit of 12 GPU reached (11.75 GPU in use, the pod asks 0.5 GPU)` -> `queue team-b:
    limit of 12 GPU reached`."""
    m = _NODES_AVAILABLE.match(message.strip())
    if not m:
        return _DETAIL.sub("", message.strip())
    return ", ".join(sorted(_COUNT.sub("", part.strip()) for part in m.group(1).split(", ")))


def queue_rows(queues: Sequence[Queue], snapshot: ClusterSnapshot, pending: Sequence[PodSpec]) -> tuple[QueueRow, ...]:
    """The queues in GPUs: allocated, fair share (held plus asked, as the core computes it), guarantee,
    limit, and pods waiting; `default` is always there. A tree that does not validate shows as no
    rows (the scheduler itself falls back to the default queue then, and says so in its log)."""
    if not snapshot.cluster.n_nodes:
        return ()
    try:
        tree = QueueTree.build(queues)
    except ModelError:
        return ()
    f = queue_figures(tree, snapshot, pending)
    gpu = f.dims.index(GPU)
    rows = []
    for i, name in enumerate(f.names):
        q = tree.queues[name]
        rows.append(QueueRow(name, q.parent, q.weight, _gpus(f.allocated[i, gpu]), _gpus(f.fair_share[i, gpu]),
                             _gpus(q.guaranteed[GPU]) if GPU in q.guaranteed else None,
                             _gpus(q.limit[GPU]) if GPU in q.limit else None, f.waiting[i]))
    return tuple(rows)


def _gpus(milli: float | np.floating[Any]) -> float:
    return round(float(milli) / 1000, 3)


def waiting_of(pending: Iterable[PodSpec], reasons: Mapping[PodUid, str]) -> tuple[Waiting, ...]:
    """Pending pods with the message the core gave each (`Waiting` when it gave none yet)."""
    return tuple(Waiting(p.key, p.namespace, p.queue, request_text(p.gpu),
                         "Unschedulable" if p.uid in reasons else "Waiting", reasons.get(p.uid, ""))
                 for p in pending)
