"""CustomResourceDefinitions: what a CRD makes the server serve, and how a CR is checked.

A CRD (apiextensions.k8s.io/v1) is validated for the fields the real server insists on
(name = `<plural>.<group>`, scope, exactly one storage version), gets the `Established`
and `NamesAccepted` conditions at once, and adds one `ResourceType` per served version.
Custom resources of a version with an `openAPIV3Schema` are, as in kube-apiserver:

1. pruned of fields the schema does not declare (unless `x-kubernetes-preserve-unknown-fields`),
   or refused with 400 under `fieldValidation=Strict`;
2. defaulted from `default:` values;
3. validated with jsonschema (Draft 4 with OpenAPI's `nullable` and
   `x-kubernetes-int-or-string`), each error a 422 cause naming the field path
   (`spec.minMember`) in the real server's words.

Not done: CEL rules (`x-kubernetes-validations`), conversion webhooks, the scale
subresource, list-type/map-type checks. Versions share storage without conversion.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable

import jsonschema  # type: ignore[import-untyped]

from gpufleet.testing.apiserver import meta
from gpufleet.testing.apiserver.errors import ApiError, invalid
from gpufleet.testing.apiserver.resources import ResourceType

Obj = dict[str, Any]
_META_FIELDS = ("apiVersion", "kind", "metadata")


def validate_crd(crd: Obj) -> None:
    name = crd["metadata"].get("name", "")
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes: list[tuple[str, str, str]] = []
    for field, value in (("spec.group", spec.get("group")), ("spec.names.plural", names.get("plural")),
                         ("spec.names.kind", names.get("kind"))):
        if not value:
            causes.append((field, "FieldValueRequired", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(("spec.scope", "FieldValueNotSupported",
                       f'Unsupported value: "{spec.get("scope", "")}": supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(("spec.versions", "FieldValueRequired", "Required value"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(("spec.versions", "FieldValueInvalid",
                       "Invalid value: must have exactly one version marked as storage version"))
    if spec.get("group") and names.get("plural") and name != f"{names['plural']}.{spec['group']}":
        causes.append(("metadata.name", "FieldValueInvalid",
                       f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    for i, v in enumerate(versions):
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is not None:
            try:
                jsonschema.Draft4Validator.check_schema(to_json_schema(schema))
            except jsonschema.SchemaError as exc:
                causes.append((f"spec.versions[{i}].schema.openAPIV3Schema", "FieldValueInvalid",
                               f"Invalid value: {exc.message}"))
    if causes:
        raise invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)


def with_status(crd: Obj) -> Obj:
    """The CRD as the server reports it once its names are accepted."""
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    spec["names"] = names
    now = meta.now_rfc3339()
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": names, "storedVersions": storage,
        "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                        "message": "no conflicts found", "lastTransitionTime": now},
                       {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                        "message": "the initial names have been accepted", "lastTransitionTime": now}]}
    return crd


def types_of(crd: Obj) -> list[ResourceType]:
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for v in spec["versions"]:
        if not v.get("served", True):
            continue
        sub = ("status",) if "status" in (v.get("subresources") or {}) else ()
        out.append(ResourceType(
            spec["group"], v["name"], names["plural"], names["kind"], spec["scope"] == "Namespaced",
            tuple(names.get("shortNames") or ()), sub, categories=tuple(names.get("categories") or ()),
            crd=True, printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
            schema=(v.get("schema") or {}).get("openAPIV3Schema")))
    return out


# --- custom resources ----------------------------------------------------------------------

def admit(rt: ResourceType, obj: Obj, *, strict: bool) -> Obj:
    """Prune (or refuse unknown fields when strict), default and validate a custom resource."""
    if rt.schema is None:
        return obj
    unknown: list[str] = []
    body = {k: v for k, v in obj.items() if k not in _META_FIELDS}
    pruned = _prune(body, rt.schema, "", unknown)
    if unknown and strict:
        text = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise ApiError(400, f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                            f"strict decoding error: {text}", "BadRequest")
    result = {**{k: obj[k] for k in _META_FIELDS if k in obj}, **pruned}
    _default(result, rt.schema)
    validate(rt, result)
    return result


def validate(rt: ResourceType, obj: Obj) -> None:
    assert rt.schema is not None
    schema = to_json_schema(rt.schema)
    body = {k: v for k, v in obj.items() if k != "metadata"}
    validator = jsonschema.Draft4Validator({**schema, "properties": {
        k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}})
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
    causes = [_cause(e) for e in _leaves(errors)]
    if causes:
        raise invalid(rt.kind, rt.group, obj["metadata"].get("name", ""), causes)


def _leaves(errors: Iterable[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
    """anyOf/oneOf failures report their most specific sub-error, like the real messages."""
    out = []
    for e in errors:
        out.append(min(e.context, key=lambda c: -len(c.absolute_path)) if e.context else e)
    return out


def field_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def _cause(e: jsonschema.ValidationError) -> tuple[str, str, str]:
    path = field_path(e.absolute_path)
    value = e.instance
    if e.validator == "required":
        missing = e.message.split("'")[1] if "'" in e.message else ""
        where = f"{path}.{missing}" if path != "<root>" else missing
        return where, "FieldValueRequired", "Required value"
    if e.validator == "type":
        actual = _show(_type_name(value))
        return path, "FieldValueTypeInvalid", (f"Invalid value: {actual}: {path} in body must be of type "
                                               f"{e.validator_value}: {actual}")
    if e.validator == "enum":
        allowed = ", ".join(_show(v) for v in e.validator_value)
        return path, "FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {allowed}"
    words = {"minimum": "should be greater than or equal to", "maximum": "should be less than or equal to",
             "minLength": "should be at least", "maxLength": "may not be longer than",
             "minItems": "should have at least", "maxItems": "must have at most", "pattern": "should match"}
    if e.validator in words:
        return path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {path} in body {words[str(e.validator)]} {e.validator_value}"
    return path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {e.message}"


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: Any) -> str:
    for name, t in (("boolean", bool), ("integer", int), ("number", float), ("string", str),
                    ("array", list), ("object", dict)):
        if isinstance(value, t):
            return name
    return "null"


def to_json_schema(schema: Any) -> Any:
    """OpenAPI v3 (structural) schema -> Draft 4 JSON Schema."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_json_schema(v) for k, v in schema.items()
           if not k.startswith("x-kubernetes-") and k not in ("nullable", "default", "example", "format")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _prune(value: Any, schema: Any, path: str, unknown: list[str]) -> Any:
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and isinstance(extra, dict):
            return {k: _prune(v, extra, f"{path}.{k}" if path else k, unknown) for k, v in value.items()}
        if props is None:
            return value if schema.get("type") != "object" or schema.get("x-kubernetes-preserve-unknown-fields") \
                else _drop_all(value, path, unknown)
        out = {}
        for k, v in value.items():
            where = f"{path}.{k}" if path else k
            if k in props:
                out[k] = _prune(v, props[k], where, unknown)
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                out[k] = v
            else:
                unknown.append(where)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"], f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    return value


def _drop_all(value: dict[str, Any], path: str, unknown: list[str]) -> dict[str, Any]:
    unknown.extend(f"{path}.{k}" if path else k for k in value)
    return {}


def _default(value: Any, schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k not in value and isinstance(sub, dict) and "default" in sub:
                value[k] = copy.deepcopy(sub["default"])
            if k in value:
                _default(value[k], sub)
    elif isinstance(value, list):
        for item in value:
            _default(item, schema.get("items"))
