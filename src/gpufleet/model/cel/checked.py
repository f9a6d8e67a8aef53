"""The type-checked AST of an expression, read from the library's serialized `CheckedExpr`.

cel-expr-python compiles and evaluates but exposes no AST. Its `Expression.serialize()`
returns a `google.protobuf.Any` holding a `cel.expr.CheckedExpr` (cel-spec's
`checked.proto`/`syntax.proto`): the expanded expression tree, the type of every node and the
overloads the checker chose. The cost estimate (`cost.py`) and the literal validators
(`validate.py`) need exactly that, so this module decodes the protobuf wire format of those few
messages by hand (no generated code, no protobuf runtime): field numbers below are cel-spec's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Union

from gpufleet.model.errors import ModelError

# --- the tree -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant; `kind` is one of null, bool, int, uint, double, string, bytes."""

    id: int
    kind: str
    value: None | bool | int | float | str | bytes


@dataclass(frozen=True, slots=True)
class Ident:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    id: int
    operand: Expr
    field: str
    test_only: bool


@dataclass(frozen=True, slots=True)
class Call:
    id: int
    function: str
    target: Expr | None
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ListExpr:
    id: int
    elements: tuple[Expr, ...]
    optional_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """A map entry (`key` set) or a message field (`field` set)."""

    id: int
    key: Expr | None
    field: str
    value: Expr
    optional: bool


@dataclass(frozen=True, slots=True)
class MapExpr:
    id: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class StructExpr:
    id: int
    message_name: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Comprehension:
    id: int
    iter_var: str
    iter_var2: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr


Expr = Union[Literal, Ident, Select, Call, ListExpr, MapExpr, StructExpr, Comprehension]


@dataclass(frozen=True, slots=True)
class CelType:
    """A checked type. `kind` is dyn, null, bool, int, uint, double, string, bytes, any,
    timestamp, duration, list, map, function, message, type_param, type, error, wrapper or
    abstract; `name` holds the message, type-parameter or abstract type name."""

    kind: str
    params: tuple[CelType, ...] = ()
    name: str = ""

    def __str__(self) -> str:
        """The type as cel-go's `FormatCELType` writes it (used in validator messages)."""
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind == "null":
            return "null_type"
        if self.kind == "wrapper":
            return f"wrapper({self.params[0]})"
        if self.kind in ("message", "type_param"):
            return self.name
        if self.kind == "abstract":
            return self.name + (f"({', '.join(map(str, self.params))})" if self.params else "")
        if self.kind == "type":
            return f"type({self.params[0]})" if self.params else "type"
        if self.kind == "any":
            return "google.protobuf.Any"
        if self.kind == "timestamp":
            return "google.protobuf.Timestamp"
        if self.kind == "duration":
            return "google.protobuf.Duration"
        return self.kind


DYN = CelType("dyn")


@dataclass(frozen=True, slots=True)
class CheckedExpr:
    expr: Expr
    types: dict[int, CelType]
    overloads: dict[int, tuple[str, ...]]
    """Call node id -> the overload ids the checker kept (more than one for `dyn` arguments)."""

    def type_of(self, node: Expr) -> CelType:
        return self.types.get(node.id, DYN)


# --- the wire format ------------------------------------------------------------------------

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value): an int for varints, bytes otherwise."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            yield number, wire, buf[pos:pos + size]
            pos += size
        elif wire == _FIXED64:
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        elif wire == _FIXED32:
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _bytes(value: int | bytes) -> bytes:
    assert isinstance(value, bytes)
    return value


def _int(value: int | bytes) -> int:
    assert isinstance(value, int)
    return value


def _literal(node_id: int, buf: bytes) -> Literal:
    for number, _, value in _fields(buf):
        if number == 1:
            return Literal(node_id, "null", None)
        if number == 2:
            return Literal(node_id, "bool", bool(_int(value)))
        if number == 3:
            return Literal(node_id, "int", _int64(_int(value)))
        if number == 4:
            return Literal(node_id, "uint", _int(value))
        if number == 5:
            return Literal(node_id, "double", float(struct.unpack("<d", _bytes(value))[0]))
        if number == 6:
            return Literal(node_id, "string", _bytes(value).decode("utf-8"))
        if number == 7:
            return Literal(node_id, "bytes", _bytes(value))
    raise ValueError("unsupported constant (duration or timestamp literal)")


def _expr(buf: bytes) -> Expr:  # noqa: C901 - one branch per message, as in syntax.proto
    node_id = 0
    body: tuple[int, bytes] | None = None
    for number, _, value in _fields(buf):
        if number == 2:
            node_id = _int64(_int(value))
        elif 3 <= number <= 9:
            body = (number, _bytes(value))
    if body is None:
        raise ValueError("expression node without a kind")
    kind, data = body
    if kind == 3:
        return _literal(node_id, data)
    if kind == 4:
        return Ident(node_id, next((_bytes(v).decode() for n, _, v in _fields(data) if n == 1), ""))
    if kind == 5:
        operand: Expr | None = None
        field, test_only = "", False
        for number, _, value in _fields(data):
            if number == 1:
                operand = _expr(_bytes(value))
            elif number == 2:
                field = _bytes(value).decode()
            elif number == 3:
                test_only = bool(_int(value))
        assert operand is not None
        return Select(node_id, operand, field, test_only)
    if kind == 6:
        target: Expr | None = None
        function, args = "", []
        for number, _, value in _fields(data):
            if number == 1:
                target = _expr(_bytes(value))
            elif number == 2:
                function = _bytes(value).decode()
            elif number == 3:
                args.append(_expr(_bytes(value)))
        return Call(node_id, function, target, tuple(args))
    if kind == 7:
        elements, optional = [], []
        for number, wire, value in _fields(data):
            if number == 1:
                elements.append(_expr(_bytes(value)))
            elif number == 2:
                optional.extend(_packed_ints(wire, value))
        return ListExpr(node_id, tuple(elements), tuple(optional))
    if kind == 8:
        message_name, entries = "", []
        for number, _, value in _fields(data):
            if number == 1:
                message_name = _bytes(value).decode()
            elif number == 2:
                entries.append(_entry(_bytes(value)))
        if message_name:
            return StructExpr(node_id, message_name, tuple(entries))
        return MapExpr(node_id, tuple(entries))
    return _comprehension(node_id, data)


def _packed_ints(wire: int, value: int | bytes) -> list[int]:
    if wire == _VARINT:
        return [_int(value)]
    data, pos, out = _bytes(value), 0, []
    while pos < len(data):
        item, pos = _varint(data, pos)
        out.append(item)
    return out


def _entry(buf: bytes) -> Entry:
    entry_id, key, field, optional = 0, None, "", False
    value: Expr | None = None
    for number, _, raw in _fields(buf):
        if number == 1:
            entry_id = _int64(_int(raw))
        elif number == 2:
            field = _bytes(raw).decode()
        elif number == 3:
            key = _expr(_bytes(raw))
        elif number == 4:
            value = _expr(_bytes(raw))
        elif number == 5:
            optional = bool(_int(raw))
    assert value is not None
    return Entry(entry_id, key, field, value, optional)


def _comprehension(node_id: int, buf: bytes) -> Comprehension:
    names = {1: "", 3: "", 8: ""}
    parts: dict[int, Expr] = {}
    for number, _, value in _fields(buf):
        if number in names:
            names[number] = _bytes(value).decode()
        elif number in (2, 4, 5, 6, 7):
            parts[number] = _expr(_bytes(value))
    return Comprehension(node_id, names[1], names[8], parts[2], names[3], parts[4], parts[5], parts[6], parts[7])


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "timestamp", 3: "duration"}


def _type(buf: bytes) -> CelType:  # noqa: C901 - one branch per oneof case of Type
    for number, _, value in _fields(buf):
        if number == 1:
            return DYN
        if number == 2:
            return CelType("null")
        if number == 3:
            return CelType(_PRIMITIVES.get(_int(value), "dyn"))
        if number == 4:
            return CelType("wrapper", (CelType(_PRIMITIVES.get(_int(value), "dyn")),))
        if number == 5:
            return CelType(_WELL_KNOWN.get(_int(value), "dyn"))
        if number == 6:
            elem = next((_type(_bytes(v)) for n, _, v in _fields(_bytes(value)) if n == 1), DYN)
            return CelType("list", (elem,))
        if number == 7:
            key, val = DYN, DYN
            for n, _, v in _fields(_bytes(value)):
                if n == 1:
                    key = _type(_bytes(v))
                elif n == 2:
                    val = _type(_bytes(v))
            return CelType("map", (key, val))
        if number == 8:
            return CelType("function")
        if number == 9:
            return CelType("message", name=_bytes(value).decode())
        if number == 10:
            return CelType("type_param", name=_bytes(value).decode())
        if number == 11:
            data = _bytes(value)
            return CelType("type", (_type(data),) if data else ())
        if number == 12:
            return CelType("error")
        if number == 14:
            name, params = "", []
            for n, _, v in _fields(_bytes(value)):
                if n == 1:
                    name = _bytes(v).decode()
                elif n == 2:
                    params.append(_type(_bytes(v)))
            return CelType("abstract", tuple(params), name)
    return DYN


def _map_entry(buf: bytes) -> tuple[int, bytes]:
    key, value = 0, b""
    for number, _, raw in _fields(buf):
        if number == 1:
            key = _int64(_int(raw))
        elif number == 2:
            value = _bytes(raw)
    return key, value


def decode(serialized: bytes, where: str) -> CheckedExpr:
    """Decode `Expression.serialize()` of a checked expression."""
    try:
        payload = next((_bytes(v) for n, _, v in _fields(serialized) if n == 2), b"")
        expr: Expr | None = None
        types: dict[int, CelType] = {}
        overloads: dict[int, tuple[str, ...]] = {}
        for number, _, value in _fields(payload):
            if number == 4:
                expr = _expr(_bytes(value))
            elif number == 3:
                node, data = _map_entry(_bytes(value))
                types[node] = _type(data)
            elif number == 2:
                node, data = _map_entry(_bytes(value))
                ids = tuple(_bytes(v).decode() for n, _, v in _fields(data) if n == 3)
                if ids:
                    overloads[node] = ids
        if expr is None:
            raise ValueError("no expression")
    except (ValueError, IndexError, AssertionError, UnicodeDecodeError, KeyError, struct.error) as exc:
        raise ModelError(where, f"internal error reading the checked expression: {exc}") from None
    return CheckedExpr(expr, types, overloads)


def decode_parsed(serialized: bytes, where: str) -> Expr:
    """Decode `Expression.serialize()` of an expression compiled with `disable_check=True`."""
    try:
        payload = next((_bytes(v) for n, _, v in _fields(serialized) if n == 2), b"")
        data = next((_bytes(v) for n, _, v in _fields(payload) if n == 2), None)
        if data is None:
            raise ValueError("no expression")
        return _expr(data)
    except (ValueError, IndexError, AssertionError, UnicodeDecodeError, KeyError, struct.error) as exc:
        raise ModelError(where, f"internal error reading the parsed expression: {exc}") from None


def children(node: Expr) -> Iterator[Expr]:
    """The direct sub-expressions of `node`."""
    if isinstance(node, Select):
        yield node.operand
    elif isinstance(node, Call):
        if node.target is not None:
            yield node.target
        yield from node.args
    elif isinstance(node, ListExpr):
        yield from node.elements
    elif isinstance(node, (MapExpr, StructExpr)):
        for entry in node.entries:
            if entry.key is not None:
                yield entry.key
            yield entry.value
    elif isinstance(node, Comprehension):
        yield from (node.iter_range, node.accu_init, node.loop_condition, node.loop_step, node.result)


def walk(node: Expr) -> Iterator[Expr]:
    """`node` and all its descendants, parents first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))
