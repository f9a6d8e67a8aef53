"""Label and field selectors, parsed from query strings the way kube-apiserver parses them.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, joined by
commas (a comma inside parentheses belongs to the set). `!=` and `notin` also match objects
without the label. Field selectors: `f=v`, `f==v`, `f!=v` over the fields each resource
supports; a missing field reads as "" so `spec.nodeName=` selects unbound pods. An unknown
field is a 400, as in the real server. `label_selector_matches` evaluates a metav1
LabelSelector object (PodDisruptionBudget.spec.selector).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpufleet.testing.apiserver.errors import bad_request

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=|>|<)\s*(?P<value>[A-Za-z0-9_.-]*)|\s(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return present and (number > bound if self.op == ">" else number < bound)


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    return tuple(_requirement(part) for part in _split(text) if part.strip())


def labels_match(selector: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in selector)


def _split(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _requirement(text: str) -> Requirement:
    m = _REQUIREMENT.match(text)
    if not m or (m.group("neg") and (m.group("op") or m.group("setop"))):
        raise bad_request(f"unable to parse requirement: {text.strip()!r}")
    key = m.group("key")
    if m.group("setop"):
        values = tuple(v.strip() for v in m.group("values").split(",") if v.strip())
        return Requirement(key, m.group("setop"), values)
    op = m.group("op")
    if op is None:
        return Requirement(key, "!exists" if m.group("neg") else "exists")
    return Requirement(key, "=" if op == "==" else op, (m.group("value"),))


# --- field selectors -----------------------------------------------------------------------

FieldGetter = Callable[[Mapping[str, Any]], str]


def _path(dotted: str) -> FieldGetter:
    keys = dotted.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for k in keys:
            value = value.get(k) if isinstance(value, Mapping) else None
        if value is None:
            return ""
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    return get


_COMMON = ("metadata.name", "metadata.namespace")
_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                 "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                 "reason", "reportingComponent", "source", "type")
FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "events": _EVENT_FIELDS,
    "secrets": ("type",),
}
EVENTS_V1_ALIASES = {"regarding": "involvedObject", "reportingController": "reportingComponent",
                     "deprecatedSource": "source", "note": "message"}
"""events.k8s.io/v1 field names over the core/v1 shape the events are stored in."""


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    getter: FieldGetter
    equal: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.getter(obj) == self.value) == self.equal


def parse_field_selector(text: str, storage_key: str) -> tuple[FieldRequirement, ...]:
    """Requirements over objects of `storage_key` (as stored: events in the core/v1 shape)."""
    allowed = _COMMON + FIELDS.get(storage_key, ())
    out = []
    for part in _split_escaped(text):
        if not part:
            continue
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid field selector: {part!r}")
        name, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        stored_name = _alias(name) if storage_key == "events" else name
        if stored_name not in allowed:
            raise bad_request(f'field label not supported: {name}')
        out.append(FieldRequirement(stored_name, _path(stored_name), op != "!=", value))
    return tuple(out)


def fields_match(selector: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all(r.matches(obj) for r in selector)


def _alias(name: str) -> str:
    head, dot, rest = name.partition(".")
    return EVENTS_V1_ALIASES.get(head, head) + dot + rest


def _split_escaped(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


# --- metav1.LabelSelector ------------------------------------------------------------------

def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector object: null matches nothing, `{}` matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key", ""), expr.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values,
              "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}.get(op, False)
        if not ok:
            return False
    return True
