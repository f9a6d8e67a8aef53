"""Parsing Kubernetes quantities into integer base units, once, at the edge.

CPU is held in milli-cores, memory in MiB, GPUs in GPU-milli (1000 = one whole GPU).
Floats never enter capacity arithmetic: a quantity that does not land on a whole base
unit (for example 0.5m CPU or 1.5 GPUs) is an error, not a rounding.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from gpufleet.model.errors import ModelError

MAX_QUANTITY = Decimal(2**63 - 1)
"""The largest quantity in base units (bytes, cores, devices), as Kubernetes' int64 holds it."""
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}


def parse_quantity(value: str | int, where: str) -> Decimal:
    """Parse a Kubernetes quantity ("500m", "2", "1Gi", "1e3") into a Decimal of base units."""
    if isinstance(value, bool):
        raise ModelError(where, f"expected a quantity, got {value!r}")
    if isinstance(value, int):
        return _bounded(Decimal(value), value, where)
    if not isinstance(value, str):
        raise ModelError(where, f"expected a quantity, got {value!r}")
    text = value.strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _bounded(_number(text[: -len(suffix)], value, where) * factor, value, where)
    suffix = text[-1:] if text[-1:] in _DECIMAL and not text[-1:].isdigit() else ""
    number = text[: len(text) - len(suffix)]
    return _bounded(_number(number, value, where) * _DECIMAL[suffix], value, where)


def _bounded(amount: Decimal, original: str | int, where: str) -> Decimal:
    """Kubernetes holds a quantity in an int64 (of milli-units at most), so it never exceeds
    MAX_QUANTITY; without this bound `1e999999999` would be built as a billion-digit integer."""
    if abs(amount) > MAX_QUANTITY:
        raise ModelError(where, f"{_short(original)} is too large (at most {MAX_QUANTITY:.3e})")
    return amount


def _short(value: str | int) -> str:
    if isinstance(value, int) and value.bit_length() > 128:  # repr() refuses over 4,300 digits
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _number(text: str, original: str, where: str) -> Decimal:
    try:
        result = Decimal(text)
    except InvalidOperation:
        raise ModelError(where, f"{original!r} is not a quantity") from None
    if not result.is_finite():
        raise ModelError(where, f"{original!r} is not a finite quantity")
    if result.adjusted() > 30:  # 1e999999999: scaling it would overflow Decimal's own context
        raise ModelError(where, f"{_short(original)} is too large (at most {MAX_QUANTITY:.3e})")
    return result


def _whole(amount: Decimal, original: str | int, where: str, unit: str) -> int:
    if amount < 0:
        raise ModelError(where, f"{original!r} is negative")
    if amount != amount.to_integral_value():
        raise ModelError(where, f"{original!r} is not a whole number of {unit}")
    return int(amount)


def cpu_milli(value: str | int, where: str) -> int:
    """CPU quantity -> milli-cores ("250m" -> 250, "2" -> 2000)."""
    return _whole(parse_quantity(value, where) * 1000, value, where, "milli-cores")


def mem_mib(value: str | int, where: str) -> int:
    """Memory quantity in bytes -> MiB, rounded up (a request of 1 byte needs 1 MiB)."""
    amount = parse_quantity(value, where)
    if amount < 0:
        raise ModelError(where, f"{value!r} is negative")
    whole, rest = divmod(amount, 2**20)  # Decimal `//` truncates toward zero: round up by hand
    return int(whole) + (1 if rest else 0)


def count(value: str | int, where: str) -> int:
    """A whole count such as `nvidia.com/gpu: 2`; "1.5" is an error."""
    return _whole(parse_quantity(value, where), value, where, "units")


def non_negative_int(value: object, where: str) -> int:
    """An integer already in base units (trace columns, builders); rejects bools and floats."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(where, f"expected a whole number, got {value!r}")
    if value < 0:
        raise ModelError(where, f"{value!r} is negative")
    return value
