"""Demand-driven MIG on a live cluster: the scheduler's half (the agent's is `agent/mig_layout.py`).

With `--mig-repartition`, a scheduling cycle that leaves pods asking for MIG profiles
unschedulable calls `Repartitioner.update` with their requests, each naming the GPUs the pod
could use (`core/mig_demand.py`: a pod held back by its node selector, taints or CPU changes no
GPU it cannot use). That plans (`core/mig_planner.plan`, the same
planner the simulator replays) over the MIG GPUs of the nodes. Each GPU comes in with:

* its real layout: profiles and first memory slices, as the agent's inventory annotation
  reports them (`mig`, `migStarts`; `Gpu.mig_starts` in the snapshot);
* the instances bound pods hold, from the snapshot.

For each node the plan changes, it writes the new layout of the changed GPUs to the node's
`gpufleet.io/mig-layout` annotation, with a generation one above any the node has seen. The
agent destroys and creates the idle instances and reports success or failure in
`gpufleet.io/mig-layout-state`. Its new inventory then shows the instances, and the waiting
pods bind to them in a later cycle.

A node is left out of the planning in these cases:

* its layout is written and the agent has not answered that generation yet, for up to
  `timeout_s` (an agent that is down must not freeze a node for ever);
* its agent publishes no `migStarts` (an older agent: its placements are unknown);
* the node is not ready, or the GPU is unhealthy.

Nodes with a layout pending count as supply: their waiting demand is not planned twice. The
instances a pending layout destroys are marked taken in each cycle's snapshot (`reserve`), so no
pod is bound to one between the plan and the agent's change.
Plans run at most every `interval_s`, and the writes go through one background thread, as the
consolidation guard's do, so a slow API server never holds up a cycle.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from gpufleet.core import mig_planner
from gpufleet.core.mig_planner import MigGpu
from gpufleet.kube import translate
from gpufleet.kube.errors import KubeError
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier
from gpufleet.model import ClusterSnapshot, GpuUuid, NodeName, mig
from gpufleet.model import annotations as ann
from gpufleet.model.mig_placement import MigInstance

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]

LAYOUT_ANNOTATION, STATE_ANNOTATION = ann.MIG_LAYOUT_ANNOTATION, ann.MIG_LAYOUT_STATE_ANNOTATION


@dataclass(frozen=True, slots=True)
class _Seen:
    """The generations the node informer last showed on a node (0: none, or unreadable)."""

    written: int
    """Of the node's layout annotation."""
    answered: int
    """Of the agent's state annotation."""


class Repartitioner:
    def __init__(self, rest: Rest, retrier: Retrier, *, interval_s: float = 5.0, timeout_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rest, self._retrier, self._clock = rest, retrier, clock
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._sent: dict[str, tuple[int, float]] = {}
        """Node -> (generation written by us, when): frozen until answered or timed out."""
        self._destroying: dict[str, tuple[tuple[GpuUuid, MigInstance], ...]] = {}
        """Node -> the instances its pending layout destroys: kept from new pods meanwhile (`reserve`)."""
        self._last = -float("inf")
        self._futures: list[Future[None]] = []
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mig-layout")
        self.writes = 0
        """Layouts written (one per node per plan)."""
        self.last_plan: mig_planner.MigPlan | None = None

    # -- the node informer ------------------------------------------------------------------
    def upsert_node(self, obj: Obj) -> None:
        m = translate.meta(obj)
        a = m.get("annotations") or {}
        with self._lock:
            self._seen[str(m.get("name", ""))] = _Seen(_generation(a.get(LAYOUT_ANNOTATION)),
                                                       _generation(a.get(STATE_ANNOTATION)))

    def delete_node(self, obj: Obj) -> None:
        with self._lock:
            self._seen.pop(str(translate.meta(obj).get("name", "")), None)

    def replace_nodes(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._seen.clear()
        for o in objs:
            self.upsert_node(o)

    # -- planning ---------------------------------------------------------------------------
    def due(self) -> bool:
        """Whether `interval_s` has passed since the last plan (so a cycle need not take a snapshot)."""
        return self._clock() - self._last >= self.interval_s

    def update(self, snapshot: ClusterSnapshot, wanted: mig_planner.Demand) -> mig_planner.MigPlan | None:
        """Plan for `wanted` (requests in queue order, `core.mig_demand`) and write the layouts; None
        when not due."""
        if not wanted or not self.due():
            return None
        for node, text in self.layouts(snapshot, wanted).items():
            self._futures.append(self._pool.submit(self._write, node, text))
        return self.last_plan

    def layouts(self, snapshot: ClusterSnapshot, wanted: mig_planner.Demand) -> dict[str, str]:
        """The plan for `wanted` as the `gpufleet.io/mig-layout` value of each node it changes; the nodes
        are then frozen until their agents answer. No I/O: `update` writes what this returns."""
        now = self._clock()
        self._last = now
        self._futures = [f for f in self._futures if not f.done()]
        gpus, node_of, layouts = self._gpus(snapshot, now)
        result = self.last_plan = mig_planner.plan(gpus, wanted)
        by_node: dict[str, dict[str, list[str]]] = {}
        destroying: dict[str, list[tuple[GpuUuid, MigInstance]]] = {}
        for change in result.changes:
            node = node_of[change.uuid]
            after = change.apply(layouts[change.uuid])
            by_node.setdefault(node, {})[str(change.uuid)] = [f"{i.profile}@{i.start}" for i in after]
            destroying.setdefault(node, []).extend((change.uuid, i) for i in change.destroy)
        out: dict[str, str] = {}
        for node, per_gpu in sorted(by_node.items()):
            with self._lock:
                seen = self._seen.get(node)
                generation = max(seen.written if seen else 0, seen.answered if seen else 0,
                                 self._sent.get(node, (0, 0.0))[0]) + 1
                self._sent[node] = (generation, now)
                self._destroying[node] = tuple(destroying.get(node, ()))
            out[node] = json.dumps({"generation": generation, "gpus": per_gpu}, separators=(",", ":"), sort_keys=True)
            self.writes += 1
        return out

    def reserve(self, snapshot: ClusterSnapshot) -> int:
        """Mark the instances that pending layouts destroy as taken in `snapshot`, so that no pod is
        bound to one between the plan and the agent's change; how many were marked."""
        now = self._clock()
        c, u = snapshot.cluster, snapshot.usage
        with self._lock:
            seen, sent_at, destroying = dict(self._seen), dict(self._sent), dict(self._destroying)
        marked = 0
        for node, items in destroying.items():
            s, sent, i = seen.get(node), sent_at.get(node), c.index.get(NodeName(node))
            if s is None or sent is None or s.answered >= sent[0] or now - sent[1] >= self.timeout_s or i is None:
                continue  # answered, given up on, or gone: the node's inventory is the truth again
            doomed = set(items)
            first = int(c.slice_start[i])
            for gpu in c.nodes[i].gpus:
                for k, (p, start) in enumerate(zip(gpu.mig_slices, gpu.mig_starts)):
                    taken = start is None or (gpu.uuid, MigInstance(start, p)) not in doomed or u.slice_used[first + k]
                    if not taken:
                        u.slice_used[first + k] = True
                        marked += 1
                first += len(gpu.mig_slices)
            u.refresh_row(i)
        return marked

    def _gpus(self, snapshot: ClusterSnapshot, now: float
              ) -> tuple[list[MigGpu], dict[GpuUuid, str], dict[GpuUuid, tuple[MigInstance, ...]]]:
        c, u = snapshot.cluster, snapshot.usage
        with self._lock:
            seen, sent_at = dict(self._seen), dict(self._sent)
        gpus: list[MigGpu] = []
        node_of: dict[GpuUuid, str] = {}
        layouts: dict[GpuUuid, tuple[MigInstance, ...]] = {}
        for i, node in enumerate(c.nodes):
            s = seen.get(node.name)
            if s is None:
                continue
            sent = sent_at.get(node.name)
            pending = sent is not None and s.answered < sent[0] and now - sent[1] < self.timeout_s
            first = int(c.slice_start[i])
            for j, gpu in enumerate(node.gpus):
                family = mig.mig_family(gpu.model)
                if family is None or not gpu.mig_enabled:
                    first += len(gpu.mig_slices)
                    continue
                known = bool(gpu.mig_slices) == bool(gpu.mig_starts) and None not in gpu.mig_starts
                instances = tuple(MigInstance(start, p) for p, start in zip(gpu.mig_slices, gpu.mig_starts)
                                  if start is not None)
                used = frozenset(instances[k] for k in range(len(instances)) if u.slice_used[first + k])
                first += len(gpu.mig_slices)
                frozen = bool(pending or not known or not u.node_ready[i] or not u.gpu_healthy[i, j])
                gpus.append(MigGpu(gpu.uuid, family, instances, used, frozen))
                node_of[gpu.uuid] = node.name
                layouts[gpu.uuid] = instances
        return gpus, node_of, layouts

    def _write(self, node: str, text: str) -> None:
        try:
            self._retrier.call(f"annotate node {node} with a MIG layout",
                               lambda: self._rest.patch(path("v1", "nodes", node),
                                                        {"metadata": {"annotations": {LAYOUT_ANNOTATION: text}}}),
                               cooldown=True)
            log.info("node %s: MIG layout %s", node, text)
        except KubeError:
            with self._lock:
                self._sent.pop(node, None)  # the Retrier logged it; plan this node again

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for the writes under way (tests)."""
        futures, self._futures = self._futures, []
        wait(futures, timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _generation(text: str | None) -> int:
    """The generation in a layout or state annotation; 0 when absent or unreadable."""
    if text is None:
        return 0
    try:
        value = json.loads(text).get("generation", 0)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
