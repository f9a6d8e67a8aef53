"""`meta.k8s.io/v1 Table` answers, which `kubectl get` asks for in its Accept header.

Columns follow kube-apiserver's printers for the types people look at (pods, nodes,
namespaces, events, leases, PDBs, CRDs) and a CRD's `additionalPrinterColumns` (simple
`.a.b` JSON paths); other types get Name and Age. Ages are rendered server-side in
kubectl's short form (`5s`, `3m2s`, `4h`, `2d3h`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpufleet.testing.apiserver.meta import parse_time
from gpufleet.testing.apiserver.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]
"""(name, type, priority, cell)."""


def age(obj: Obj) -> str:
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp") or "")
    return "<unknown>" if created is None else human_duration(time.time() - created)


def human_duration(seconds: float) -> str:
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


def _get(obj: Any, path: str) -> Any:
    for key in path.strip(".").split("."):
        if not key:
            continue
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    if phase == "Succeeded":
        return "Completed"
    if phase == "Failed":
        return status.get("reason") or "Error"
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("reason") or phase)


def _ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _node_status(node: Obj) -> str:
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    text = "Ready" if ready and ready[0].get("status") == "True" else ("NotReady" if ready else "Unknown")
    return text + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")


def _roles(node: Obj) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in (node["metadata"].get("labels") or {}) if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _event_object(ev: Obj) -> str:
    inv = ev.get("involvedObject") or {}
    return f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}"


def _event_seen(ev: Obj) -> str:
    when = parse_time(ev.get("lastTimestamp") or ev.get("eventTime") or "")
    return "<unknown>" if when is None else human_duration(time.time() - when)


def _name(o: Obj) -> Any:
    return o["metadata"]["name"]


_COLUMNS: dict[str, list[Column]] = {
    "pods": [("Name", "string", 0, _name), ("Ready", "string", 0, _ready), ("Status", "string", 0, _pod_status),
             ("Restarts", "string", 0, lambda o: str(sum(c.get("restartCount", 0) for c in
                                                          (o.get("status") or {}).get("containerStatuses") or []))),
             ("Age", "string", 0, age), ("IP", "string", 1, lambda o: _get(o, "status.podIP") or "<none>"),
             ("Node", "string", 1, lambda o: _get(o, "spec.nodeName") or "<none>"),
             ("Nominated Node", "string", 1, lambda o: _get(o, "status.nominatedNodeName") or "<none>"),
             ("Readiness Gates", "string", 1, lambda o: "<none>")],
    "nodes": [("Name", "string", 0, _name), ("Status", "string", 0, _node_status), ("Roles", "string", 0, _roles),
              ("Age", "string", 0, age),
              ("Version", "string", 0, lambda o: _get(o, "status.nodeInfo.kubeletVersion") or "")],
    "namespaces": [("Name", "string", 0, _name), ("Status", "string", 0, lambda o: _get(o, "status.phase") or ""),
                   ("Age", "string", 0, age)],
    "events": [("Last Seen", "string", 0, _event_seen), ("Type", "string", 0, lambda o: o.get("type", "")),
               ("Reason", "string", 0, lambda o: o.get("reason", "")), ("Object", "string", 0, _event_object),
               ("Message", "string", 0, lambda o: o.get("message", ""))],
    "leases.coordination.k8s.io": [("Name", "string", 0, _name),
                                   ("Holder", "string", 0, lambda o: _get(o, "spec.holderIdentity") or ""),
                                   ("Age", "string", 0, age)],
    "poddisruptionbudgets.policy": [
        ("Name", "string", 0, _name),
        ("Min Available", "string", 0, lambda o: str(_get(o, "spec.minAvailable") or "N/A")),
        ("Max Unavailable", "string", 0, lambda o: str(_get(o, "spec.maxUnavailable") or "N/A")),
        ("Allowed Disruptions", "integer", 0, lambda o: _get(o, "status.disruptionsAllowed") or 0),
        ("Age", "string", 0, age)],
    "customresourcedefinitions.apiextensions.k8s.io": [
        ("Name", "string", 0, _name),
        ("Created At", "date", 0, lambda o: o["metadata"].get("creationTimestamp", ""))],
}
_DEFAULT: list[Column] = [("Name", "string", 0, _name), ("Age", "string", 0, age)]


def columns(rt: ResourceType) -> list[Column]:
    if rt.crd and rt.printer_columns:
        cols: list[Column] = [("Name", "string", 0, _name)]
        for c in rt.printer_columns:
            cols.append((str(c.get("name", "")), str(c.get("type", "string")), int(c.get("priority", 0)),
                         _printer_cell(str(c.get("jsonPath", "")), str(c.get("type", "string")))))
        return cols
    return _COLUMNS.get(rt.storage_key, _DEFAULT)


def _printer_cell(path: str, kind: str) -> Callable[[Obj], Any]:
    def cell(o: Obj) -> Any:
        value = _get(o, path)
        if kind == "date" and isinstance(value, str):
            when = parse_time(value)
            return "<unknown>" if when is None else human_duration(time.time() - when)
        return value if value is not None else ""
    return cell


def table(rt: ResourceType, objects: list[Obj], stored: list[Obj], rv: str, include: str) -> Obj:
    """A Table of `objects` (as the request's version shows them); cells read `stored` (core shape)."""
    cols = columns(rt)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": [{"name": n, "type": "string" if t == "date" else t,
                                   "format": "name" if n == "Name" else "", "description": n, "priority": p}
                                  for n, t, p, _ in cols],
            "rows": [{"cells": [f(s) for _, _, _, f in cols], "object": _row_object(o, include)}
                     for o, s in zip(objects, stored)]}


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}
