"""The scheduler's device choices, read from pods bound to this node, and which are still open.

The kubelet's device-plugin calls carry no pod identity, so the agent matches them to pods
the way Aliyun's gpushare plugin does: among the pods bound to this node that are still
Pending and carry a trusted assignment, the oldest one whose request has the asked size.
The kubelet admits pods in creation order, so oldest-first follows it; when two pending
pods ask for the same size on different devices and are admitted out of order, they swap
devices, which leaves every device's load unchanged because their requests are equal.

An assignment is trusted only on a pod with `spec.schedulerName: gpufleet` bound to this
node, and only if the annotation names this node: a user who pre-sets the annotation on a
pod for another scheduler gets nothing from it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from gpufleet.agent.inventory import NodeGpuInventory
from gpufleet.agent.kube import NodeApi, PodView
from gpufleet.model import ModelError
from gpufleet.model import annotations as ann

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: PodView
    assignment: ann.GpuAssignment

    @property
    def key(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}"


def trusted_assignment(pod: PodView, node: str) -> ann.GpuAssignment | None:
    """The pod's assignment if the agent may act on it, else None."""
    text = pod.annotations.get(ann.ASSIGNMENT_ANNOTATION)
    if text is None or pod.scheduler_name != ann.SCHEDULER_NAME or pod.node_name != node:
        return None
    try:
        assignment = ann.decode_assignment(text)
    except ModelError as exc:
        log.warning("pod %s/%s: ignoring its assignment: %s", pod.namespace, pod.name, exc)
        return None
    return assignment if assignment.node == node else None


def assigned_devices(a: ann.GpuAssignment, inv: NodeGpuInventory) -> frozenset[str] | None:
    """GPU UUIDs of a whole-GPU assignment, or MIG UUIDs of a MIG one; None if it does not fit this node."""
    if a.mig:
        uuids = set()
        for ref in a.mig:
            gpu = inv.gpu(ref.gpu)
            if gpu is None or ref.slice >= len(gpu.mig_slices):
                return None
            uuids.add(gpu.mig_slices[ref.slice].uuid)
        return frozenset(uuids)
    if any(inv.gpu(u) is None for u in a.gpus):
        return None
    return frozenset(a.gpus)


class AssignmentBook:
    """Open assignments of pending pods on this node; an Allocate that uses one consumes it."""

    def __init__(self, api: NodeApi, node: str) -> None:
        self._api = api
        self._node = node
        self._consumed: set[str] = set()
        self._lock = threading.Lock()

    def candidates(self) -> list[Candidate]:
        """Trusted, unconsumed assignments of Pending pods, oldest pod first. Raises KubeAccessError."""
        pods = self._api.pods_on_node()
        with self._lock:
            self._consumed &= {p.uid for p in pods}  # forget pods that are gone
            found = [Candidate(p, a) for p in pods
                     if p.phase == "Pending" and p.uid not in self._consumed
                     and (a := trusted_assignment(p, self._node)) is not None]
        return sorted(found, key=lambda c: (c.pod.created, c.key))

    def consume(self, candidate: Candidate) -> None:
        with self._lock:
            self._consumed.add(candidate.pod.uid)
