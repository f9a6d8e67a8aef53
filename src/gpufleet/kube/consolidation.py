"""Karpenter consolidation guard: `karpenter.sh/do-not-disrupt` on GPU nodes whose GPUs are busy.

**Consolidation guard** (`Guard`): Karpenter consolidates by what pods request, so a GPU node
running one long training job on few CPUs looks underutilized. gpufleet annotates each GPU
node of a NodePool whose GPUs are in use (from the snapshot: GPU-milli, MIG slices) or that
pending pods are waiting for with `karpenter.sh/do-not-disrupt: "true"` (which blocks
consolidation and drift of a Node), marked `gpufleet.io/do-not-disrupt: gpus-busy`, and
removes both when its GPUs are idle, so Karpenter may consolidate it. An annotation someone
else set (without the marker) is never touched.

The `Provisioner` (`kube/karpenter.py`) owns one `Guard`; the scheduler feeds it the node
informer's objects and calls `update` each cycle with the nodes pending pods wait for.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Collection, Iterable, Mapping

from gpufleet.autoscale.removal import gpu_use
from gpufleet.kube import translate
from gpufleet.kube.errors import KubeError
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.nodepools import NODEPOOL_LABEL
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.retry import Retrier
from gpufleet.model import ClusterSnapshot

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
GUARD_ANNOTATION = "gpufleet.io/do-not-disrupt"
"""On nodes: marks a `karpenter.sh/do-not-disrupt` that gpufleet set (and may remove)."""


class Guard:
    """Keeps `karpenter.sh/do-not-disrupt` on Karpenter GPU nodes whose GPUs are busy."""

    def __init__(self, rest: Rest, retrier: Retrier, metrics: Metrics, *, release_after_s: float = 30.0,
                 clock: Any = time.monotonic) -> None:
        self._rest, self._retrier, self._metrics = rest, retrier, metrics
        self.release_after_s, self._clock = release_after_s, clock
        self._idle_since: dict[str, float] = {}
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[str | None, str | None]] = {}
        """Node -> (do-not-disrupt value, gpufleet marker) as the node informer last showed."""
        self._writing: dict[str, bool] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="do-not-disrupt")

    def upsert_node(self, obj: Obj) -> None:
        m = translate.meta(obj)
        a = m.get("annotations") or {}
        with self._lock:
            self._seen[str(m.get("name", ""))] = (a.get(DO_NOT_DISRUPT), a.get(GUARD_ANNOTATION))

    def delete_node(self, obj: Obj) -> None:
        with self._lock:
            self._seen.pop(str(translate.meta(obj).get("name", "")), None)

    def replace_nodes(self, objs: Iterable[Obj]) -> None:
        with self._lock:
            self._seen.clear()
        for o in objs:
            self.upsert_node(o)

    def desired(self, snapshot: ClusterSnapshot, waiting: Collection[str] = ()) -> dict[str, bool]:
        """Karpenter GPU nodes -> whether gpufleet wants them kept (GPUs in use, or pods waiting for them)."""
        c = snapshot.cluster
        return {n.name: n.name in waiting or gpu_use(snapshot, i) > 0
                for i, n in enumerate(c.nodes) if n.gpus and NODEPOOL_LABEL in n.labels}

    def update(self, snapshot: ClusterSnapshot, waiting: Collection[str] = ()) -> None:
        want = self.desired(snapshot, waiting)
        now = self._clock()
        self._futures = [f for f in self._futures if not f.done()]
        for node in [n for n in self._idle_since if want.get(n, True)]:
            del self._idle_since[node]
        with self._lock:
            seen = dict(self._seen)
            writing = dict(self._writing)
        kept = 0
        for node, busy in want.items():
            value, ours = seen.get(node, (None, None))
            if not busy and ours and now - self._idle_since.setdefault(node, now) < self.release_after_s:
                busy = True  # idle only briefly: keep it a while longer
            kept += busy
            if busy and value != "true":
                patch: dict[str, str | None] = {DO_NOT_DISRUPT: "true", GUARD_ANNOTATION: "gpus-busy"}
            elif not busy and ours:
                patch = {DO_NOT_DISRUPT: None, GUARD_ANNOTATION: None} if value == "true" else {GUARD_ANNOTATION: None}
            else:
                continue
            if writing.get(node) == busy:
                continue
            with self._lock:
                self._writing[node] = busy
            self._futures.append(self._pool.submit(self._patch, node, busy, patch))
        self._metrics.do_not_disrupt.set(kept)

    def _patch(self, node: str, busy: bool, annotations: dict[str, str | None]) -> None:
        try:
            self._retrier.call(f"annotate node {node}",
                               lambda: self._rest.patch(path("v1", "nodes", node),
                                                        {"metadata": {"annotations": annotations}}),
                               cooldown=True)
            log.info("node %s: %s", node, "GPUs busy: karpenter.sh/do-not-disrupt set" if busy else
                     "GPUs idle: karpenter.sh/do-not-disrupt removed, Karpenter may consolidate it")
        except KubeError:
            pass  # the Retrier logged it; the next update tries again after its cool-down
        finally:
            with self._lock:
                self._writing.pop(node, None)

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for the annotation writes under way (tests)."""
        futures, self._futures = self._futures, []
        wait(futures, timeout_s)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
