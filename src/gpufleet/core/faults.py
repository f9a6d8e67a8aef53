"""Faults as the core sees them: who must go, and what is out of service until repaired.

A device-level fault (an XID that takes one GPU down) quarantines that device only: the
node's other GPUs go on serving. A node-level fault (host, network, NotReady) takes the
node out. Either way every running pod on the lost capacity is evicted, and so is every
other running member of its pod group: a distributed job whose rank died cannot go on, so
the gang is requeued whole instead of idling its surviving GPUs until a collective times
out. `quarantine` also stamps the node's fault time, which the `RecentFaults` score plugin
reads to prefer other nodes for a while; `restore` returns the capacity when it is healthy.

Drivers (the simulator, the live scheduler) decide when a fault happened and when it is
repaired; these functions are pure and return new snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from gpufleet.core.result import Eviction
from gpufleet.model import ClusterSnapshot, NodeName, Placement, PodUid
from gpufleet.model.dra_table import DeviceRef
from gpufleet.model.errors import ModelError


@dataclass(frozen=True, slots=True)
class DeviceFault:
    node: NodeName
    gpu: int
    """Device index on the node."""
    reason: str


@dataclass(frozen=True, slots=True)
class NodeFault:
    node: NodeName
    reason: str


Fault: TypeAlias = DeviceFault | NodeFault


def describe(fault: Fault) -> str:
    if isinstance(fault, DeviceFault):
        return f"GPU {fault.gpu} on node {fault.node} failed: {fault.reason}"
    return f"node {fault.node} failed: {fault.reason}"


def _index(snapshot: ClusterSnapshot, fault: Fault) -> int:
    i = snapshot.cluster.index.get(fault.node)
    if i is None:
        raise ModelError(f"fault on node {fault.node!r}", "no such node in the snapshot")
    if isinstance(fault, DeviceFault) and not 0 <= fault.gpu < int(snapshot.cluster.gpu_count[i]):
        raise ModelError(f"fault on node {fault.node}", f"GPU index {fault.gpu} does not exist "
                                                         f"({int(snapshot.cluster.gpu_count[i])} GPUs)")
    return i


def hit(snapshot: ClusterSnapshot, fault: Fault, p: Placement) -> bool:
    """Whether running placement `p` loses its device or node to `fault` (a GPU, one of its MIG
    slices, or a DRA device its claims hold that is linked to the GPU)."""
    if p.node != fault.node:
        return False
    if isinstance(fault, NodeFault):
        return True
    if fault.gpu in p.gpus:
        return True
    c = snapshot.cluster
    i = c.index[p.node]
    start = int(c.slice_start[i])
    if any(int(c.slice_gpu[start + s]) == fault.gpu for s in p.mig_slices):
        return True
    t = c.devices
    for claim in p.claims:
        for result in claim.devices:
            k = t.index.get(DeviceRef(result.driver, result.pool, result.device))
            if k is not None and int(t.node[k]) == i and int(t.gpu[k]) == fault.gpu:
                return True
    return False


def victims(snapshot: ClusterSnapshot, fault: Fault,
            leaving: frozenset[PodUid] = frozenset()) -> tuple[Eviction, ...]:
    """Pods on the failed capacity, then the other running members of their gangs (sorted by uid).

    Pods in `leaving` (being deleted already) are no victims, and do not make their gang mates
    victims: a pod on a node whose kubelet is gone stays in the API, being deleted, until the
    node comes back or is removed, and the members its job controller starts in its place are
    a new gang, not the one that lost it.
    """
    _index(snapshot, fault)
    placements = snapshot.placements
    direct = sorted(uid for uid, p in placements.items() if uid not in leaving and hit(snapshot, fault, p))
    groups = {placements[uid].pod_group for uid in direct} - {None}
    text = describe(fault)
    out = [Eviction(uid, text) for uid in direct]
    chosen: set[PodUid] = set(direct)
    for uid in sorted(placements):
        p = placements[uid]
        if uid not in chosen and uid not in leaving and p.pod_group in groups:
            out.append(Eviction(uid, f"a member of its pod group {p.pod_group} was lost ({text})"))
    return tuple(out)


def quarantine(snapshot: ClusterSnapshot, fault: Fault, now: float) -> ClusterSnapshot:
    """The snapshot with the failed device (or node) out of service and the node's fault time stamped.

    Pods still placed on the capacity stay in the snapshot: evict them (`victims`) as well."""
    i = _index(snapshot, fault)
    usage = snapshot.usage.copy()
    usage.fault_at[i] = now
    if isinstance(fault, DeviceFault):
        usage.set_health(i, fault.gpu, False)
    else:
        usage.set_ready(i, False)
    return ClusterSnapshot(snapshot.cluster, usage, snapshot.placements, snapshot.pod_groups, snapshot.dra)


def restore(snapshot: ClusterSnapshot, fault: Fault) -> ClusterSnapshot:
    """The snapshot with the device (or node) of `fault` back in service (its fault time is kept)."""
    i = _index(snapshot, fault)
    usage = snapshot.usage.copy()
    if isinstance(fault, DeviceFault):
        usage.set_health(i, fault.gpu, True)
    else:
        usage.set_ready(i, True)
    return ClusterSnapshot(snapshot.cluster, usage, snapshot.placements, snapshot.pod_groups, snapshot.dra)
