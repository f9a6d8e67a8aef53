"""Pure: what to create, replace and delete so that a driver's pool holds the slices wanted.

A pool's consumers count only its newest generation, and only once they have seen all
`resourceSliceCount` slices of it (resource.k8s.io/v1). So any change goes out as a new
generation on every slice; nothing changes, nothing is written. Deletes come last: until then
the old generation's slices are stale but harmless.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SlicePlan:
    generation: int
    create: tuple[Obj, ...] = ()
    replace: tuple[Obj, ...] = ()
    """Desired slices with the stored `metadata.resourceVersion`, for a PUT."""
    delete: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.replace or self.delete)


def plan(existing: Sequence[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]]) -> SlicePlan:
    """`existing`: the pool's slices as stored; `desired`: the slices wanted, any generation.

    An empty `desired` deletes the pool.
    """
    stored = {o["metadata"]["name"]: o for o in existing}
    current = max((int(o["spec"]["pool"]["generation"]) for o in existing), default=0)
    if desired and stored.keys() == {o["metadata"]["name"] for o in desired} and \
            all(_same(stored[o["metadata"]["name"]], o, current) for o in desired):
        return SlicePlan(current)
    generation = current + 1
    create: list[Obj] = []
    replace: list[Obj] = []
    for o in desired:
        body = copy.deepcopy(dict(o))
        body["spec"]["pool"]["generation"] = generation
        old = stored.get(body["metadata"]["name"])
        if old is None:
            create.append(body)
        else:
            body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            replace.append(body)
    wanted = {o["metadata"]["name"] for o in desired}
    return SlicePlan(generation, tuple(create), tuple(replace), tuple(sorted(stored.keys() - wanted)))


def _same(stored: Mapping[str, Any], wanted: Mapping[str, Any], generation: int) -> bool:
    spec = copy.deepcopy(dict(wanted["spec"]))
    spec["pool"]["generation"] = generation
    return _without_taint_times(stored["spec"]) == spec and \
        stored["metadata"].get("ownerReferences") == wanted["metadata"].get("ownerReferences")


def _without_taint_times(spec: Mapping[str, Any]) -> Obj:
    """The stored spec less what kube-apiserver adds: each device taint's `timeAdded`."""
    copied: Obj = copy.deepcopy(dict(spec))
    for device in copied.get("devices", []):
        for taint in device.get("taints", []):
            taint.pop("timeAdded", None)
    return copied
