"""DRA device selectors: limits, errors that name their object, compile once / evaluate many,
and the DRA semantics the library needs help with (unknown domains, quantities, versions).
Kubernetes' own cases are in test_cel_conformance.py."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpufleet.model.cel as cel_api
from gpufleet.model.cel import (MAX_COST, MAX_EXPRESSION_BYTES, CelError, DeviceFacts, Version,
                                compile_selector, environment)

WHERE = "DeviceClass gpu.example.com: spec.selectors[0].cel.expression"
GPU = DeviceFacts(
    driver="gpu.example.com",
    attributes={"gpu.example.com": {"model": "H100", "index": 3, "mig": False, "driverVersion": Version("550.54.15")}},
    capacity={"gpu.example.com": {"memory": Decimal(80 * 2**30), "cores": Decimal("0.5")}},
)
NIC = DeviceFacts(driver="nic.example.com", attributes={"nic.example.com": {"speed": 100}})


def test_the_public_api_is_pinned() -> None:
    assert sorted(cel_api.__all__) == ["AttributeValue", "CelError", "DeviceFacts", "MAX_COST",
                                       "MAX_EXPRESSION_BYTES", "Selector", "Version", "compile_selector"]


# --- limits -------------------------------------------------------------------------------

def test_an_expression_of_exactly_10_kib_compiles_and_one_byte_more_does_not() -> None:
    assert MAX_EXPRESSION_BYTES == 10240
    exact = "true" + " " * (MAX_EXPRESSION_BYTES - 4)
    assert compile_selector(exact, WHERE).matches(GPU) is True
    with pytest.raises(CelError, match="Too long: may not be more than 10240 bytes") as caught:
        compile_selector(exact + " ", WHERE)
    assert caught.value.where == WHERE


def test_the_length_limit_counts_utf8_bytes_not_characters() -> None:
    # 5,000 two-byte characters in a string literal: 10,000 + 8 bytes, under 5,100 characters.
    expression = '"' + "é" * 5000 + '" != ""' + " " * (MAX_EXPRESSION_BYTES - 10_008 + 1)
    assert len(expression) < MAX_EXPRESSION_BYTES
    with pytest.raises(CelError, match="Too long"):
        compile_selector(expression, WHERE)


def test_the_estimated_cost_limit_rejects_at_compile_time() -> None:
    # Nested iterations over one domain's attributes (at most 32, Kubernetes' limit): three
    # levels stay under 1,000,000, four do not.
    three = 'cel.bind(a, device.attributes["gpu.example.com"], a.all(x, a.all(y, a.all(z, x + y + z != ""))))'
    selector = compile_selector(three, WHERE)
    assert selector.max_cost == 758_959
    assert selector.matches(GPU) is True
    four = ('cel.bind(a, device.attributes["gpu.example.com"], '
            'a.all(w, a.all(x, a.all(y, a.all(z, w + x + y + z != "")))))')
    with pytest.raises(CelError, match="too complex, exceeds cost limit") as caught:
        compile_selector(four, WHERE)
    assert caught.value.where == WHERE


def test_a_device_beyond_the_api_limits_is_refused_when_its_worst_case_exceeds_the_cost_limit() -> None:
    selector = compile_selector(
        'cel.bind(a, device.attributes["d.example.com"], a.all(x, a.all(y, x == y || x != y)))', WHERE)
    within = DeviceFacts("d.example.com", {"d.example.com": {f"a{i}": i for i in range(32)}})
    assert selector.matches(within) is True
    beyond = DeviceFacts("d.example.com", {"d.example.com": {f"a{i}": i for i in range(600)}})
    with pytest.raises(CelError, match="cost limit exceeded") as caught:
        selector.matches(beyond)
    assert caught.value.where == WHERE
    # An expression whose cost does not grow with the device still evaluates.
    assert compile_selector('device.driver == "d.example.com"', WHERE).matches(beyond) is True


# --- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "message"), [
    ("device.driver", "must evaluate to bool or the unknown type, not string"),
    ('device.capacity["gpu.example.com"].memory', "must evaluate to bool or the unknown type, not kubernetes.Quantity"),
    ("device.driver ==", "Syntax error"),
    ('device.driver == 1', "found no matching overload for '_==_'"),
    ("device.nosuchfield", "undeclared reference to 'device.nosuchfield'"),
    ('[1, "a"].size() == 2', "expected type 'int' but found 'string'"),
    ('device.driver.matches("[")', "invalid matches argument"),
    ('device.driver.find("(") == ""', "error parsing regexp"),
    ('duration("1x") > duration("1s")', "invalid duration argument"),
    ('device.capacity["gpu.example.com"].memory == b"x"', "found no matching overload"),
    ("has(device.driver)", "has(device.driver) is not supported here"),
    ("sets.contains([1], [1])", "undeclared reference to 'sets'"),
], ids=[
    "a string result is rejected at compile time",
    "a quantity result is rejected at compile time",
    "a syntax error",
    "a type error",
    "an unknown device field",
    "a mixed list literal (Kubernetes' homogeneous-literal validator)",
    "an invalid constant regex for matches",
    "an invalid constant regex for find (compiled with the program in Kubernetes)",
    "an invalid duration literal",
    "a quantity is not bytes to the type checker",
    "has() on a device field, which cel-cpp cannot check",
    "an extension outside the supported set",
])
def test_compile_errors_name_where_and_what(expression: str, message: str) -> None:
    with pytest.raises(CelError) as caught:
        compile_selector(expression, WHERE)
    assert caught.value.where == WHERE
    assert str(caught.value).startswith(WHERE + ": ")
    assert message in caught.value.problem


@pytest.mark.parametrize(("expression", "device", "message"), [
    ('device.attributes["gpu.example.com"].color == "red"', GPU, "no such key: color"),
    ('device.attributes["gpu.example.com"].model', NIC, "no such key: model"),
    ('sign(quantity(device.attributes["gpu.example.com"].model)) == 1', GPU,
     "quantities must match the regular expression"),
    ('device.attributes["gpu.example.com"].index / 0 == 1', GPU, "division by zero"),
    ('device.attributes["gpu.example.com"].index', GPU, "CEL result of type int could not be converted to bool"),
    ('device.attributes["gpu.example.com"].model.find(device.attributes["gpu.example.com"].model + "[") == ""', GPU,
     "Illegal regex"),
    ('device.attributes["gpu.example.com"].model.compareTo(quantity("1")) == 0', GPU, "no such overload"),
], ids=[
    "an unknown attribute of a known domain",
    "an unknown attribute of an unknown domain",
    "a bad quantity() argument",
    "division by zero",
    "an int result",
    "an invalid regex built at run time",
    "a string is not a quantity",
])
def test_runtime_errors_name_where_and_read_like_kubernetes(expression: str, device: DeviceFacts, message: str) -> None:
    selector = compile_selector(expression, WHERE)
    with pytest.raises(CelError) as caught:
        selector.matches(device)
    assert caught.value.where == WHERE
    assert message in caught.value.problem


def test_an_invalid_version_attribute_is_an_evaluation_error_naming_the_attribute() -> None:
    device = DeviceFacts("gpu.example.com", {"gpu.example.com": {"driverVersion": Version("550.54")}})
    with pytest.raises(CelError, match="attribute gpu.example.com/driverVersion: parse semantic version: "
                                       "No Major.Minor.Patch elements found"):
        compile_selector("true", WHERE).matches(device)


# --- compile once, evaluate many ------------------------------------------------------------

def test_a_selector_compiles_once_and_evaluates_many_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    selector = compile_selector(
        'device.driver == "gpu.example.com" && '
        'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', WHERE)

    def no_compiling() -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(environment, "check_env", no_compiling)
    small = DeviceFacts("gpu.example.com", capacity={"gpu.example.com": {"memory": Decimal(24 * 2**30)}})
    results = [selector.matches(device) for device in (GPU, NIC, small, GPU, NIC) * 100]
    assert results == [True, False, False, True, False] * 100


def test_filling_in_an_unknown_domain_does_not_leak_into_the_next_evaluation() -> None:
    selector = compile_selector('"x.example.com" in device.attributes || '
                                'device.attributes[device.driver].?model.orValue("") == "H100"', WHERE)
    bare = DeviceFacts("x.example.com")
    assert selector.matches(bare) is True  # "x.example.com" in {} is false; the lookup pads it
    assert selector.matches(DeviceFacts("y.example.com")) is False
    assert selector.matches(GPU) is True


# --- DRA semantics --------------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "device", "expected"), [
    ('has(device.attributes["gpu.example.com"].model)', NIC, False),
    ('device.attributes["gpu.example.com"].?model.orValue("none") == "none"', NIC, True),
    ('device.attributes[?"gpu.example.com"].hasValue()', NIC, True),
    ('device.attributes[device.driver].?speed.orValue(0) >= 100', NIC, True),
    ('device.attributes[device.driver].?speed.orValue(0) >= 100', GPU, False),
    ('device.capacity["gpu.example.com"].size() == 0', NIC, True),
    ('"gpu.example.com" in device.attributes', NIC, False),
    ("size(device.attributes) == 1", NIC, True),
], ids=[
    "has() on an unknown domain is false, not an error",
    "optional selection on an unknown domain takes the default",
    "an optional index of an unknown domain is present, as with Kubernetes' Find",
    "a computed domain lookup is filled in at run time (known domain)",
    "a computed domain lookup is filled in at run time (unknown domain)",
    "an unknown capacity domain is an empty map",
    "in does not see domains the device lacks",
    "size() counts the device's own domains only",
])
def test_unknown_domains_are_empty_maps(expression: str, device: DeviceFacts, expected: bool) -> None:
    assert compile_selector(expression, WHERE).matches(device) is expected


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) == 1', True),
    ('device.capacity["gpu.example.com"].memory == quantity("80Gi")', True),
    ('device.capacity["gpu.example.com"].memory == quantity("85899345920")', True),
    ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("80Gi").add(1))', True),
    ('device.capacity["gpu.example.com"].cores == quantity("500m")', True),
    ('device.capacity["gpu.example.com"].cores.isInteger()', False),
    ('quantity("0.1n") == quantity("1n")', True),
    ('quantity("-0.1n") == quantity("-1n")', True),
    ('quantity("1.") == quantity("1") && quantity(".5") == quantity("500m")', True),
    ('isQuantity(" 1") || isQuantity("1 ") || isQuantity("1_000") || isQuantity("1K")', False),
    ('quantity("9999999999Ei") == quantity("9223372036854775807")', True),
], ids=[
    "compareTo on a capacity is exact",
    "equality is by value, not by spelling",
    "a binary suffix is exact",
    "add(int) adds whole units",
    "a fraction compares with its milli spelling",
    "a fraction is not an integer",
    "less than a nano rounds up to 1n, as ParseQuantity does",
    "rounding is away from zero",
    "Go's number forms '1.' and '.5' parse",
    "spaces, underscores and a capital K are not quantities",
    "binary quantities are capped at 2^63-1",
])
def test_quantities_follow_kubernetes(expression: str, expected: bool) -> None:
    assert compile_selector(expression, WHERE).matches(GPU) is expected


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("550.0.0"))', True),
    ('device.attributes["gpu.example.com"].driverVersion.major() == 550', True),
    ('device.attributes["gpu.example.com"].driverVersion == semver("550.54.15+build.7")', True),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1")) && semver("1.0.0-alpha.1").isLessThan('
     'semver("1.0.0-alpha.beta")) && semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11")) && '
     'semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    ('isSemver("1.0.0-01") || isSemver("1.0.0+") || isSemver("1.0.0-a..b")', False),
], ids=[
    "a version attribute compares as a version",
    "major() of a version attribute",
    "equality ignores build metadata, as blang/semver's EQ does",
    "prerelease precedence (semver.org's example chain)",
    "leading zeroes and empty identifiers are not versions",
])
def test_versions_follow_kubernetes(expression: str, expected: bool) -> None:
    assert compile_selector(expression, WHERE).matches(GPU) is expected


@pytest.mark.parametrize(("expression", "expected"), [
    ('"baaa".findAll("a*") == ["", "aaa"]', True),
    ('"paranormal".findAll("a.") == ["ar", "an", "al"]', True),
    ('"paranormal".findAll("a.", 2) == ["ar", "an"]', True),
    ('"abc 123".find("[0-9]+") == "123" && "abc".find("[0-9]+") == ""', True),
    ('[1, 3, 2].isSorted() || [1, 2].sum() != 3 || [4, 1].min() != 1 || [4, 1].max() != 4', False),
    ("1 < 1.5 && 2u > 1 && 1.0 <= 1", True),
    ('device.attributes["gpu.example.com"].model.startsWith("H") && "a,b".split(",").size() == 2', True),
    ('[1, 2].includes(2) && device.attributes["gpu.example.com"].model.includes("H100")', True),
], ids=[
    "findAll skips an empty match right after a match (Go's FindAllString)",
    "findAll as in Go's documentation example",
    "findAll with a limit",
    "find returns the first match or an empty string",
    "Kubernetes' list functions",
    "cross-type numeric comparisons, as Kubernetes enables them",
    "the strings extension",
    "DRA's includes on a list and on a scalar attribute",
])
def test_kubernetes_library_functions(expression: str, expected: bool) -> None:
    assert compile_selector(expression, WHERE).matches(GPU) is expected


# --- robustness -----------------------------------------------------------------------------

_PIECES = ['device.attributes["gpu.example.com"]', "device.capacity", "device.driver", ".model", ".?x", "[", "]",
           "(", ")", '"', "'", "\\", "quantity(", "semver(", ".compareTo(", "cel.bind(", ".all(x,", "x", "1", "1u",
           "2.5", "==", "&&", "||", "!", "?", ":", ",", "has(", "size(", " ", '"40Gi"', '"1.2.3"', ".find(",
           '"[a-z]+"', "{", "}", "b\"\\xff\"", "dyn(", "type(", "+", "-", "/", "%", "in", "[1, 2]", "null"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12) | st.text(max_size=40))
def test_any_input_compiles_or_fails_with_a_cel_error(tokens: list[str] | str) -> None:
    """Selectors are outside input: whatever the text, the outcome is a Selector or a CelError,
    and evaluating a Selector gives a bool or a CelError."""
    expression = tokens if isinstance(tokens, str) else "".join(tokens)
    try:
        selector = compile_selector(expression, WHERE)
    except CelError as exc:
        assert exc.where == WHERE
        return
    for device in (GPU, NIC):
        try:
            assert isinstance(selector.matches(device), bool)
        except CelError as exc:
            assert exc.where == WHERE
