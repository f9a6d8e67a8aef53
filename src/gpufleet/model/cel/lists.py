"""Kubernetes' list functions: `isSorted`, `sum`, `min`, `max` of
`k8s.io/apiserver/pkg/cel/library/lists.go`, and DRA's `includes` (`compile.go`), shimmed.

The type checker declares them per element type, as Kubernetes does (`environment.py`);
at run time cel-expr-python hands over plain Python values. Not provided: that library's
`indexOf`/`lastIndexOf` on lists, because cel-cpp's strings extension already owns those
names and cel-expr-python cannot add overloads to a function an extension declares.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpufleet.model.cel.device import MAX_ATTRIBUTE_VALUES


class ListError(ValueError):
    """A runtime error of these functions; the text is Kubernetes'."""


def is_sorted(items: list[Any]) -> bool:
    return all(not previous > current for previous, current in zip(items, items[1:]))


def total(items: list[Any]) -> Any:
    if not items:
        return 0
    start: Any = timedelta(0) if isinstance(items[0], timedelta) else 0
    result = start
    for item in items:
        result = result + item
    if isinstance(result, int) and not isinstance(result, bool) and not -(2**63) <= result < 2**63:
        raise ListError("integer overflow")
    return result


def smallest(items: list[Any]) -> Any:
    if not items:
        raise ListError("min called on empty list")
    result = items[0]
    for item in items[1:]:
        if result > item:
            result = item
    return result


def largest(items: list[Any]) -> Any:
    if not items:
        raise ListError("max called on empty list")
    result = items[0]
    for item in items[1:]:
        if result < item:
            result = item
    return result


def includes(target: Any, item: Any) -> bool:
    """DRA's `<target>.includes(<item>)`: membership for a list (of at most 48 values),
    equality for anything else."""
    if isinstance(target, list):
        if len(target) > MAX_ATTRIBUTE_VALUES:
            raise ListError(f"'includes' function cannot be applied to lists longer than {MAX_ATTRIBUTE_VALUES} values")
        return any(_equal(value, item) for value in target)
    return _equal(target, item)


def _equal(left: Any, right: Any) -> bool:
    """CEL equality of plain values: numbers compare across int and float, bools only with bools."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    return bool(left == right) and (isinstance(left, (int, float)) == isinstance(right, (int, float)))
