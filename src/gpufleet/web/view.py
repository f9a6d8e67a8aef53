"""`document(fleet)`: the JSON the dashboard page draws, compact enough for 5,000 nodes.

Names repeated across thousands of rows (pools, models, namespaces, queues, pending reasons)
are sent once in tables and referred to by index. The shape (`web/static/app.js` reads it):

    {"source", "time", "simulated",
     "summary": {"nodes", "readyNodes", "gpus", "gpusAllocated", "gpusFree", "gpusFull",
                 "gpusUnhealthy", "migSlices", "migSlicesUsed", "running", "pending"},
     "pools": [..], "models": [..], "namespaces": [..], "queueNames": [..], "reasons": [[text, example]],
     "nodes": [[name, pool, model, ready, [[usedMilli, healthy, [pod..], [[profile, pod|-1]..]]..]]..],
     "pods": [[name, namespace, queue]..],
     "pending": [[pod, namespace, queue, request, reason, reasonText|-1]..],
     "queues": [{"name", "parent", "weight", "allocated", "fairShare", "guaranteed", "limit", "pending"}..],
     "events": [[time, reason, subject, message]..]}

Pure: `summary` is computed here, from the same rows the page shows, so a test can hold the
page's numbers against the API's.
"""

from __future__ import annotations

from typing import Any

from gpufleet.model import PodUid
from gpufleet.web.fleet import Fleet, model_of, pool_of, reason_group

MAX_EVENTS = 100


class _Table:
    """Strings numbered in first-seen order."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))

    def values(self) -> list[str]:
        return list(self.index)


def document(fleet: Fleet) -> dict[str, Any]:
    pools, models, namespaces, queue_names = _Table(), _Table(), _Table(), _Table()
    pod_index: dict[PodUid, int] = {}
    pods: list[list[Any]] = []

    def pod(uid: PodUid) -> int:
        i = pod_index.get(uid)
        if i is None:
            ref = fleet.pods.get(uid)
            name, ns, queue = (ref.name, ref.namespace, ref.queue) if ref else (str(uid), "", "default")
            i = pod_index[uid] = len(pods)
            pods.append([name, namespaces(ns), queue_names(queue)])
        return i

    by_node: dict[str, list[Any]] = {}
    for p in fleet.placements:
        by_node.setdefault(p.node, []).append(p)
    nodes: list[list[Any]] = []
    s: dict[str, float] = {"nodes": len(fleet.nodes), "readyNodes": 0, "gpus": 0, "gpusAllocated": 0.0, "gpusFree": 0, "gpusFull": 0,
         "gpusUnhealthy": 0, "migSlices": 0, "migSlicesUsed": 0, "running": len(fleet.placements),
         "pending": len(fleet.waiting)}
    for node in fleet.nodes:
        used = [0] * len(node.gpus)
        holders: list[list[int]] = [[] for _ in node.gpus]
        slice_at = [(j, k) for j, g in enumerate(node.gpus) for k in range(len(g.mig_slices))]
        slice_holder: dict[tuple[int, int], int] = {}
        for p in by_node.get(node.name, ()):
            for j in p.gpus:
                if 0 <= j < len(node.gpus):
                    used[j] += p.milli
                    holders[j].append(pod(p.pod))
            for s_ in p.mig_slices:
                if 0 <= s_ < len(slice_at):
                    slice_holder[slice_at[s_]] = pod(p.pod)
        ready = node.name not in fleet.not_ready
        s["readyNodes"] += ready
        gpus = []
        for j, g in enumerate(node.gpus):
            healthy = g.healthy and (node.name, j) not in fleet.unhealthy
            mig: list[tuple[str, int]] = [(profile, slice_holder.get((j, k), -1)) for k, profile in enumerate(g.mig_slices)]
            gpus.append([min(used[j], 1000), int(healthy), holders[j], [list(m) for m in mig]])
            s["gpus"] += 1
            s["gpusUnhealthy"] += not healthy
            if mig:
                s["migSlices"] += len(mig)
                s["migSlicesUsed"] += sum(1 for _, h in mig if h >= 0)
            else:
                s["gpusAllocated"] += min(used[j], 1000) / 1000
                s["gpusFull"] += used[j] >= 1000
                s["gpusFree"] += used[j] == 0 and healthy and ready
        nodes.append([node.name, pools(pool_of(node)), models(model_of(node)), int(ready), gpus])
    s["gpusAllocated"] = round(s["gpusAllocated"], 3)

    reasons = _Table()
    examples: dict[int, str] = {}
    pending = []
    for w in fleet.waiting:
        text = -1
        if w.message:
            text = reasons(reason_group(w.message))
            examples.setdefault(text, w.message)
        pending.append([w.pod, namespaces(w.namespace), queue_names(w.queue), w.request, w.reason, text])
    for q in fleet.queues:
        queue_names(q.name)
    return {
        "source": fleet.source, "time": fleet.time, "simulated": fleet.simulated, "summary": s,
        "pools": pools.values(), "models": models.values(), "namespaces": namespaces.values(),
        "queueNames": queue_names.values(),
        "reasons": [[text, examples[i]] for i, text in enumerate(reasons.values())],
        "nodes": nodes, "pods": pods, "pending": pending,
        "queues": [{"name": q.name, "parent": q.parent, "weight": q.weight, "allocated": q.allocated,
                    "fairShare": q.fair_share, "guaranteed": q.guaranteed, "limit": q.limit, "pending": q.pending}
                   for q in fleet.queues],
        "events": [[e.time, e.reason, e.subject, e.message] for e in fleet.events[-MAX_EVENTS:]],
    }
