"""`FaultFollower`: the live scheduler's reaction to failed GPUs and NotReady nodes.

What the scheduler sees, and from where:

* **A failed device.** The node agent marks the GPU `"healthy": false` in the node's
  `gpufleet.io/gpu-inventory` annotation (and adds the taint
  `unhealthy.gpufleet.io/<uuid>=<fault>`, whose value names the fault). The cache builds the
  node's GPUs from that annotation, so the device is out of every snapshot, and of every
  placement, from the node update on: nothing here is needed for that.
* **A node that is out.** Its `Ready` condition is not `True` (`False` when the kubelet says
  so, `Unknown` when the node controller stopped hearing from it), or the node controller
  tainted it `node.kubernetes.io/not-ready` or `node.kubernetes.io/unreachable`. The follower
  reads the node objects itself (the cache keeps no conditions) and quarantines the node in
  each snapshot (`core.faults.quarantine`): `Usage.node_ready` False, nothing placed on it.

Both are *episodes*: one starts when the follower first sees the device unhealthy or the node
out, and ends when it is healthy or ready again (then placement resumes with the next
snapshot). When an episode has lasted its grace period (`FaultSettings`), the running pods
that lost the device or node, and every other running member of their pod groups
(`core.faults.victims`: a gang whose rank died cannot go on, so it is requeued whole for its
job controller to restart), are evicted through the scheduler's Eviction API path. Each
victim gets one Warning event and the episode one log line, both naming the fault; a victim
still there later (a PodDisruptionBudget said 429) is asked again at most every
`eviction_retry_s`, as preemption victims are. Pods already terminating are not asked again.

Why a grace period: a device's first minute often sorts itself out (the workload crashes and
its controller restarts it elsewhere, or a flapping report clears), and a node NotReady for
a few seconds is usually a kubelet restart or a network blip that costs nothing if left
alone. Evicting a whole gang throws its work away, so the defaults wait: 30 s for a device
(long enough for an annotation flap to clear, short against a job's lifetime) and 300 s for a
node, the `tolerationSeconds` that Kubernetes' DefaultTolerationSeconds admission plugin
gives every pod for the not-ready and unreachable NoExecute taints (so gpufleet evicts the
gang when the node controller evicts the pods on the node).

The follower also stamps `Usage.fault_at` with each node's latest fault (wall time), which the
`RecentFaults` score plugin reads. Episode times are on the monotonic clock; a NotReady
episode starts at the Ready condition's `lastTransitionTime` when it is older than the first
sighting (so a restarted scheduler does not wait another full grace period).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpufleet.core import faults as core_faults
from gpufleet.core.result import Eviction
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.translate import rfc3339_s
from gpufleet.model import ClusterSnapshot, ModelError, NodeName, PodUid
from gpufleet.model import annotations as ann

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
HEALTH_TAINT_PREFIX = "unhealthy.gpufleet.io/"
"""The agent's per-device taint (`agent/report.py`); its value names the fault (`xid-79`)."""
DEVICE, NODE = "device", "node"


@dataclass(frozen=True, slots=True)
class FaultSettings:
    device_grace_s: float = 30.0
    """Seconds a GPU stays unhealthy before the pods on it (and their gangs) are evicted."""
    node_grace_s: float = 300.0
    """Seconds a node stays NotReady before its pods (and their gangs) are evicted; kube's
    default `tolerationSeconds` for the not-ready/unreachable taints."""
    evict: bool = True
    """False: only stop placing on failed capacity, never evict (`--no-fault-eviction`)."""

    def __post_init__(self) -> None:
        for name in ("device_grace_s", "node_grace_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")


@dataclass(slots=True)
class Episode:
    """One failed device (`device` is its UUID) or one node out (`device` None)."""

    node: str
    device: str | None
    reason: str
    since: float
    """Monotonic time the episode started."""
    wall: float
    """The same instant as wall time (for `Usage.fault_at`)."""
    acted: bool = False
    told: set[PodUid] = field(default_factory=set)
    """Victims already given their event in this episode."""

    @property
    def kind(self) -> str:
        return NODE if self.device is None else DEVICE


@dataclass(frozen=True, slots=True)
class Action:
    """What one episode past its grace period asks for in this cycle."""

    episode: Episode
    fault: core_faults.Fault
    evictions: tuple[Eviction, ...]
    """Every victim still running (already-asked ones included: the scheduler rate-limits)."""
    new: tuple[Eviction, ...]
    """Victims named for the first time in this episode: they get an event."""
    first: bool
    """The episode's first action: it is logged."""


class FaultFollower:
    """Tracks fault episodes from node objects (any thread) and acts on snapshots (the cycle thread)."""

    def __init__(self, settings: FaultSettings, events: EventRecorder | None = None, metrics: Metrics | None = None,
                 *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._events, self._metrics = events, metrics
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._episodes: dict[tuple[str, str | None], Episode] = {}
        self._last_fault: dict[str, float] = {}
        """Node -> wall time of its latest fault (ended episodes included), for RecentFaults."""

    # -- node objects (informer threads) -----------------------------------------------------
    def upsert_node(self, obj: Obj) -> bool:
        """Update the episodes from a node object; True when one started or ended."""
        m = obj.get("metadata") or {}
        name = str(m.get("name", ""))
        now, wall = self._clock(), self._wall()
        seen: dict[tuple[str, str | None], tuple[str, float]] = {}
        out = _not_ready(obj)
        if out is not None:
            seen[(name, None)] = (out[0], _since(out[1], now, wall))
        for uuid, reason in _unhealthy(obj).items():
            seen[(name, uuid)] = (reason, now)
        with self._lock:
            changed = self._sync(name, seen, now, wall)
        return changed

    def delete_node(self, obj: Obj) -> bool:
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            self._last_fault.pop(name, None)
            return self._sync(name, {}, self._clock(), self._wall(), gone=True)

    def replace_nodes(self, objs: Iterable[Obj]) -> bool:
        objs = list(objs)
        names = {str((o.get("metadata") or {}).get("name", "")) for o in objs}
        changed = False
        with self._lock:
            stale = {node for node, _ in self._episodes if node not in names}
        for node in stale:
            changed |= self.delete_node({"metadata": {"name": node}})
        for o in objs:
            changed |= self.upsert_node(o)
        return changed

    def _sync(self, node: str, seen: Mapping[tuple[str, str | None], tuple[str, float]], now: float, wall: float,
              gone: bool = False) -> bool:
        changed = False
        for key in [k for k in self._episodes if k[0] == node and k not in seen]:
            ended = self._episodes.pop(key)
            changed = True
            if not gone:
                log.info("%s: back in service after %.0f s; placement resumes", _what(ended), now - ended.since)
        for key, (reason, since) in seen.items():
            known = self._episodes.get(key)
            if known is not None:
                known.reason = reason
                continue
            ep = Episode(node, key[1], reason, since, wall - (now - since))
            self._episodes[key] = ep
            self._last_fault[node] = max(self._last_fault.get(node, ep.wall), ep.wall)
            changed = True
            grace = self._grace(ep)
            log.warning("%s: %s; no new pods go there%s", _what(ep), reason,
                        f"; running pods are evicted after {grace:g} s unless it recovers" if self.settings.evict else "")
            if self._metrics is not None:
                self._metrics.faults.labels(ep.kind).inc()
        if changed and self._metrics is not None:
            for kind in (DEVICE, NODE):
                self._metrics.faults_active.labels(kind).set(sum(1 for e in self._episodes.values() if e.kind == kind))
        return changed

    def _grace(self, ep: Episode) -> float:
        return self.settings.node_grace_s if ep.kind == NODE else self.settings.device_grace_s

    # -- the cycle --------------------------------------------------------------------------
    def active(self) -> bool:
        """Whether any episode is open (a cycle then needs a snapshot even with nothing pending)."""
        with self._lock:
            return bool(self._episodes)

    def episodes(self) -> list[Episode]:
        with self._lock:
            return sorted(self._episodes.values(), key=lambda e: (e.node, e.device or ""))

    def next_deadline(self) -> float | None:
        """Monotonic time at which an episode's grace period ends (None: none waiting)."""
        if not self.settings.evict:
            return None
        with self._lock:
            due = [ep.since + self._grace(ep) for ep in self._episodes.values() if not ep.acted]
        return min(due, default=None)

    def apply(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with nodes that are out quarantined and every node's latest fault time stamped.

        Failed devices are already unhealthy in it (from the inventory annotation); quarantining
        them again only stamps their node's fault time."""
        with self._lock:
            episodes = list(self._episodes.values())
            last = dict(self._last_fault)
        index = snapshot.cluster.index
        for ep in episodes:
            fault = _fault(snapshot, ep)
            if fault is not None:
                snapshot = core_faults.quarantine(snapshot, fault, ep.wall)
        stamps = {index[NodeName(n)]: t for n, t in last.items() if NodeName(n) in index}
        if any(snapshot.usage.fault_at[i] < t for i, t in stamps.items()):
            usage = snapshot.usage.copy()
            for i, t in stamps.items():
                usage.fault_at[i] = max(float(usage.fault_at[i]), t)
            snapshot = ClusterSnapshot(snapshot.cluster, usage, snapshot.placements, snapshot.pod_groups, snapshot.dra)
        return snapshot

    def due(self, snapshot: ClusterSnapshot, terminating: frozenset[PodUid] = frozenset()) -> list[Action]:
        """Episodes past their grace period, with the victims to evict now (pods in
        `terminating` are on their way out and not asked again)."""
        if not self.settings.evict:
            return []
        now = self._clock()
        out: list[Action] = []
        with self._lock:
            episodes = [ep for ep in self._episodes.values() if now >= ep.since + self._grace(ep)]
            for ep in sorted(episodes, key=lambda e: (e.node, e.device or "")):
                fault = _fault(snapshot, ep)
                if fault is None:
                    continue
                victims = core_faults.victims(snapshot, fault, terminating)
                new = tuple(e for e in victims if e.pod not in ep.told)
                first = not ep.acted
                ep.acted = True
                ep.told.update(e.pod for e in new)
                if victims or first:
                    out.append(Action(ep, fault, victims, new, first))
        return out

    def follow(self, snapshot: ClusterSnapshot, objects: Mapping[PodUid, Obj],
               evict: Callable[[tuple[Eviction, ...]], None]) -> list[Action]:
        """Act on what is due: log each episode once, an event per new victim, then `evict`."""
        actions = self.due(snapshot, frozenset(uid for uid, o in objects.items()
                                               if (o.get("metadata") or {}).get("deletionTimestamp")))
        now = self._clock()
        for a in actions:
            ep = a.episode
            if a.first:
                pods = ", ".join(_key(objects.get(e.pod), e.pod) for e in a.evictions) or "none"
                log.warning("%s: %s for %.1f s (grace %g s): evicting %d pod(s), the pods on it and their gang "
                            "mates: %s", _what(ep), ep.reason, now - ep.since, self._grace(ep), len(a.evictions), pods)
            for e in a.new:
                obj = objects.get(e.pod)
                if obj is not None and self._events is not None:
                    self._events.record(obj, reason="GpuFault" if ep.kind == DEVICE else "NodeNotReady",
                                        note=f"evicted: {e.reason}", warning=True, action="Evicting")
                if self._metrics is not None:
                    self._metrics.fault_evictions.labels(ep.kind).inc()
            if a.evictions:
                evict(a.evictions)
        return actions


# -- reading node objects -----------------------------------------------------------------

def _not_ready(node: Obj) -> tuple[str, float] | None:
    """Why the node is out and since when (wall time; 0.0 = unknown), or None when it is fine."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        detail = ready.get("reason") or ready.get("message") or ""
        state = "NotReady" if ready.get("status") == "False" else "Ready Unknown (no word from its kubelet)"
        return f"node {state}" + (f" ({detail})" if detail else ""), rfc3339_s(ready.get("lastTransitionTime"))
    for t in (node.get("spec") or {}).get("taints") or ():
        if t.get("key") in NOT_READY_TAINTS:
            return f"node tainted {t.get('key')}:{t.get('effect', '')}", rfc3339_s(t.get("timeAdded"))
    return None


def _unhealthy(node: Obj) -> dict[str, str]:
    """GPU UUID -> reason, for the GPUs the agent's inventory marks unhealthy."""
    m = node.get("metadata") or {}
    text = (m.get("annotations") or {}).get(ann.INVENTORY_ANNOTATION)
    if not text:
        return {}
    try:
        gpus = ann.decode_inventory(text)
    except ModelError:
        return {}  # the cache logs the bad annotation and ignores the node's GPUs
    why = {str(t.get("key", ""))[len(HEALTH_TAINT_PREFIX):]: str(t.get("value") or "")
           for t in (node.get("spec") or {}).get("taints") or () if str(t.get("key", "")).startswith(HEALTH_TAINT_PREFIX)}
    return {g.uuid: f"unhealthy ({why[g.uuid]})" if why.get(g.uuid) else "reported unhealthy by the node agent"
            for g in gpus if not g.healthy}


def _since(transition_wall: float, now: float, wall: float) -> float:
    """The monotonic time of a wall-clock transition, never later than now."""
    if not transition_wall:
        return now
    return now - max(0.0, wall - transition_wall)


def _fault(snapshot: ClusterSnapshot, ep: Episode) -> core_faults.Fault | None:
    i = snapshot.cluster.index.get(NodeName(ep.node))
    if i is None:
        return None
    if ep.device is None:
        return core_faults.NodeFault(NodeName(ep.node), ep.reason)
    gpus = snapshot.cluster.nodes[i].gpus
    j = next((j for j, g in enumerate(gpus) if g.uuid == ep.device), None)
    return None if j is None else core_faults.DeviceFault(NodeName(ep.node), j, f"{ep.device} {ep.reason}")


def _what(ep: Episode) -> str:
    return f"node {ep.node}" if ep.device is None else f"GPU {ep.device} on node {ep.node}"


def _key(obj: Obj | None, uid: PodUid) -> str:
    if obj is None:
        return str(uid)
    m = obj.get("metadata") or {}
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}"
