"""`collect()`: one consistent-enough read of the cluster into a `snapshot_io.Dump`.

It lists nodes, pods, PodGroups and Queues once each (the CRDs may be absent: a 404 is an
empty list) and runs them through the same `SchedulerCache` the live scheduler uses, so a
dump holds exactly what a cycle would have seen: bound pods with their devices, and the
pending pods of `scheduler_name` (or why their request is invalid).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.errors import KubeError
from gpufleet.kube.retry import Retrier
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.scheduler import PODGROUPS, QUEUES
from gpufleet.kube.snapshot_io import Dump
from gpufleet.model.annotations import SCHEDULER_NAME


def collect(rest: Rest, retrier: Retrier, scheduler_name: str = SCHEDULER_NAME) -> Dump:
    cache = SchedulerCache(scheduler_name)

    def items(url: str, what: str, optional: bool = False) -> list[Mapping[str, Any]]:
        try:
            found: list[Mapping[str, Any]] = retrier.call(f"list {what}", lambda: rest.list(url)).get("items") or []
            return found
        except KubeError as exc:
            if optional and exc.kind == "HTTP 404":
                return []
            raise

    steps: list[tuple[Callable[[Iterable[Mapping[str, Any]]], None], list[Mapping[str, Any]]]] = [
        (cache.replace_nodes, items(path("v1", "nodes"), "nodes")),
        (cache.replace_pods, items(path("v1", "pods"), "pods")),
        (cache.replace_groups, items(path(PODGROUPS, "podgroups"), "podgroups", optional=True)),
        (cache.replace_queues, items(path(QUEUES, "queues"), "queues", optional=True)),
    ]
    for replace, objs in steps:
        replace(objs)
    snap = cache.snapshot()
    pending = cache.pending()
    return Dump(snap.cluster.nodes, tuple(snap.placements.values()), tuple(snap.pod_groups.values()),
                cache.queues(), tuple(p.spec for p in pending if p.spec is not None),
                {p.key: p.error for p in pending if p.spec is None and not p.gated})
