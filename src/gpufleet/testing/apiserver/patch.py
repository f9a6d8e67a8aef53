"""The three patch types kube-apiserver accepts besides server-side apply.

* JSON merge patch (RFC 7386): maps merge, `null` deletes, lists are replaced.
* Strategic merge patch: as merge patch, but lists that the Kubernetes types declare with a
  patch merge key merge item by item on that key (containers by `name`, conditions by
  `type`, ...), `$patch: delete|replace|merge` directives, `$deleteFromPrimitiveList/<f>`,
  `$retainKeys`, and `$setElementOrder/<f>` (which kubectl apply sends; used for ordering).
  The merge keys are looked up by field name, which is unambiguous for the fields below.
  Custom resources do not support it (415), as in the real server.
* JSON patch (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from typing import Any

from gpufleet.testing.apiserver.errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ports": "containerPort",
    "conditions": "type", "imagePullSecrets": "name", "ownerReferences": "uid", "hostAliases": "ip",
    "podIPs": "ip", "hostIPs": "ip", "addresses": "type", "resourceClaims": "name", "schedulingGates": "name",
    "topologySpreadConstraints": "topologyKey", "readinessGates": "conditionType",
}
"""Lists merged by key (patchMergeKey of the Kubernetes types gpufleet and kubectl touch)."""
SET_LISTS = frozenset({"finalizers"})
"""Primitive lists with patchStrategy merge: the patch's values are added to the set."""


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, *, custom: bool) -> dict[str, Any]:
    """The patched object; `target` is not modified. Raises ApiError 400/415/422."""
    kind = content_type.split(";")[0].strip()
    target = copy.deepcopy(target)  # stored objects are shared and never modified in place
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json patch must be a list of operations")
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request("patch body must be a JSON object")
    if kind == MERGE:
        result = merge_patch(target, patch)
    elif kind == STRATEGIC and not custom:
        result = strategic_merge(target, patch)
    elif kind == STRATEGIC:
        raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                            f"{JSON_PATCH}, {MERGE}, {APPLY}", "UnsupportedMediaType")
    elif kind == APPLY:
        raise ApiError(415, "server-side apply is not implemented by the gpufleet test API server",
                       "UnsupportedMediaType")
    else:
        raise ApiError(415, f"unsupported patch type {kind!r}", "UnsupportedMediaType")
    if not isinstance(result, dict):
        raise bad_request("the patch did not produce an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge of `patch` into `target` (a copy is returned)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
        elif key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
        elif key in ("$patch", "$retainKeys"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for name, order in orders.items():
        if isinstance(result.get(name), list):
            result[name] = _ordered(name, result[name], order)
    return result


def _merge_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    if field in SET_LISTS:
        return current + [v for v in patch if v not in current]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return copy.deepcopy(patch)
    by_key = {item.get(key): i for i, item in enumerate(current) if isinstance(item, dict)}
    for item in patch:
        k = item.get(key)
        if item.get("$patch") == "delete":
            if k in by_key:
                current[by_key[k]] = None
            continue
        if k in by_key and current[by_key[k]] is not None:
            current[by_key[k]] = strategic_merge(current[by_key[k]], item, field)
        else:
            by_key[k] = len(current)
            current.append(strategic_merge(None, item, field))
    return [item for item in current if item is not None]


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = MERGE_KEYS.get(field)

    def ident(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item
    wanted = [ident(o) for o in order]
    rank = {w: i for i, w in enumerate(wanted) if isinstance(w, (str, int))}
    return sorted(items, key=lambda item: rank.get(ident(item), len(rank)))


# --- RFC 6902 ------------------------------------------------------------------------------

def json_patch(target: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    doc: Any = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        name, path = op["op"], _pointer(op["path"])
        if name == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif name in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(doc, source))
            if name == "move":
                _remove(doc, source)
            doc = _add(doc, path, value)
        elif name == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                    f"testing value {op['path']} failed", "Invalid")
        else:
            raise bad_request(f"unknown json patch operation {name!r}")
    if not isinstance(doc, dict):
        raise bad_request("the patch did not produce an object")
    return doc


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise bad_request(f"invalid JSON pointer {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _parent(doc: Any, path: list[str]) -> Any:
    for part in path[:-1]:
        doc = _step(doc, part)
    return doc


def _step(doc: Any, part: str) -> Any:
    try:
        return doc[int(part)] if isinstance(doc, list) else doc[part]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, f"the server rejected our request due to an error in our request: "
                            f"missing path element {part!r}", "Invalid") from None


def _get(doc: Any, path: list[str]) -> Any:
    for part in path:
        doc = _step(doc, part)
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _parent(doc, path), path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise ApiError(422, f"index {last} out of range", "Invalid")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, f"cannot add at {'/'.join(path)}", "Invalid")
    return doc


def _remove(doc: Any, path: list[str]) -> None:
    if not path:
        raise bad_request("cannot remove the whole document")
    parent, last = _parent(doc, path), path[-1]
    _step(parent, last)  # raises when missing
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
