"""`compile_selector` and `Selector`: Kubernetes' `CompileCELExpression` and `DeviceMatches`.

Compiling checks the expression in the checking environment (`environment.py`), applies
Kubernetes' validators (`validate.py`) and admission limits (10 KiB, estimated cost at most
1,000,000: `cost.py`), and deserializes the checked expression into the evaluation
environment once. `Selector.matches` then only builds the `device` variables and evaluates.

Two Kubernetes behaviours need help from outside the library:

* An unknown domain is an empty map (`compile.go`, `mapper.Find`), but a library map lookup
  fails. Domains the expression looks up by constant are added as empty maps before
  evaluating, when the expression only ever looks domains up (`_[_]`, `_[?_]`, `.`, `.?`,
  `has()`); otherwise, and for computed keys, a "no such key" error for a key that is not a
  domain adds it as an empty map and evaluates again (a key that was not a domain fails the
  same way again and is reported). The one difference: an expression that both enumerates
  the domains (`in`, `size()`, macros, equality over `device.attributes`) and looks up a
  missing one by a computed key or through `cel.bind` sees the added domain in the retry.
* The runtime cost limit: cel-cpp has no cost tracker. A device within Kubernetes' API
  limits cannot exceed the estimate already checked at compile time (Kubernetes' estimate
  bounds the actual cost; its tests assert so). A device beyond those limits is estimated
  again with its own sizes, and refused if that worst case exceeds the limit, so the check
  can refuse an evaluation that Kubernetes, counting actual steps, would finish.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel

from gpufleet.model.cel import cost, environment, quantity, semver, validate
from gpufleet.model.cel.checked import Call, CheckedExpr, Ident, Literal, Select, decode, decode_parsed, walk
from gpufleet.model.cel.device import MAX_COST, MAX_EXPRESSION_BYTES, DeviceFacts, Version
from gpufleet.model.cel.errors import CelError, compile_message, missing_key, runtime_message

_INT64 = 2**63
_MAX_RETRIES = 16
_LOOKUPS = ("_[_]", "_[?_]", "_?._")
_LIMITS = cost.DEFAULT_BOUNDS.astuple()


def compile_selector(expression: str, where: str) -> Selector:
    """Compile once. Raises CelError naming `where` for a syntax or type error, a result that
    is not bool, an expression over 10 KiB, or an estimated cost over the limit."""
    size = len(expression.encode("utf-8", "surrogatepass"))
    if size > MAX_EXPRESSION_BYTES:
        raise CelError(where, f"Too long: may not be more than {MAX_EXPRESSION_BYTES} bytes (is {size})")
    try:
        compiled = environment.check_env().compile(expression)
    except (RuntimeError, ValueError) as exc:
        raise CelError(where, "compilation failed: " + _device_presence_test(expression, where)
                       + compile_message(str(exc))) from None
    serialized = compiled.serialize()
    checked = decode(serialized, where)
    problem = validate.output_type_problem(checked)
    problems = [_device_presence_test(expression, where) + problem] if problem else []
    problems += validate.literal_problems(checked) + validate.pattern_problems(checked)
    if problems:
        raise CelError(where, "compilation failed: " + "; ".join(problems))
    estimate = cost.estimate(checked)
    if estimate.max > MAX_COST:
        raise CelError(where, f"too complex, exceeds cost limit (estimated cost {estimate.max}, limit {MAX_COST})")
    try:
        program = environment.runtime_env().deserialize(serialized)
    except (RuntimeError, ValueError) as exc:
        raise CelError(where, "program instantiation failed: " + compile_message(str(exc))) from None
    return Selector(expression, where, program, checked, estimate.max)


def _device_presence_test(expression: str, where: str) -> str:
    """An explanation when the expression tests `has(device.<field>)`: cel-cpp resolves
    `device.<field>` as one identifier and drops the test, so the checker then reports a
    type error; in Kubernetes the test is always true (every field is set)."""
    try:
        parsed = decode_parsed(environment.check_env().compile(expression, disable_check=True).serialize(), where)
    except (RuntimeError, ValueError):
        return ""
    for node in walk(parsed):
        if (isinstance(node, Select) and node.test_only and isinstance(node.operand, Ident)
                and node.operand.name == "device"):
            return (f"has(device.{node.field}) is not supported here (in Kubernetes it is always true "
                    "for a declared field): drop it; ")
    return ""


class Selector:
    """A compiled device selector; immutable, and safe to share across scheduling cycles."""

    __slots__ = ("expression", "where", "max_cost", "_program", "_checked", "_padding", "_estimates")

    def __init__(self, expression: str, where: str, program: cel.Expression, checked: CheckedExpr,
                 max_cost: int) -> None:
        self.expression = expression
        self.where = where
        self.max_cost = max_cost
        """Kubernetes' worst-case cost estimate (`CompilationResult.MaxCost`)."""
        self._program = program
        self._checked = checked
        self._padding = _constant_lookups(checked)
        self._estimates: dict[cost.SizeBounds, int] = {}

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"

    def matches(self, device: DeviceFacts) -> bool:
        """Whether `device` is selected. Raises CelError (`where` and a Kubernetes-like
        message) on a runtime error: no such key, a bad `quantity()` argument, the cost
        limit, ..."""
        attributes, capacity, bounds = self._variables(device)
        if bounds is not cost.DEFAULT_BOUNDS:
            worst = self._estimates.get(bounds)
            if worst is None:
                worst = self._estimates[bounds] = cost.estimate(self._checked, bounds).max
            if worst > MAX_COST:
                raise CelError(self.where, f"cost limit exceeded: this device is larger than Kubernetes' API "
                                           f"limits, and for its sizes the worst-case cost is {worst} "
                                           f"(limit {MAX_COST})")
        for domain in self._padding[0]:
            attributes.setdefault(domain, {})
        for domain in self._padding[1]:
            capacity.setdefault(domain, {})
        data = {environment.DRIVER: device.driver, environment.ALLOW_MULTIPLE: device.allow_multiple_allocations,
                environment.ATTRIBUTES: attributes, environment.CAPACITY: capacity}
        for _ in range(_MAX_RETRIES):
            try:
                result = self._program.eval(data=data)
            except (RuntimeError, ValueError, TypeError) as exc:
                raise CelError(self.where, runtime_message(str(exc))) from None
            kind = result.type()
            if kind == cel.Type.BOOL:
                return bool(result.value())
            if kind != cel.Type.ERROR:
                raise CelError(self.where, f"CEL result of type {_type_name(kind)} could not be converted to bool")
            message = str(result.value())
            key = missing_key(message)
            if key is None or (key in attributes and key in capacity):
                raise CelError(self.where, runtime_message(message))
            attributes.setdefault(key, {})  # an unknown domain is an empty map
            capacity.setdefault(key, {})
        raise CelError(self.where, runtime_message(message))

    def _variables(self, device: DeviceFacts) -> tuple[dict[str, Any], dict[str, Any], cost.SizeBounds]:
        """`device.attributes` and `device.capacity` as runtime values, and the device's sizes
        (Kubernetes' limits unless it exceeds them)."""
        names = longest_value = longest_name = longest_domain = 0
        attributes: dict[str, Any] = {}
        for domain, values in device.attributes.items():
            converted = dict(values)
            for name, value in values.items():
                kind = type(value)
                if kind is str:
                    longest_value = max(longest_value, len(value))  # type: ignore[arg-type]
                elif kind is not bool:
                    converted[name] = self._attribute(domain, name, value)
            attributes[domain] = converted
            if values:
                names, longest_name = max(names, len(values)), max(longest_name, max(map(len, values)))
            longest_domain = max(longest_domain, len(domain))
        capacity: dict[str, Any] = {}
        for domain, amounts in device.capacity.items():
            capacity[domain] = {name: quantity.encode_amount(amount) for name, amount in amounts.items()}
            if amounts:
                names, longest_name = max(names, len(amounts)), max(longest_name, max(map(len, amounts)))
            longest_domain = max(longest_domain, len(domain))
        sizes = (max(len(attributes), len(capacity)), names, longest_value, longest_name, longest_domain,
                 len(device.driver))
        if all(size <= limit for size, limit in zip(sizes, _LIMITS)):
            return attributes, capacity, cost.DEFAULT_BOUNDS
        return attributes, capacity, cost.DEFAULT_BOUNDS.widened(cost.SizeBounds(*sizes))

    def _attribute(self, domain: str, name: str, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if not -_INT64 <= value < _INT64:
                raise CelError(self.where, f"attribute {domain}/{name}: {value} does not fit in an int64")
            return value
        if isinstance(value, Version):
            try:
                return semver.encode_text(value.text)
            except semver.SemverError as exc:
                raise CelError(self.where, f"attribute {domain}/{name}: parse semantic version: {exc}") from None
        raise CelError(self.where, f"attribute {domain}/{name}: unsupported attribute value {value!r}")


def _type_name(kind: cel.Type) -> str:
    return str(kind.name()).split("<", 1)[0].lower()


def _constant_lookups(checked: CheckedExpr) -> tuple[frozenset[str], frozenset[str]]:
    """Domains of `device.attributes` and `device.capacity` that are safe to add as empty maps
    before evaluating: looked up by a constant, in an expression that uses the map for
    nothing but lookups (see the module docstring)."""
    keys: dict[str, set[str]] = {environment.ATTRIBUTES: set(), environment.CAPACITY: set()}
    lookups: set[int] = set()
    for node in walk(checked.expr):
        operand, key = None, None
        if isinstance(node, Select):
            operand, key = node.operand, node.field
        elif isinstance(node, Call) and node.function in _LOOKUPS and len(node.args) == 2 and node.target is None:
            operand = node.args[0]
            if isinstance(node.args[1], Literal) and isinstance(node.args[1].value, str):
                key = node.args[1].value
        if isinstance(operand, Ident) and operand.name in keys:
            lookups.add(operand.id)
            if key is not None:
                keys[operand.name].add(key)
    observed = {node.name for node in walk(checked.expr)
                if isinstance(node, Ident) and node.name in keys and node.id not in lookups}
    return (frozenset() if environment.ATTRIBUTES in observed else frozenset(keys[environment.ATTRIBUTES]),
            frozenset() if environment.CAPACITY in observed else frozenset(keys[environment.CAPACITY]))
