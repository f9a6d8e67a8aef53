"""Kubernetes' CEL quantity library (`k8s.io/apiserver/pkg/cel/library/quantity.go`), shimmed.

cel-expr-python cannot carry a Python object through an evaluation as an opaque value, so a
quantity travels as `bytes`: a tag (no NUL byte: cel-expr-python cuts a returned `bytes` at
the first one) and the value as an integer number of nano-units, the finest unit a Kubernetes
quantity holds (`ParseQuantity` rounds anything finer up, away from zero). Equal quantities
are equal bytes, so CEL's `==` and `in` agree with Kubernetes' `Quantity.Equal`
(`quantity("1000m") == quantity("1")`); the type checker sees the abstract type
`kubernetes.Quantity` (`environment.py`), so no expression can treat one as bytes.

`quantity()` accepts what apimachinery's `parseQuantityString` accepts (so not
`gpufleet.model.units.parse_quantity`, which trims spaces, reads "1_000" and stops at 2^63-1,
where Kubernetes keeps any size) and caps binary-suffixed values at 2^63-1 as `ParseQuantity`
does. Where this differs from Kubernetes: a quantity of 10^60 or more is an error here, and
`asApproximateFloat` is the correctly rounded double, which may differ from Kubernetes' in
the last bit.
"""

from __future__ import annotations

from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Decimal, localcontext
from functools import lru_cache

TAG = b"\xffkubernetes.Quantity:"
NANO = 10**9
_INT64 = 2**63
_MAX_BINARY = Decimal(2**63 - 1)
_LARGEST_EXPONENT = 60
_SUFFIX_CHARS = "eEinumkKMGTP"
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
ERR_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
ERR_SUFFIX = "unable to parse quantity's suffix"

Raw = bytes | bytearray
"""A runtime value as cel-expr-python hands it to a function (`bytearray`) or gets it (`bytes`)."""


class QuantityError(ValueError):
    """A runtime error of the quantity library; its text is Kubernetes'."""


def _split(text: str) -> tuple[str, str]:
    """(number, suffix) as apimachinery's `parseQuantityString` splits them."""
    pos, end = 0, len(text)
    if pos < end and text[0] in "+-":
        pos += 1
    while pos < end and text[pos].isascii() and text[pos].isdigit():
        pos += 1
    if pos < end and text[pos] == ".":
        pos += 1
        while pos < end and text[pos].isascii() and text[pos].isdigit():
            pos += 1
    number, suffix_start = text[:pos], pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isascii() and text[pos].isdigit():
        pos += 1
    if pos != end:
        raise QuantityError(ERR_FORMAT)
    suffix = text[suffix_start:]
    if suffix not in _BINARY and suffix not in _DECIMAL and not _is_exponent(suffix):
        raise QuantityError(ERR_SUFFIX)
    return number, suffix


def _is_exponent(suffix: str) -> bool:
    if len(suffix) < 2 or suffix[0] not in "eE":
        return False
    digits = suffix[2:] if suffix[1] in "+-" else suffix[1:]
    return digits.isascii() and digits.isdigit()


def to_nanos(amount: Decimal) -> int:
    """A value in base units as whole nano-units, rounded up away from zero like Kubernetes."""
    with localcontext() as ctx:
        ctx.prec, ctx.Emin, ctx.Emax = 100, MIN_EMIN, MAX_EMAX
        return int((amount * NANO).to_integral_value(rounding=ROUND_UP))


@lru_cache(maxsize=4096)
def parse(text: str) -> int:
    """`quantity(text)` in nano-units; raises QuantityError with Kubernetes' message."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    number, suffix = _split(text)
    if not any(ch.isdigit() for ch in number):
        return 0  # apimachinery reads "+", "." and "e3" as zero
    with localcontext() as ctx:
        ctx.prec, ctx.Emin, ctx.Emax = 100, MIN_EMIN, MAX_EMAX
        amount = Decimal(number)
        if suffix in _BINARY:
            amount = amount * (2 ** _BINARY[suffix])
            if abs(amount) > _MAX_BINARY:
                amount = _MAX_BINARY.copy_sign(amount)
        else:
            exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
            # Beyond +-100 the value is too large or rounds up to one nano-unit anyway.
            amount = amount.scaleb(max(-100, min(exponent, 100)))
        if amount and amount.adjusted() >= _LARGEST_EXPONENT:
            raise QuantityError(f"{text!r} is too large (at most 10^{_LARGEST_EXPONENT} here)")
    return to_nanos(amount)


def encode(nanos: int) -> bytes:
    return TAG + str(nanos).encode()


@lru_cache(maxsize=4096)
def encode_amount(amount: Decimal) -> bytes:
    """A capacity value (base units) as the runtime value of a quantity."""
    return encode(to_nanos(amount))


def decode(value: Raw) -> int:
    if not value.startswith(TAG):
        raise QuantityError("no such overload")
    return int(value[len(TAG):])


def is_quantity(value: object) -> bool:
    return isinstance(value, (bytes, bytearray)) and value.startswith(TAG)


# --- the library's functions (runtime side) -------------------------------------------------

def quantity(text: str) -> bytes:
    return encode(parse(text))


def is_quantity_string(text: str) -> bool:
    try:
        parse(text)
    except QuantityError:
        return False
    return True


def sign(value: Raw) -> int:
    nanos = decode(value)
    return (nanos > 0) - (nanos < 0)


def as_integer(value: Raw) -> int:
    nanos = decode(value)
    whole, rest = divmod(nanos, NANO)
    if rest or not -_INT64 <= whole < _INT64:
        raise QuantityError("cannot convert value to integer")
    return whole


def is_integer(value: Raw) -> bool:
    nanos = decode(value)
    whole, rest = divmod(nanos, NANO)
    return not rest and -_INT64 <= whole < _INT64


def as_approximate_float(value: Raw) -> float:
    return decode(value) / NANO


def add(value: Raw, other: Raw | int) -> bytes:
    delta = other * NANO if isinstance(other, int) else decode(other)
    return encode(decode(value) + delta)


def sub(value: Raw, other: Raw | int) -> bytes:
    delta = other * NANO if isinstance(other, int) else decode(other)
    return encode(decode(value) - delta)


def compare(value: Raw, other: Raw) -> int:
    left, right = decode(value), decode(other)
    return (left > right) - (left < right)
