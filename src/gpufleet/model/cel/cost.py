"""The worst-case cost of a selector, as Kubernetes estimates it before admitting one.

A port of cel-go's estimator (`checker/cost.go`: `coster`, with `PresenceTestHasCost(false)`
as Kubernetes' base environment sets it), of Kubernetes' library estimator
(`apiserver/pkg/cel/library/cost.go`, `CostEstimator.EstimateCallCost`) for the functions
this environment declares, and of DRA's size estimator and `includes` estimate
(`dynamic-resource-allocation/cel/compile.go`: `sizeEstimator`, `draCostEstimator`). It
walks the checked AST of `checked.py`; the overload ids cel-cpp records are cel-spec's, the
same cel-go's switch uses.

Sizes of the device's maps and strings come from `SizeBounds`; `DEFAULT_BOUNDS` are
Kubernetes' API limits (`device.py`). `Selector.matches` re-estimates with a device's actual
sizes when a device exceeds them, which is how the runtime limit is enforced here (see
`selector.py`). cel-cpp's macros expand to the same comprehensions cel-go's do
(`@result`, `@not_strictly_false`, `cel.bind` as a comprehension over `[]`), so their
estimates agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.model.cel import device as limits
from gpufleet.model.cel.checked import (Call, CelType, CheckedExpr, Comprehension, Expr, Ident, ListExpr, Literal,
                                        MapExpr, Select, StructExpr)
from gpufleet.model.cel.environment import DEVICE_FIELDS, QUANTITY_TYPE, SEMVER_TYPE

MAX = 2**64 - 1
"""cel-go's `math.MaxUint64`: costs and sizes saturate there."""
_TWO_TO_64 = float(2**64)
_STRING_TRAVERSAL = 0.1
_REGEX_LENGTH = 0.25
_LIST_CREATE, _MAP_CREATE, _STRUCT_CREATE = 10, 30, 40
_ACCUMULATORS = ("__result__", "@result")


def _add(x: int, y: int) -> int:
    return MAX if y > 0 and x > MAX - y else x + y


def _mul(x: int, y: int) -> int:
    return MAX if y != 0 and x > MAX // y else x * y


def _factor(x: int, factor: float) -> int:
    xf = float(x)
    if xf > 0 and factor > 0 and xf > MAX / factor:
        return MAX
    ceil = math.ceil(xf * factor)
    return MAX if ceil >= _TWO_TO_64 else int(ceil)


@dataclass(frozen=True, slots=True)
class Range:
    """cel-go's `CostEstimate` and `SizeEstimate` (both a min/max pair)."""

    min: int
    max: int

    def add(self, other: Range) -> Range:
        return Range(_add(self.min, other.min), _add(self.max, other.max))

    def mul(self, other: Range) -> Range:
        return Range(_mul(self.min, other.min), _mul(self.max, other.max))

    def factor(self, factor: float) -> Range:
        return Range(_factor(self.min, factor), _factor(self.max, factor))

    def union(self, other: Range) -> Range:
        return Range(min(self.min, other.min), max(self.max, other.max))


ZERO, ONE, UNKNOWN = Range(0, 0), Range(1, 1), Range(0, MAX)


@dataclass(frozen=True, slots=True)
class SizeBounds:
    """The largest device a selector may meet: Kubernetes' limits unless a device exceeds them."""

    domains: int = limits.MAX_ATTRIBUTES_AND_CAPACITIES
    names_per_domain: int = limits.MAX_ATTRIBUTES_AND_CAPACITIES
    attribute_length: int = limits.MAX_ATTRIBUTE_VALUE_LENGTH
    name_length: int = limits.MAX_ID_LENGTH
    domain_length: int = limits.MAX_DOMAIN_LENGTH
    driver_length: int = limits.MAX_DRIVER_LENGTH

    def widened(self, other: SizeBounds) -> SizeBounds:
        return SizeBounds(*(max(a, b) for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[int, ...]:
        return (self.domains, self.names_per_domain, self.attribute_length, self.name_length,
                self.domain_length, self.driver_length)


DEFAULT_BOUNDS = SizeBounds()


@dataclass(frozen=True, slots=True)
class _Decl:
    """Kubernetes' `DeclType`, reduced to what the size estimator reads."""

    max_elements: int
    fields: tuple[tuple[str, _Decl], ...] = ()
    key: _Decl | None = None
    elem: _Decl | None = None
    is_attribute: bool = False


def _device_decl(bounds: SizeBounds) -> _Decl:
    domain, name = _Decl(bounds.domain_length), _Decl(bounds.name_length)
    attribute = _Decl(max(bounds.attribute_length, limits.MAX_ATTRIBUTE_VALUES), is_attribute=True)
    inner_attributes = _Decl(bounds.names_per_domain, key=name, elem=attribute)
    inner_capacity = _Decl(bounds.names_per_domain, key=name, elem=_Decl(0))
    return _Decl(0, fields=(
        ("driver", _Decl(bounds.driver_length)),
        ("allowMultipleAllocations", _Decl(1)),
        ("attributes", _Decl(bounds.domains, key=domain, elem=inner_attributes)),
        ("capacity", _Decl(bounds.domains, key=domain, elem=inner_capacity)),
    ))


@dataclass(slots=True)
class _Entry:
    """cel-go's `entrySizeEstimate`."""

    container: str
    key: Range
    val: Range


@dataclass(slots=True)
class _Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None


@dataclass(frozen=True, slots=True)
class _Node:
    """cel-go's `AstNode`: a path, a type and a computed size."""

    path: tuple[str, ...] | None
    type: CelType
    expr: Expr | None
    size: Range | None


def _union_entries(a: _Entry | None, b: _Entry | None) -> _Entry | None:
    if a is None or b is None:
        return None
    return _Entry(a.container, a.key.union(b.key), a.val.union(b.val))


def _is_scalar(t: CelType) -> bool:
    if t.kind in ("bool", "double", "duration", "int", "timestamp", "uint"):
        return True
    return t.kind == "abstract" and t.name == "optional_type" and bool(t.params) and _is_scalar(t.params[0])


def _is_struct(t: CelType) -> bool:
    """Kubernetes declares its quantity and semver types as object types."""
    return t.kind == "message" or (t.kind == "abstract" and t.name in (QUANTITY_TYPE, SEMVER_TYPE))


class _Coster:
    def __init__(self, checked: CheckedExpr, bounds: SizeBounds) -> None:
        self.checked = checked
        self.device = _device_decl(bounds)
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}

    # -- scopes ---------------------------------------------------------------------------

    def push(self, name: str, path: tuple[str, ...] | None, size: Range | None, entry: _Entry | None) -> None:
        self.locals.setdefault(name, []).append(_Local(path, size, entry))

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def peek(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    # -- sizes and paths --------------------------------------------------------------------

    def type_of(self, e: Expr) -> CelType:
        return self.checked.type_of(e)

    def path_of(self, e: Expr) -> tuple[str, ...] | None:
        if isinstance(e, Ident):
            local = self.peek(e.name)
            if local is not None:
                return local.path
        return self.paths.get(e.id)

    def estimate_size(self, path: tuple[str, ...] | None) -> Range | None:
        """DRA's `sizeEstimator.EstimateSize`."""
        if not path or path[0] != "device":
            return None
        node = self.device
        for name in path[1:]:
            if name in ("@items", "@values"):
                if node.elem is None:
                    return None
                node = node.elem
            elif name == "@keys":
                if node.key is None:
                    return None
                node = node.key
            else:
                field = dict(node.fields).get(name)
                if field is None:
                    if node.elem is not None and node.elem.is_attribute:
                        node = node.elem
                        continue
                    return None
                node = field
        return Range(0, node.max_elements)

    def compute_size(self, e: Expr) -> Range | None:
        if e.id in self.sizes:
            return self.sizes[e.id]
        size = _literal_size(e)
        if size is not None:
            return size
        size = self.estimate_size(self.path_of(e))
        if size is not None:
            self.sizes[e.id] = size
            return size
        if _is_scalar(self.type_of(e)):
            return ONE
        if isinstance(e, Ident):
            local = self.peek(e.name)
            if local is not None and local.size is not None:
                return local.size
        return None

    def size_or_unknown(self, e: Expr) -> Range:
        size = self.compute_size(e)
        return UNKNOWN if size is None else size

    def entry_of(self, e: Expr) -> _Entry | None:
        if e.id in self.entries:
            return self.entries[e.id]
        if isinstance(e, Ident):
            local = self.peek(e.name)
            if local is not None:
                return local.entry
        return None

    def node(self, e: Expr) -> _Node:
        path = self.path_of(e)
        if path and path[0] in _ACCUMULATORS:
            path = None
        return _Node(path, self.type_of(e), e, self.compute_size(e))

    def node_size(self, node: _Node) -> Range:
        """Kubernetes' `CostEstimator.sizeEstimate`."""
        if node.size is not None:
            return node.size
        size = self.estimate_size(node.path)
        return UNKNOWN if size is None else size

    # -- the walk ---------------------------------------------------------------------------

    def cost(self, e: Expr) -> Range:
        if isinstance(e, Literal):
            return ZERO
        if isinstance(e, Ident):
            return self.cost_ident(e)
        if isinstance(e, Select):
            return self.cost_select(e)
        if isinstance(e, Call):
            return self.cost_call(e)
        if isinstance(e, ListExpr):
            return self.cost_list(e)
        if isinstance(e, MapExpr):
            return self.cost_map(e)
        if isinstance(e, StructExpr):
            total = Range(_STRUCT_CREATE, _STRUCT_CREATE)
            for entry in e.entries:
                total = total.add(self.cost(entry.value))
            return total
        if _is_bind(e):
            return self.cost_bind(e)
        return self.cost_comprehension(e)

    def cost_ident(self, e: Ident) -> Range:
        local = self.peek(e.name)
        if local is not None:
            if local.path is not None:
                self.paths[e.id] = local.path
            return ONE
        if e.name in DEVICE_FIELDS:
            # Kubernetes' `device.<field>` is an identifier and a field selection on an object.
            self.paths[e.id] = ("device", DEVICE_FIELDS[e.name])
            return Range(2, 2)
        self.paths[e.id] = (e.name,)
        return ONE

    def cost_select(self, e: Select) -> Range:
        if e.test_only:
            return self.cost(e.operand)  # PresenceTestHasCost(false)
        total = self.cost(e.operand)
        target = self.type_of(e.operand)
        if target.kind in ("map", "type_param") or _is_struct(target):
            total = total.add(ONE)
        path = self.path_of(e.operand)
        self.paths[e.id] = (path or ()) + (e.field,)
        return total

    def cost_list(self, e: ListExpr) -> Range:
        total = Range(_LIST_CREATE, _LIST_CREATE)
        item = Range(0 if not e.elements else MAX, 0)
        for element in e.elements:
            total = total.add(self.cost(element))
            item = item.union(self.size_or_unknown(element))
        self.entries[e.id] = _Entry("list", ONE, item)
        return total

    def cost_map(self, e: MapExpr) -> Range:
        total = Range(_MAP_CREATE, _MAP_CREATE)
        key = val = Range(0 if not e.entries else MAX, 0)
        for entry in e.entries:
            assert entry.key is not None
            total = total.add(self.cost(entry.key)).add(self.cost(entry.value))
            key = key.union(self.size_or_unknown(entry.key))
            val = val.union(self.size_or_unknown(entry.value))
        self.entries[e.id] = _Entry("map", key, val)
        return total

    def push_local(self, name: str, e: Expr) -> None:
        self.push(name, self.path_of(e), self.compute_size(e), self.entry_of(e))

    def push_iter(self, name: str, range_expr: Expr, which: str) -> None:
        """cel-go's `pushIterSingle` ("single"), `pushIterKey` ("key"), `pushIterValue` ("value")."""
        entry = self.entry_of(range_expr)
        container = entry.container if entry is not None else self.type_of(range_expr).kind
        is_list = container == "list"
        size: Range | None
        if which == "value" or (which == "single" and is_list):
            size, sub = (entry.val if entry else None), ("@items" if is_list else "@values")
        else:
            size, sub = (entry.key if entry else None), ("@indices" if is_list and which == "key" else "@keys")
        path = self.path_of(range_expr)
        self.push(name, (path or ()) + (sub,), size, None)

    def cost_comprehension(self, e: Comprehension) -> Range:
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self.push_local(e.accu_var, e.accu_init)
        if e.iter_var2:
            self.push_iter(e.iter_var, e.iter_range, "key")
            self.push_iter(e.iter_var2, e.iter_range, "value")
        else:
            self.push_iter(e.iter_var, e.iter_range, "single")
        loop = self.cost(e.loop_condition)
        step = self.cost(e.loop_step)
        self.pop(e.iter_var)
        if e.iter_var2:
            self.pop(e.iter_var2)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        count = self.size_or_unknown(e.iter_range)
        total = total.add(count.mul(step.add(loop)))
        if isinstance(e.accu_init, Literal):
            size = self.compute_size(e.accu_init)
            if size is not None:
                self.sizes[e.id] = size
        elif isinstance(e.accu_init, (ListExpr, MapExpr)):
            self.sizes[e.id] = count
            step_entry = self.entry_of(e.loop_step)
            if step_entry is not None:
                self.entries[e.id] = step_entry
        return total

    def cost_bind(self, e: Comprehension) -> Range:
        total = self.cost(e.iter_range).add(self.cost(e.accu_init))
        self.push_local(e.accu_var, e.accu_init)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        self.copy_sizes(e, e.result)
        return total

    def copy_sizes(self, dst: Expr, src: Expr) -> None:
        size = self.compute_size(src)
        if size is not None:
            self.sizes[dst.id] = size
        entry = self.entry_of(src)
        if entry is not None:
            self.entries[dst.id] = entry

    def cost_call(self, e: Call) -> Range:
        if e.function == "dyn" and e.args:
            arg_cost = self.cost(e.args[0])
            self.copy_sizes(e, e.args[0])
            return ONE.add(arg_cost)
        arg_costs = [self.cost(arg) for arg in e.args]
        args = [self.node(arg) for arg in e.args]
        overloads = self.checked.overloads.get(e.id, ())
        if not overloads:
            return ZERO
        total, target = ZERO, None
        if e.target is not None:
            total = total.add(self.cost(e.target))
            target = self.node(e.target)
        fn = Range(MAX, 0)
        result_size: Range | None = None
        for overload in overloads:
            call_cost, call_size = self.function_cost(e, overload, target, args, arg_costs)
            fn = fn.union(call_cost)
            if call_size is not None:
                result_size = call_size if result_size is None else result_size.union(call_size)
            if overload in ("index_list", "index_map") and e.args:
                entry = self.entry_of(e.args[0])
                result_size = entry.val if entry is not None else None
                sub = "@items" if overload == "index_list" else "@values"
                self.paths[e.id] = (self.path_of(e.args[0]) or ()) + (sub,)
            if result_size is None:
                result_size = self.compute_size(e)
        if result_size is not None:
            self.sizes[e.id] = result_size
        return total.add(fn)

    def function_cost(self, e: Call, overload: str, target: _Node | None, args: list[_Node],
                      arg_costs: list[Range]) -> tuple[Range, Range | None]:
        arg_sum = ZERO
        for cost in arg_costs:
            arg_sum = arg_sum.add(cost)
        estimate = self.library_cost(e.function, overload, target, args)
        if estimate is not None:
            return estimate[0].add(arg_sum), estimate[1]
        return self.builtin_cost(e, overload, target, args, arg_costs, arg_sum)

    def library_cost(self, function: str, overload: str, target: _Node | None,
                     args: list[_Node]) -> tuple[Range, Range | None] | None:
        """`draCostEstimator` and Kubernetes' `CostEstimator.EstimateCallCost`."""
        if function == "includes" and overload == "dra_includes_dyn_dyn" and target is not None:
            return Range(0, limits.MAX_ATTRIBUTE_VALUES).mul(ONE), None
        if function in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes") and target is not None:
            element = self.list_element(target)
            if element is not None:
                cost = ONE
                if element.type.kind in ("string", "bytes"):
                    cost = cost.add(self.node_size(element).factor(_STRING_TRAVERSAL))
                return self.node_size(target).mul(cost), None
            if function == "includes":
                return self.node_size(target).mul(ONE), None
            return self.node_size(target).factor(_STRING_TRAVERSAL), None
        if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            size = self.node_size(target)
            return size.factor(_STRING_TRAVERSAL), size
        if function == "replace" and target is not None and len(args) >= 2:
            return self.replace_cost(target, args)
        if function == "split" and target is not None:
            size = self.node_size(target)
            largest = size.max
            if len(args) > 1 and isinstance(args[1].expr, Literal) and args[1].expr.kind == "int":
                largest = int(args[1].expr.value)  # type: ignore[arg-type]  # an int literal
            return size.factor(2 * _STRING_TRAVERSAL), Range(0, largest)
        if function == "join" and target is not None:
            return self.join_cost(target, args)
        if function in ("find", "findAll") and target is not None and args:
            size = self.node_size(target)
            text = size.add(ONE).factor(_STRING_TRAVERSAL)
            pattern = self.node_size(args[0]).factor(_REGEX_LENGTH)
            return text.mul(pattern), Range(0, size.max)
        if function in ("quantity", "isQuantity", "semver", "isSemver") and args:
            return self.node_size(args[0]).factor(_STRING_TRAVERSAL), None
        if function in ("sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan",
                        "compareTo", "add", "sub", "major", "minor", "patch"):
            return ONE, None
        if function == "_==_" and len(args) == 2 and args[0].type == args[1].type and _is_struct(args[0].type):
            return ONE, None
        return None

    def list_element(self, target: _Node) -> _Node | None:
        if not target.type.params:
            return None
        path = target.path + ("@items",) if target.path is not None else None
        return _Node(path, target.type.params[0], None, None)

    def replace_cost(self, target: _Node, args: list[_Node]) -> tuple[Range, Range | None]:
        size = self.node_size(target)
        old, new = self.node_size(args[0]), self.node_size(args[1])
        if old.min == 0:
            count_max, kept_max = (size.max + 1 if size.max < MAX else size.max), size.max
        elif new.max <= old.min:
            count_max, kept_max = 0, size.max
        else:
            count_max, kept_max = math.ceil(size.max / old.min), 0
        if old.max == 0:
            count_min, kept_min = (size.min + 1 if size.min < MAX else size.min), size.min
        elif old.max <= new.min:
            count_min, kept_min = 0, size.min
        else:
            count_min, kept_min = math.ceil(size.min / old.max), 0
        result = Range(count_min, count_max).mul(new).add(Range(kept_min, kept_max))
        return size.factor(2 * _STRING_TRAVERSAL), result

    def join_cost(self, target: _Node, args: list[_Node]) -> tuple[Range, Range | None]:
        size = ZERO
        count = self.node_size(target)
        element = self.list_element(target)
        if element is not None:
            size = count.mul(self.node_size(element))
        if args:
            separator = self.node_size(args[0])
            size = size.add(separator.mul(Range(max(count.min - 1, 0), max(count.max - 1, 0))))
        return size.factor(_STRING_TRAVERSAL), size

    def builtin_cost(self, e: Call, overload: str, target: _Node | None, args: list[_Node],
                     arg_costs: list[Range], arg_sum: Range) -> tuple[Range, Range | None]:
        """The overload switch of cel-go's `coster.functionCost`."""
        if overload == "string_format" and target is not None:
            return self.node_size_or_unknown(target).factor(_STRING_TRAVERSAL).add(arg_sum), None
        if overload == "string_to_bytes" and len(args) == 1:
            size = self.node_size_or_unknown(args[0])
            return size.factor(_STRING_TRAVERSAL).add(arg_sum), Range(size.min, _mul(size.max, 4))
        if overload == "bytes_to_string" and len(args) == 1:
            size = self.node_size_or_unknown(args[0])
            return size.factor(_STRING_TRAVERSAL).add(arg_sum), Range(size.min // 4, size.max)
        if overload == "strings_quote" and len(args) == 1:
            size = self.node_size_or_unknown(args[0])
            return size.factor(_STRING_TRAVERSAL).add(arg_sum), Range(_add(size.min, 2), _add(_mul(size.max, 2), 2))
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return self.node_size_or_unknown(args[0]).factor(_STRING_TRAVERSAL).add(arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return self.node_size_or_unknown(args[1]).factor(1).add(arg_sum), None
        if overload == "matches_string" and target is not None and len(args) == 1:
            text = self.node_size_or_unknown(target).add(ONE).factor(_STRING_TRAVERSAL)
            pattern = self.node_size_or_unknown(args[0]).factor(_REGEX_LENGTH)
            return text.mul(pattern).add(arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            text = self.node_size_or_unknown(target).factor(_STRING_TRAVERSAL)
            sub = self.node_size_or_unknown(args[0]).factor(_STRING_TRAVERSAL)
            return text.mul(sub).add(arg_sum), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs
            return Range(lhs.min, lhs.add(rhs).max), None
        if overload == "conditional":
            size = self.node_size_or_unknown(args[1]).union(self.node_size_or_unknown(args[2]))
            entry = _union_entries(self.entry_of(e.args[1]), self.entry_of(e.args[2]))
            if entry is not None:
                self.entries[e.id] = entry
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            size = self.node_size_or_unknown(args[0]).add(self.node_size_or_unknown(args[1]))
            entry = _union_entries(self.entry_of(e.args[0]), self.entry_of(e.args[1]))
            if entry is not None:
                self.entries[e.id] = entry
            if overload == "add_list":
                return ONE.add(arg_sum), size
            return size.factor(_STRING_TRAVERSAL).add(arg_sum), size
        if overload in _SIZED_COMPARISONS:
            lhs, rhs = self.node_size_or_unknown(args[0]), self.node_size_or_unknown(args[1])
            smallest = min(lhs.max, rhs.max)
            return Range(1 if smallest > 0 else 0, smallest).factor(_STRING_TRAVERSAL).add(arg_sum), None
        return ONE.add(arg_sum), None

    @staticmethod
    def node_size_or_unknown(node: _Node) -> Range:
        """cel-go's `sizeOrUnknown` of an `AstNode` (its computed size only)."""
        return UNKNOWN if node.size is None else node.size


_SIZED_COMPARISONS = frozenset({
    "less_string", "greater_string", "less_equals_string", "greater_equals_string",
    "less_bytes", "greater_bytes", "less_equals_bytes", "greater_equals_bytes", "equals", "not_equals"})


def _literal_size(e: Expr) -> Range | None:
    """cel-go's `computeExprSize`."""
    if isinstance(e, Literal):
        if e.kind == "string":
            assert isinstance(e.value, str)
            return Range(len(e.value), len(e.value))
        if e.kind == "bytes":
            assert isinstance(e.value, bytes)
            return Range(len(e.value), len(e.value))
        return ONE
    if isinstance(e, ListExpr):
        return Range(len(e.elements), len(e.elements))
    if isinstance(e, MapExpr):
        return Range(len(e.entries), len(e.entries))
    return None


def _is_bind(e: Comprehension) -> bool:
    return (isinstance(e.iter_range, ListExpr) and not e.iter_range.elements
            and isinstance(e.loop_condition, Literal) and e.loop_condition.value is False
            and e.accu_var not in _ACCUMULATORS)


def estimate(checked: CheckedExpr, bounds: SizeBounds = DEFAULT_BOUNDS) -> Range:
    """The cost range of one evaluation over devices within `bounds`."""
    return _Coster(checked, bounds).cost(checked.expr)
