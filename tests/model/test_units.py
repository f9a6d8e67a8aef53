"""Kubernetes quantities become integer base units once, at the edge; anything inexact is an error."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.model import ModelError
from gpufleet.model.units import count, cpu_milli, mem_mib, non_negative_int, parse_quantity


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", Decimal("0.5")),
    ("2", Decimal(2)),
    ("1Ki", Decimal(1024)),
    ("2Gi", Decimal(2 * 2**30)),
    ("1k", Decimal(1000)),
    ("1M", Decimal(10**6)),
    ("1e3", Decimal(1000)),
    ("  3  ", Decimal(3)),
    (7, Decimal(7)),
], ids=[
    "a milli suffix divides by a thousand",
    "a bare number is itself",
    "Ki is 1024",
    "Gi is a binary gigabyte",
    "k is a decimal thousand",
    "M is a decimal million",
    "an exponent is accepted",
    "surrounding blanks are ignored",
    "an int passes through",
])
def test_parse_quantity(text: str | int, expected: Decimal) -> None:
    assert parse_quantity(text, "field") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", 500), ("2", 2000), (2, 2000), ("1.5", 1500), ("0", 0), ("1k", 1_000_000),
], ids=[
    "500m is 500 milli-cores", "2 cores are 2000 milli", "an int counts cores",
    "1.5 cores are 1500 milli", "zero is allowed", "a k suffix multiplies",
])
def test_cpu_milli(text: str | int, expected: int) -> None:
    assert cpu_milli(text, "pod p: cpu") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("2Gi", 2048), ("1Mi", 1), ("0", 0), ("1", 1), ("1025Ki", 2), ("1M", 1), ("1G", 954), ("2m", 1),
], ids=[
    "2Gi is 2048 MiB",
    "1Mi is 1 MiB",
    "zero is zero",
    "a single byte needs a whole MiB",
    "a partial MiB rounds up",
    "a decimal megabyte rounds up to 1 MiB",
    "a decimal gigabyte is 953.67 MiB, rounded up",
    "a fraction of a byte still rounds up",
])
def test_mem_mib_rounds_up(text: str, expected: int) -> None:
    assert mem_mib(text, "pod p: memory") == expected


@pytest.mark.parametrize(("text", "expected"), [("2", 2), (4, 4), ("1k", 1000), ("0", 0)],
                         ids=["a string count", "an int count", "a suffixed count", "zero"])
def test_count(text: str | int, expected: int) -> None:
    assert count(text, "pod p: nvidia.com/gpu") == expected


@pytest.mark.parametrize(("parse", "value", "problem"), [
    (count, "1.5", "'1.5' is not a whole number of units"),
    (count, "-1", "'-1' is negative"),
    (cpu_milli, "0.5m", "'0.5m' is not a whole number of milli-cores"),
    (cpu_milli, "-250m", "'-250m' is negative"),
    (mem_mib, "-1Gi", "'-1Gi' is negative"),
    (cpu_milli, "abc", "'abc' is not a quantity"),
    (cpu_milli, "", "'' is not a quantity"),
    (cpu_milli, "Gi", "'Gi' is not a quantity"),
    (mem_mib, "inf", "'inf' is not a finite quantity"),
    (cpu_milli, True, "expected a quantity, got True"),
    (cpu_milli, 1.5, "expected a quantity, got 1.5"),
], ids=[
    "1.5 GPUs is an error, not a rounding",
    "a negative count is an error",
    "half a milli-core is an error",
    "negative CPU is an error",
    "negative memory is an error",
    "garbage is not a quantity",
    "an empty string is not a quantity",
    "a bare suffix is not a quantity",
    "infinity is not a finite quantity",
    "a bool is not a quantity",
    "a float is not a quantity",
])
def test_bad_quantities_name_the_field(parse: object, value: object, problem: str) -> None:
    with pytest.raises(ModelError) as err:
        parse(value, "pod default/p: requests")  # type: ignore[operator]
    assert err.value.where == "pod default/p: requests"
    assert err.value.problem == problem
    assert str(err.value) == f"pod default/p: requests: {problem}"


@pytest.mark.parametrize(("value", "problem"), [
    (-1, "-1 is negative"), (1.0, "expected a whole number, got 1.0"),
    (True, "expected a whole number, got True"), ("3", "expected a whole number, got '3'"),
], ids=["a negative int", "a float even if whole", "a bool", "a string"])
def test_non_negative_int_rejects(value: object, problem: str) -> None:
    with pytest.raises(ModelError) as err:
        non_negative_int(value, "trace row 3: gpu_milli")
    assert (err.value.where, err.value.problem) == ("trace row 3: gpu_milli", problem)


def test_non_negative_int_accepts_zero_and_positive() -> None:
    assert [non_negative_int(v, "x") for v in (0, 5)] == [0, 5]
