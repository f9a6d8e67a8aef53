"""`DraCache`: DeviceClasses, ResourceSlices and ResourceClaims as the informers last saw them.

Plain state, no lock of its own: `SchedulerCache` owns one and calls these methods under it.

**Pools gpufleet owns.** Two allocators handing out devices of one pool can give one device to
two claims: the API server does not stop it (kubernetes/kubernetes#128980). So gpufleet
allocates only from the pools of the drivers it is told are its own (`drivers`; `*` for all):
slices of any other driver are left out of its snapshots entirely (logged once per driver), and
so are the results of claims allocated on them. The operator's side of the bargain is that no
other scheduler allocates claims against those drivers' DeviceClasses (docs/dra.md).

**Bad objects** never reach the core: a slice, class or claim that `model.dra` cannot read is
logged once with the object and field and left out. A claim left out so still holds the
devices its `status.allocation` names (read without its spec), and a pod that uses it is told
why it waits.

**Read your writes.** The claim writer (`kube.claims`) feeds the objects the API server
returned for its writes back in (`upsert_claim`), and an informer event older than what is
held (by resourceVersion) is ignored, so a snapshot never shows a claim as it was before a
write of ours; kube-scheduler's assume cache does the same. A deleted claim leaves a
tombstone, so a write's reply handled after the deletion's watch event does not bring it back.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping, Sequence

from gpufleet.kube import translate
from gpufleet.model import ModelError
from gpufleet.model.dra import (ClaimAllocation, DeviceClass, Pool, ResourceClaim, ResourceSlice, parse_claim,
                                parse_device_class, parse_slice, pools)

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]
ALL_DRIVERS = "*"
TOMBSTONES = 10_000
"""Deleted claims remembered (with their last version), the oldest forgotten first."""
_PLACEHOLDER_SPEC = {"devices": {"requests": [{"name": "unread", "exactly": {"deviceClassName": "unread"}}]}}
"""Stands in for a claim's spec that cannot be read, so that its allocation still counts."""


class DraCache:
    def __init__(self, drivers: Iterable[str], once: Callable[[str, str], None]) -> None:
        self.drivers = frozenset(drivers)
        """Drivers whose pools gpufleet allocates from (`*`: every driver)."""
        self._once = once
        self._slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._claims: dict[str, ResourceClaim] = {}
        self._objects: dict[str, Obj] = {}
        """Claims as the API server last returned them (the writer updates from these)."""
        self._errors: dict[str, str] = {}
        self._deleted: OrderedDict[str, Obj] = OrderedDict()
        """Deleted claims: key -> the object the deletion carried."""
        """Claims whose spec cannot be read: key -> the problem."""
        self.foreign: set[str] = set()
        """Drivers with slices that are not gpufleet's."""
        self._pools: tuple[list[Pool], list[str]] | None = None

    def owns(self, driver: str) -> bool:
        return ALL_DRIVERS in self.drivers or driver in self.drivers

    # -- slices: any change rebuilds the Cluster ---------------------------------------------
    def upsert_slice(self, obj: Obj) -> bool:
        """Whether the pools may have changed."""
        name = str(translate.meta(obj).get("name", ""))
        try:
            parsed: ResourceSlice | None = parse_slice(obj)
        except ModelError as exc:
            self._once(f"slice/{name}", f"ignoring {exc}")
            parsed = None
        if parsed is not None and not self.owns(parsed.driver):
            if parsed.driver not in self.foreign:
                self.foreign.add(parsed.driver)
                log.info("ResourceSlices of driver %s (slice %s) are not gpufleet's (not among its DRA drivers %s): "
                         "left to other allocators", parsed.driver, name, sorted(self.drivers) or "[]")
            parsed = None
        if parsed is None:
            return self.delete_slice(obj)
        if self._slices.get(name) == parsed:
            return False
        self._slices[name] = parsed
        self._pools = None
        return True

    def delete_slice(self, obj: Obj) -> bool:
        if self._slices.pop(str(translate.meta(obj).get("name", "")), None) is None:
            return False
        self._pools = None
        return True

    def replace_slices(self, objs: Iterable[Obj]) -> bool:
        objs = list(objs)
        names = {str(translate.meta(o).get("name", "")) for o in objs}
        changed = False
        for gone in [n for n in self._slices if n not in names]:
            changed = self.delete_slice({"metadata": {"name": gone}}) or changed
        for o in objs:
            changed = self.upsert_slice(o) or changed
        return changed

    def pools(self) -> tuple[list[Pool], list[str]]:
        """The complete pools of gpufleet's drivers, and a line for each pool left out."""
        if self._pools is None:
            self._pools = pools(sorted(self._slices.values(), key=lambda s: s.name))
        return self._pools

    # -- classes -------------------------------------------------------------------------------
    def upsert_class(self, obj: Obj) -> bool:
        name = str(translate.meta(obj).get("name", ""))
        try:
            parsed = parse_device_class(obj)
        except ModelError as exc:
            self._once(f"deviceclass/{name}", f"ignoring {exc}")
            return self._classes.pop(name, None) is not None
        if self._classes.get(name) == parsed:
            return False
        self._classes[name] = parsed
        return True

    def delete_class(self, obj: Obj) -> bool:
        return self._classes.pop(str(translate.meta(obj).get("name", "")), None) is not None

    def replace_classes(self, objs: Iterable[Obj]) -> bool:
        objs = list(objs)
        names = {str(translate.meta(o).get("name", "")) for o in objs}
        changed = False
        for gone in [n for n in self._classes if n not in names]:
            changed = self._classes.pop(gone, None) is not None or changed
        for o in objs:
            changed = self.upsert_class(o) or changed
        return changed

    def classes(self) -> dict[str, DeviceClass]:
        return dict(self._classes)

    # -- claims ----------------------------------------------------------------------------------
    def upsert_claim(self, obj: Obj) -> bool:
        """Whether the claim changed; an object older than the one held is ignored."""
        key = translate.key_of(obj)
        tombstone = self._deleted.get(key)
        if tombstone is not None and not _older(tombstone, obj, unknown=True):
            return False  # the reply to a write of ours, handled after the claim's deletion
        held = self._objects.get(key)
        if held is not None and _older(obj, held):
            return False
        self._deleted.pop(key, None)
        self._objects[key] = obj
        self._errors.pop(key, None)
        try:
            parsed: ResourceClaim | None = parse_claim(obj)
        except ModelError as exc:
            self._once(f"resourceclaim/{translate.meta(obj).get('uid') or key}", f"ignoring {exc}")
            self._errors[key] = f"{exc} (the claim cannot be read by gpufleet)"
            parsed = _status_only(obj)
        if parsed is None:
            return self._claims.pop(key, None) is not None
        if self._claims.get(key) == parsed:
            return False
        self._claims[key] = parsed
        return True

    def delete_claim(self, obj: Obj) -> bool:
        key = translate.key_of(obj)
        self._deleted[key] = obj
        self._deleted.move_to_end(key)
        while len(self._deleted) > TOMBSTONES:
            self._deleted.popitem(last=False)
        self._objects.pop(key, None)
        self._errors.pop(key, None)
        return self._claims.pop(key, None) is not None

    def replace_claims(self, objs: Iterable[Obj]) -> bool:
        objs = list(objs)
        keys = {translate.key_of(o) for o in objs}
        changed = False
        for gone in [k for k in self._objects if k not in keys]:
            changed = self.delete_claim(self._objects[gone]) or changed
        self._deleted.clear()  # a fresh list says what exists
        for o in objs:
            changed = self.upsert_claim(o) or changed
        return changed

    def claim_object(self, key: str) -> Obj | None:
        return self._objects.get(key)

    # -- what a snapshot needs -------------------------------------------------------------------
    def view(self, assumed: Iterable[ClaimAllocation]) -> dict[str, ResourceClaim]:
        """The claims, with the allocations of assumed placements (decided, not yet written or
        echoed) shown as allocated, so a later cycle neither allocates them again nor frees them."""
        out = dict(self._claims)
        for a in assumed:
            c = out.get(a.claim)
            if c is not None and c.allocation is None:
                out[a.claim] = dataclasses.replace(c, allocation=a.devices, allocated_node=a.node)
        return out

    def held_by(self, uid: str, keys: Sequence[str], view: Mapping[str, ResourceClaim]) -> tuple[ClaimAllocation, ...]:
        """What a bound pod carries: its allocated claims reserved for it alone (evicting it frees them)."""
        out = []
        for key in keys:
            c = view.get(key)
            if c is not None and c.allocation is not None and c.reserved_for == (uid,):
                out.append(self._owned(c))
        return tuple(a for a in out if a.devices)

    def held(self, view: Mapping[str, ResourceClaim], carried: set[str]) -> list[ClaimAllocation]:
        """The allocated claims no placement carries (shared, reserved for pods not bound, or for none)."""
        out = [self._owned(c) for key, c in view.items() if c.allocation is not None and key not in carried]
        return [a for a in out if a.devices]

    def _owned(self, c: ResourceClaim) -> ClaimAllocation:
        """The claim's allocation without the devices of pools that are not gpufleet's (not in its snapshot)."""
        assert c.allocation is not None
        devices = tuple(d for d in c.allocation if self.owns(d.driver))
        return ClaimAllocation(c.key, devices, c.allocated_node)

    def unready(self, pod_key: str, uid: str, claims: translate.PodClaims) -> str | None:
        """Why a pending pod's claims keep it from being scheduled now, before the core looks:
        a template's claim not created yet, a claim gpufleet cannot read, or a template's claim
        that was not made for this pod (kube-scheduler's PreEnqueue checks)."""
        if claims.missing:
            return (f"waiting for the ResourceClaim of {', '.join(claims.missing)} to be created "
                    "(kube-controller-manager's resourceclaim controller makes it)")
        for key in claims.keys:
            if key in self._errors:
                return f"resourceclaim {key}: {self._errors[key]}"
        for key in claims.templated:
            obj = self._objects.get(key)
            if obj is not None and not _controlled_by(obj, uid):
                return f"resourceclaim {key} was not created for pod {pod_key} (its owner is another object)"
        return None


def _older(obj: Obj, than: Obj, *, unknown: bool = False) -> bool:
    """Whether `obj` is an older version than `than` (resourceVersions compared as integers, as
    client-go's assume cache does); `unknown` when either is not one."""
    a, b = translate.meta(obj).get("resourceVersion"), translate.meta(than).get("resourceVersion")
    try:
        return int(str(a)) < int(str(b))
    except ValueError:
        return unknown


def _status_only(obj: Obj) -> ResourceClaim | None:
    """A claim whose spec cannot be read, with its status: its allocation still holds devices."""
    status = obj.get("status") or {}
    if not isinstance(status, Mapping) or not status.get("allocation"):
        return None
    try:
        return parse_claim({**obj, "spec": _PLACEHOLDER_SPEC})
    except ModelError:
        return None


def _controlled_by(claim: Obj, uid: str) -> bool:
    return any(isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") is True
               for r in translate.meta(claim).get("ownerReferences") or ())
