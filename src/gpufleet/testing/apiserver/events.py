"""Events: core/v1 and events.k8s.io/v1 are one store seen through two schemas.

kube-apiserver keeps one set of Event objects and converts between the versions, so an
event a scheduler writes through events.k8s.io/v1 (`regarding`, `note`) is what
`kubectl describe` reads through core/v1 (`involvedObject`, `message`). Objects are stored
in the core/v1 shape; `to_events_v1` and `from_events_v1` convert. `validate_events_v1`
applies the create validation of events.k8s.io/v1 (eventTime, reportingController, ...).
"""

from __future__ import annotations

from typing import Any

from gpufleet.testing.apiserver import meta
from gpufleet.testing.apiserver.errors import invalid

Obj = dict[str, Any]

_RENAMES = (("regarding", "involvedObject"), ("note", "message"), ("reportingController", "reportingComponent"),
            ("deprecatedSource", "source"), ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count"))
_SHARED = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def from_events_v1(obj: Obj) -> Obj:
    """An events.k8s.io/v1 Event in the core/v1 shape it is stored in."""
    core: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key in _SHARED:
        if key in obj:
            core[key] = obj[key]
    for new, old in _RENAMES:
        if _present(obj, new):
            core[old] = obj[new]
    return core


def to_events_v1(core: Obj) -> Obj:
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key in _SHARED:
        if key in core:
            out[key] = core[key]
    for new, old in _RENAMES:
        if _present(core, old):
            out[new] = core[old]
    return out


def _present(obj: Obj, key: str) -> bool:
    return obj.get(key) is not None


def validate_events_v1(obj: Obj) -> None:
    meta.check_micro_time(obj.get("eventTime"), "Event", "events.k8s.io/v1")
    name = (obj.get("metadata") or {}).get("name", "")
    causes = [(field, "FieldValueRequired", "Required value")
              for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason")
              if not obj.get(field)]
    if obj.get("type") not in ("Normal", "Warning"):
        causes.append(("type", "FieldValueInvalid", f'Invalid value: "{obj.get("type", "")}": '
                                                    "has invalid value, must be one of Normal, Warning"))
    if len(obj.get("note") or "") > 1024:
        causes.append(("note", "FieldValueTooLong", "Too long: may not be more than 1024 bytes"))
    if causes:
        raise invalid("Event", "events.k8s.io", name, causes)


def default_core_event(obj: Obj) -> None:
    """core/v1 events written by old clients carry no eventTime; kubectl shows lastTimestamp."""
    meta.check_micro_time(obj.get("eventTime"), "Event", "v1")
    if not obj.get("eventTime") and not obj.get("lastTimestamp"):
        obj["lastTimestamp"] = obj.get("firstTimestamp") or meta.now_rfc3339()
        obj.setdefault("firstTimestamp", obj["lastTimestamp"])
