"""The scheduler's device choices, read from pods bound to this node, and which are still open.

The kubelet's device-plugin calls carry no pod identity, so the agent matches them to pods
the way Aliyun's gpushare plugin does: among the pods bound to this node that are still
Pending and carry a trusted assignment, the oldest one whose request has the asked size.
The kubelet admits pods in creation order, so oldest-first follows it; when two pending
pods ask for the same size on different devices and are admitted out of order, they swap
devices, which leaves every device's load unchanged because their requests are equal.

An assignment is trusted only on a pod with `spec.schedulerName: gpufleet` bound to this
node, and only if the annotation names this node: a user who pre-sets the annotation on a
pod for another scheduler gets nothing from it. With a key ring (`--assignment-keys`, see
`model.assignment_auth`) it must also carry the scheduler's signature for this pod's UID, this
node and exactly these devices: a pod author can set `spec.nodeName` and write an annotation,
but cannot sign one, and a signature copied from another pod names that pod's UID. A pod
whose assignment fails the check is reported once (`on_reject`: an event on the pod and a
metric) and never served.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from gpufleet.agent.inventory import NodeGpuInventory
from gpufleet.agent.kube import NodeApi, PodView
from gpufleet.model import ModelError
from gpufleet.model import annotations as ann
from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION, KeyDir, verify

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: PodView
    assignment: ann.GpuAssignment

    @property
    def key(self) -> str:
        return f"{self.pod.namespace}/{self.pod.name}"


def trusted_assignment(pod: PodView, node: str, keys: KeyDir | None = None) -> ann.GpuAssignment | None:
    """The pod's assignment if the agent may act on it, else None."""
    return checked_assignment(pod, node, keys)[0]


def checked_assignment(pod: PodView, node: str, keys: KeyDir | None = None
                       ) -> tuple[ann.GpuAssignment | None, str | None]:
    """(the assignment if the agent may act on it, why a gpufleet pod's assignment is refused).

    The second is set only for a pod that claims the scheduler placed it here (schedulerName
    gpufleet, bound to this node, an assignment naming this node) and cannot prove it: its
    signature is missing, malformed, made with an unknown key, or does not match."""
    text = pod.annotations.get(ann.ASSIGNMENT_ANNOTATION)
    if text is None or pod.scheduler_name != ann.SCHEDULER_NAME or pod.node_name != node:
        return None, None
    try:
        assignment = ann.decode_assignment(text)
    except ModelError as exc:
        log.warning("pod %s/%s: ignoring its assignment: %s", pod.namespace, pod.name, exc)
        return None, None
    if assignment.node != node:
        return None, None
    if keys is not None:
        why = verify(keys.ring(), pod.annotations.get(SIGNATURE_ANNOTATION), pod.uid,
                     f"{pod.namespace}/{pod.name}", node, text)
        if why is not None:
            return None, why
    return assignment, None


def assigned_devices(a: ann.GpuAssignment, inv: NodeGpuInventory) -> frozenset[str] | None:
    """GPU UUIDs of a whole-GPU assignment, or MIG UUIDs of a MIG one; None if it does not fit this node."""
    if a.mig:
        uuids = set()
        for ref in a.mig:
            gpu = inv.gpu(ref.gpu)
            if gpu is None:
                return None
            if ref.uuid is not None:  # by UUID: a MIG layout change may have moved the index
                if all(m.uuid != ref.uuid for m in gpu.mig_slices):
                    return None
                uuids.add(ref.uuid)
            elif ref.slice >= len(gpu.mig_slices):
                return None
            else:
                uuids.add(gpu.mig_slices[ref.slice].uuid)
        return frozenset(uuids)
    if any(inv.gpu(u) is None for u in a.gpus):
        return None
    return frozenset(a.gpus)


Rejected = Callable[[PodView, str], None]


class AssignmentBook:
    """Open assignments of pending pods on this node; an Allocate that uses one consumes it."""

    def __init__(self, api: NodeApi, node: str, keys: KeyDir | None = None,
                 on_reject: Rejected | None = None) -> None:
        self._api = api
        self._node = node
        self._keys = keys
        self._on_reject = on_reject
        self._consumed: set[str] = set()
        self._rejected: set[str] = set()
        self._lock = threading.Lock()

    def candidates(self) -> list[Candidate]:
        """Trusted, unconsumed assignments of Pending pods, oldest pod first. Raises KubeAccessError."""
        pods = self._api.pods_on_node()
        found, refused = [], []
        with self._lock:
            uids = {p.uid for p in pods}
            self._consumed &= uids  # forget pods that are gone
            self._rejected &= uids
            for p in pods:
                if p.phase != "Pending" or p.uid in self._consumed:
                    continue
                a, why = checked_assignment(p, self._node, self._keys)
                if a is not None:
                    found.append(Candidate(p, a))
                elif why is not None and p.uid not in self._rejected:
                    self._rejected.add(p.uid)
                    refused.append((p, why))
        for p, why in refused:  # outside the lock: reporting calls the API server
            log.warning("pod %s/%s: refusing its GPU assignment: signature %s", p.namespace, p.name, why)
            if self._on_reject is not None:
                self._on_reject(p, why)
        return sorted(found, key=lambda c: (c.pod.created, c.key))

    def consume(self, candidate: Candidate) -> None:
        with self._lock:
            self._consumed.add(candidate.pod.uid)
