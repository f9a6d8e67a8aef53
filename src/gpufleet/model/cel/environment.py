"""The two cel-expr-python environments a selector goes through.

*Checking* happens in an environment that declares what Kubernetes' DRA environment declares
(`dynamic-resource-allocation/cel/compile.go` on top of `apiserver/pkg/cel/environment/base.go`):
the `device` fields, `cel.bind`, optional syntax, the strings extension (version 2), cross-type
numeric comparisons, and the quantity, semver, regex, list and `includes` functions with
Kubernetes' signatures and overload ids, quantities and versions as the abstract types
`kubernetes.Quantity` and `kubernetes.Semver`. Its functions have no implementations.

*Evaluation* happens in a second environment into which the checked expression is
deserialized. It implements the shimmed functions in Python over the runtime stand-ins of
`quantity.py` and `semver.py` (cel-expr-python cannot pass Python objects as opaque values).
The checker of this second environment never sees user input, so an expression can treat a
quantity or version as bytes only through `dyn()` or `type()` (`type(quantity("1")) == bytes`
is true here, false in Kubernetes).

`device` is declared as four qualified variables (`device.driver`, ...): cel-expr-python
declares no object types except protobuf messages, and a message cannot have map-of-map
fields. `cost.py` charges each as an identifier plus a field selection, as Kubernetes does.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Any, Callable, Iterable

from cel_expr_python import cel
from cel_expr_python.ext.ext_bindings import ExtBindings
from cel_expr_python.ext.ext_optional import ExtOptional
from cel_expr_python.ext.ext_strings import ExtStrings

from gpufleet.model.cel import lists, quantity, regex, semver

DRIVER, ALLOW_MULTIPLE, ATTRIBUTES, CAPACITY = (
    "device.driver", "device.allowMultipleAllocations", "device.attributes", "device.capacity")
DEVICE_FIELDS = {DRIVER: "driver", ALLOW_MULTIPLE: "allowMultipleAllocations",
                 ATTRIBUTES: "attributes", CAPACITY: "capacity"}
QUANTITY_TYPE, SEMVER_TYPE = "kubernetes.Quantity", "kubernetes.Semver"

_T = cel.Type
_Q = _T.AbstractType(QUANTITY_TYPE)
_S = _T.AbstractType(SEMVER_TYPE)


def _extensions() -> list[cel.CelExtensionBase]:
    return [ExtBindings(), ExtOptional(), ExtStrings(2)]


# --- checking -------------------------------------------------------------------------------

def _overload(overload_id: str, result: cel.Type, params: list[cel.Type], member: bool = False) -> cel.Overload:
    return cel.Overload(overload_id, result, params, is_member=member)


def _check_functions() -> list[cel.FunctionDecl]:
    """Kubernetes' quantity, semver (version 1), regex library and DRA's `includes`."""
    s, b, i, d = _T.STRING, _T.BOOL, _T.INT, _T.DOUBLE
    decls = {
        "quantity": [_overload("string_to_quantity", _Q, [s])],
        "isQuantity": [_overload("is_quantity_string", b, [s])],
        "sign": [_overload("quantity_sign", i, [_Q])],
        "isGreaterThan": [_overload("quantity_is_greater_than", b, [_Q, _Q], True),
                          _overload("semver_is_greater_than", b, [_S, _S], True)],
        "isLessThan": [_overload("quantity_is_less_than", b, [_Q, _Q], True),
                       _overload("semver_is_less_than", b, [_S, _S], True)],
        "compareTo": [_overload("quantity_compare_to", i, [_Q, _Q], True),
                      _overload("semver_compare_to", i, [_S, _S], True)],
        "asApproximateFloat": [_overload("quantity_get_float", d, [_Q], True)],
        "asInteger": [_overload("quantity_get_int", i, [_Q], True)],
        "isInteger": [_overload("quantity_is_integer", b, [_Q], True)],
        "add": [_overload("quantity_add", _Q, [_Q, _Q], True), _overload("quantity_add_int", _Q, [_Q, i], True)],
        "sub": [_overload("quantity_sub", _Q, [_Q, _Q], True), _overload("quantity_sub_int", _Q, [_Q, i], True)],
        "semver": [_overload("string_to_semver", _S, [s]), _overload("string_bool_to_semver", _S, [s, b])],
        "isSemver": [_overload("is_semver_string", b, [s]), _overload("is_semver_string_bool", b, [s, b])],
        "major": [_overload("semver_major", i, [_S], True)],
        "minor": [_overload("semver_minor", i, [_S], True)],
        "patch": [_overload("semver_patch", i, [_S], True)],
        "find": [_overload("string_find_string", s, [s, s], True)],
        "findAll": [_overload("string_find_all_string", _T.List(s), [s, s], True),
                    _overload("string_find_all_string_int", _T.List(s), [s, s, i], True)],
        "includes": [_overload("dra_includes_dyn_dyn", b, [_T.DYN, _T.DYN], True)],
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]


_COMPARISONS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}
_NUMERIC = {"int64": _T.INT, "uint64": _T.UINT, "double": _T.DOUBLE}
_ORDERED = {"bool": _T.BOOL, "string": _T.STRING, "bytes": _T.BYTES, "timestamp": _T.TIMESTAMP,
            "duration": _T.DURATION}
_COMPARABLE = {"int": _T.INT, "uint": _T.UINT, "double": _T.DOUBLE, "bool": _T.BOOL, "duration": _T.DURATION,
               "timestamp": _T.TIMESTAMP, "string": _T.STRING, "bytes": _T.BYTES}
_SUMMABLE = ("int", "uint", "double", "duration")
_EXCLUDE_COMPARISONS = "stdlib:\n  exclude_functions:\n" + "".join(f'    - name: "{op}"\n' for op in _COMPARISONS)
"""cel-cpp refuses a second declaration of a function, so the standard comparison operators are
left out of the standard library and declared again below, with cel-go's
`CrossTypeNumericComparisons` overloads (`1 < 1.5`), which Kubernetes' base environment enables."""


def _comparisons() -> list[cel.FunctionDecl]:
    decls = []
    for op, prefix in _COMPARISONS.items():
        overloads = [_overload(f"{prefix}_{a}" if a == b else f"{prefix}_{a}_{b}", _T.BOOL, [ta, tb])
                     for (a, ta), (b, tb) in itertools.product(_NUMERIC.items(), _NUMERIC.items())]
        overloads += [_overload(f"{prefix}_{name}", _T.BOOL, [t, t]) for name, t in _ORDERED.items()]
        decls.append(cel.FunctionDecl(op, overloads))
    return decls


def _list_functions() -> list[cel.FunctionDecl]:
    """Kubernetes' `isSorted`, `sum`, `max`, `min`: one overload per element type, as declared."""
    def each(names: Iterable[str], overload: Callable[[str, cel.Type], cel.Overload]) -> list[cel.Overload]:
        return [overload(name, _COMPARABLE[name]) for name in names]
    return [
        cel.FunctionDecl("isSorted", each(_COMPARABLE, lambda n, t: _overload(
            f"list_{n}_is_sorted_bool", _T.BOOL, [_T.List(t)], True))),
        cel.FunctionDecl("sum", each(_SUMMABLE, lambda n, t: _overload(f"list_{n}_sum_{n}", t, [_T.List(t)], True))),
        cel.FunctionDecl("max", each(_COMPARABLE, lambda n, t: _overload(f"list_{n}_max_{n}", t, [_T.List(t)], True))),
        cel.FunctionDecl("min", each(_COMPARABLE, lambda n, t: _overload(f"list_{n}_min_{n}", t, [_T.List(t)], True))),
    ]


@lru_cache(maxsize=1)
def check_env() -> cel.Env:
    variables = {
        DRIVER: _T.STRING,
        ALLOW_MULTIPLE: _T.BOOL,
        ATTRIBUTES: _T.Map(_T.STRING, _T.Map(_T.STRING, _T.DYN)),
        CAPACITY: _T.Map(_T.STRING, _T.Map(_T.STRING, _Q)),
    }
    return cel.NewEnv(config=cel.NewEnvConfigFromYaml(_EXCLUDE_COMPARISONS), variables=variables,
                      extensions=_extensions(), functions=_check_functions() + _comparisons() + _list_functions())


# --- evaluation -----------------------------------------------------------------------------

def _either(on_quantity: Callable[[quantity.Raw, quantity.Raw], Any],
            on_semver: Callable[[semver.Raw, semver.Raw], Any]) -> Callable[[quantity.Raw, quantity.Raw], Any]:
    """One runtime implementation for a name both libraries overload on the same CEL kinds."""
    def call(left: quantity.Raw, right: quantity.Raw) -> Any:
        if quantity.is_quantity(left) and quantity.is_quantity(right):
            return on_quantity(left, right)
        if semver.is_semver(left) and semver.is_semver(right):
            return on_semver(left, right)
        raise ValueError("no such overload")
    return call


_KINDS = [_T.BOOL, _T.INT, _T.UINT, _T.DOUBLE, _T.STRING, _T.BYTES, _T.LIST, _T.MAP, _T.NULL, _T.DURATION,
          _T.TIMESTAMP]


def _runtime_functions() -> list[cel.FunctionDecl]:
    s, b, i, d, by, dyn, lst = _T.STRING, _T.BOOL, _T.INT, _T.DOUBLE, _T.BYTES, _T.DYN, _T.LIST
    cmp = _either(quantity.compare, semver.compare)
    impls: dict[str, list[tuple[Any, list[cel.Type], bool, Callable[..., Any]]]] = {
        "quantity": [(by, [s], False, quantity.quantity)],
        "isQuantity": [(b, [s], False, quantity.is_quantity_string)],
        "sign": [(i, [by], False, quantity.sign)],
        "isGreaterThan": [(b, [by, by], True, lambda x, y: cmp(x, y) == 1)],
        "isLessThan": [(b, [by, by], True, lambda x, y: cmp(x, y) == -1)],
        "compareTo": [(i, [by, by], True, cmp)],
        "asApproximateFloat": [(d, [by], True, quantity.as_approximate_float)],
        "asInteger": [(i, [by], True, quantity.as_integer)],
        "isInteger": [(b, [by], True, quantity.is_integer)],
        "add": [(by, [by, by], True, quantity.add), (by, [by, i], True, quantity.add)],
        "sub": [(by, [by, by], True, quantity.sub), (by, [by, i], True, quantity.sub)],
        "semver": [(by, [s], False, semver.semver), (by, [s, b], False, semver.semver)],
        "isSemver": [(b, [s], False, semver.is_semver_string), (b, [s, b], False, semver.is_semver_string)],
        "major": [(i, [by], True, semver.major)],
        "minor": [(i, [by], True, semver.minor)],
        "patch": [(i, [by], True, semver.patch)],
        "find": [(s, [s, s], True, regex.find)],
        "findAll": [(_T.List(s), [s, s], True, regex.find_all), (_T.List(s), [s, s, i], True, regex.find_all)],
        # A `dyn` parameter matches nothing at run time in cel-expr-python: one overload per kind pair.
        "includes": [(b, [t, a], True, lists.includes) for t, a in itertools.product(_KINDS, _KINDS)],
        "isSorted": [(b, [lst], True, lists.is_sorted)],
        "sum": [(dyn, [lst], True, lists.total)],
        "max": [(dyn, [lst], True, lists.largest)],
        "min": [(dyn, [lst], True, lists.smallest)],
    }
    return [cel.FunctionDecl(name, [cel.Overload(f"gpufleet_{name}_{n}", result, params, is_member=member, impl=impl)
                                    for n, (result, params, member, impl) in enumerate(overloads)])
            for name, overloads in impls.items()]


@lru_cache(maxsize=1)
def runtime_env() -> cel.Env:
    return cel.NewEnv(variables={name: _T.DYN for name in DEVICE_FIELDS}, extensions=_extensions(),
                      functions=_runtime_functions())


@lru_cache(maxsize=1)
def bare_env() -> cel.Env:
    """The standard library alone: evaluates constant `duration()`/`timestamp()` calls."""
    return cel.NewEnv()
