"""Compile-time checks Kubernetes adds after type-checking, which cel-cpp does not make.

Kubernetes' base environment (`apiserver/pkg/cel/environment/base.go`) installs cel-go's AST
validators for duration, timestamp and regex literals and for homogeneous aggregate literals,
requires the result to be `bool` (or DRA's attribute type, `dyn`), and compiles constant
`find`/`findAll` patterns when it builds the program (`library/regex.go`, `OptimizeRegex`).
"""

from __future__ import annotations

import json

from cel_expr_python import cel

from gpufleet.model.cel import regex
from gpufleet.model.cel.checked import Call, CelType, CheckedExpr, ListExpr, Literal, MapExpr, walk
from gpufleet.model.cel.environment import bare_env


def output_type_problem(checked: CheckedExpr) -> str | None:
    result = checked.type_of(checked.expr)
    if result.kind in ("bool", "dyn"):
        return None
    return f"must evaluate to bool or the unknown type, not {result}"


def literal_problems(checked: CheckedExpr) -> list[str]:
    """cel-go's `ValidateDurationLiterals`, `ValidateTimestampLiterals`, `ValidateRegexLiterals`,
    `ValidateHomogeneousAggregateLiterals`, and Kubernetes' constant-pattern compilation."""
    problems: list[str] = []
    for node in walk(checked.expr):
        if isinstance(node, Call) and node.args and isinstance(node.args[0], Literal):
            problem = _literal_argument(node.function, node.args[0])
            if problem:
                problems.append(problem)
        if isinstance(node, ListExpr):
            element: CelType | None = None
            for i, item in enumerate(node.elements):
                item_type = _unwrap_optional(checked.type_of(item), i in node.optional_indices)
                if element is None:
                    element = item_type
                elif item_type != element:
                    problems.append(f"expected type '{element}' but found '{item_type}'")
                    break
        if isinstance(node, MapExpr):
            key_type: CelType | None = None
            value_type: CelType | None = None
            for entry in node.entries:
                assert entry.key is not None
                kt = checked.type_of(entry.key)
                vt = _unwrap_optional(checked.type_of(entry.value), entry.optional)
                if key_type is None or value_type is None:
                    key_type, value_type = kt, vt
                    continue
                if kt != key_type:
                    problems.append(f"expected type '{key_type}' but found '{kt}'")
                if vt != value_type:
                    problems.append(f"expected type '{value_type}' but found '{vt}'")
    return problems


def _unwrap_optional(t: CelType, optional: bool) -> CelType:
    return t.params[0] if optional and t.params else t


def _literal_argument(function: str, literal: Literal) -> str | None:
    if literal.kind != "string":
        return None
    assert isinstance(literal.value, str)
    if function == "matches":
        try:
            regex.compiled(literal.value)
        except regex.RegexError:
            return "invalid matches argument"
    if function in ("duration", "timestamp"):
        result = bare_env().compile(f"{function}({json.dumps(literal.value, ensure_ascii=False)})").eval()
        if result.type() == cel.Type.ERROR:
            return f"invalid {function} argument"
    return None


def pattern_problems(checked: CheckedExpr) -> list[str]:
    """Constant patterns of `find`/`findAll`, which Kubernetes compiles with the program."""
    problems = []
    for node in walk(checked.expr):
        if (isinstance(node, Call) and node.function in ("find", "findAll") and node.target is not None
                and node.args and isinstance(node.args[0], Literal) and isinstance(node.args[0].value, str)):
            try:
                regex.compiled(node.args[0].value)
            except regex.RegexError as exc:
                problems.append(f"program instantiation failed: {str(exc).removeprefix('Illegal regex: ')}")
    return problems
