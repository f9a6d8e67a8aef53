"""Selectors taken from Kubernetes' own tests and API docs, with the results Kubernetes gives.

Sources (kubernetes/kubernetes, `staging/src/k8s.io/...`):

* `dynamic-resource-allocation/cel/compile_test.go`, `TestCEL` (the `testcases` table): the
  expression, the device, the result or error, and `expectCost`, Kubernetes' cost estimate.
  Rows whose device needs list-typed attributes (`DRAListTypeAttributes`, alpha) are left
  out: `DeviceFacts` holds scalar attributes only.
* `apiserver/pkg/cel/library/quantity_test.go` (`TestQuantity`), `semver_test.go`
  (`TestSemver`): a case expecting value V of expression X is the selector `X == V`.
* `apiserver/pkg/cel/library/cost_test.go`: estimated cost ranges (min and max).
* `api/resource/v1/types.go`, the `CELDeviceSelector.Expression` and
  `CapacityRequirements.Requests` documentation.

An error row gives a distinctive substring of Kubernetes' message (where cel-cpp's wording
differs, `errors.py` translates it).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest

from gpufleet.model.cel import CelError, DeviceFacts, Version, compile_selector
from gpufleet.model.cel import cost, environment
from gpufleet.model.cel.checked import decode
from gpufleet.model.units import parse_quantity


@dataclass(frozen=True)
class CompileError:
    contains: str


@dataclass(frozen=True)
class MatchError:
    contains: str


Outcome = bool | CompileError | MatchError


def device(driver: str = "", attributes: dict[str, bool | int | str | Version] | None = None,
           capacity: dict[str, str] | None = None, allow_multiple_allocations: bool = False) -> DeviceFacts:
    """A device as `compile_test.go` writes one: qualified names, the driver as the default
    domain (`parseQualifiedName`)."""
    attrs: dict[str, dict[str, bool | int | str | Version]] = {}
    caps: dict[str, dict[str, Decimal]] = {}
    for name, value in (attributes or {}).items():
        domain, _, short = name.rpartition("/")
        attrs.setdefault(domain or driver, {})[short] = value
    for name, amount in (capacity or {}).items():
        domain, _, short = name.rpartition("/")
        caps.setdefault(domain or driver, {})[short] = parse_quantity(amount, name)
    return DeviceFacts(driver, attrs, caps, allow_multiple_allocations)


D = "dra.example.com"
NONE = device()

COMPILE_TEST = [
    # compile_test.go "true"
    pytest.param("true", NONE, True, 0, id="true"),
    # compile_test.go "false"
    pytest.param("false", NONE, False, 0, id="false"),
    # compile_test.go "syntax-error"
    pytest.param("?!", NONE, CompileError("Syntax error"), None, id="syntax-error"),
    # compile_test.go "type-error"
    pytest.param("1", NONE, CompileError("must evaluate to bool or the unknown type, not int"), None, id="type-error"),
    # compile_test.go "runtime-error-lookup-identifier"
    pytest.param('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', NONE,
                 MatchError("no such key: noSuchAttr"), 6, id="runtime-error-lookup-identifier"),
    # compile_test.go "runtime-error-lookup-map"
    pytest.param('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', NONE,
                 MatchError("no such key: noSuchAttr"), 6, id="runtime-error-lookup-map"),
    # compile_test.go "domain-check-negative"
    pytest.param('"no-such-domain" in device.attributes', NONE, False, 3, id="domain-check-negative"),
    # compile_test.go "domain-check-positive"
    pytest.param('"dra.example.com" in device.attributes', device(attributes={"dra.example.com/something": True}),
                 True, 3, id="domain-check-positive"),
    # compile_test.go "empty-driver-name"
    pytest.param('device.driver == ""', NONE, True, 2, id="empty-driver-name"),
    # compile_test.go "real-driver-name"
    pytest.param('device.driver == "dra.example.com"', device(D), True, 4, id="real-driver-name"),
    # compile_test.go "driver-name-qualifier"
    pytest.param('device.attributes["dra.example.com"].name', device(D, {"name": True}), True, 4,
                 id="driver-name-qualifier"),
    # compile_test.go "driver-name-qualifier-map-lookup"
    pytest.param('device.attributes["dra.example.com"]["name"]', device(D, {"name": True}), True, 4,
                 id="driver-name-qualifier-map-lookup"),
    # compile_test.go "bind"
    pytest.param('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', device(D, {"name": True}), True, 15,
                 id="bind"),
    # compile_test.go "qualified-attribute-name"
    pytest.param('device.attributes["other.example.com"].name', device(D, {"other.example.com/name": True}), True, 4,
                 id="qualified-attribute-name"),
    # compile_test.go "bool"
    pytest.param('device.attributes["dra.example.com"].name', device(D, {"name": True}), True, 4, id="bool"),
    # compile_test.go "int"
    pytest.param('device.attributes["dra.example.com"].name > 0', device(D, {"name": 1}), True, 5, id="int"),
    # compile_test.go "string"
    pytest.param('device.attributes["dra.example.com"].name == "fish"', device(D, {"name": "fish"}), True, 5,
                 id="string"),
    # compile_test.go "macro-exists-on-int"
    pytest.param('device.attributes["dra.example.com"].name.exists(x, x > 0)', device(D, {"name": 1}),
                 MatchError("expected iterable type"), 5 + 6 * 64, id="macro-exists-on-int"),
    # compile_test.go "macro-exists-on-bool"
    pytest.param('device.attributes["dra.example.com"].name.exists(x, x == true)', device(D, {"name": True}),
                 MatchError("expected iterable type"), 5 + 6 * 64, id="macro-exists-on-bool"),
    # compile_test.go "macro-exists-on-string"
    pytest.param('device.attributes["dra.example.com"].name.exists(x, x == "fish")', device(D, {"name": "fish"}),
                 MatchError("expected iterable type"), 5 + 6 * 64, id="macro-exists-on-string"),
    # compile_test.go "includes-function-on-bool-scalar-positive"
    pytest.param('device.attributes["dra.example.com"].name.includes(true)', device(D, {"name": True}), True, 52,
                 id="includes-function-on-bool-scalar-positive"),
    # compile_test.go "includes-function-on-bool-scalar-negative"
    pytest.param('device.attributes["dra.example.com"].name.includes(true)', device(D, {"name": False}), False, 52,
                 id="includes-function-on-bool-scalar-negative"),
    # compile_test.go "includes-function-on-int-scalar-positive"
    pytest.param('device.attributes["dra.example.com"].name.includes(1)', device(D, {"name": 1}), True, 52,
                 id="includes-function-on-int-scalar-positive"),
    # compile_test.go "includes-function-on-int-scalar-negative"
    pytest.param('device.attributes["dra.example.com"].name.includes(1)', device(D, {"name": 2}), False, 52,
                 id="includes-function-on-int-scalar-negative"),
    # compile_test.go "includes-function-on-string-scalar-positive"
    pytest.param('device.attributes["dra.example.com"].name.includes("fish")', device(D, {"name": "fish"}), True, 52,
                 id="includes-function-on-string-scalar-positive"),
    # compile_test.go "includes-function-on-string-scalar-negative"
    pytest.param('device.attributes["dra.example.com"].name.includes("bird")', device(D, {"name": "fish"}), False,
                 52, id="includes-function-on-string-scalar-negative"),
    # compile_test.go "includes-function-on-semver-scalar-positive"
    pytest.param('device.attributes["dra.example.com"].name.includes(semver("1.0.0"))',
                 device(D, {"name": Version("1.0.0")}), True, 53, id="includes-function-on-semver-scalar-positive"),
    # compile_test.go "includes-function-on-semver-scalar-negative"
    pytest.param('device.attributes["dra.example.com"].name.includes(semver("2.0.0"))',
                 device(D, {"name": Version("1.0.0")}), False, 53, id="includes-function-on-semver-scalar-negative"),
    # compile_test.go "version"
    pytest.param('device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
                 device(D, {"name": Version("1.0.0")}), True, 6, id="version"),
    # compile_test.go "version_v"
    pytest.param('device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) '
                 '&& isSemver("v1.0.0", true)', device(D, {"name": Version("1.0.0")}), True, 7, id="version_v"),
    # compile_test.go "macro-exists-on-version"
    pytest.param('device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
                 device(D, {"name": Version("1.0.0")}), MatchError("expected iterable type"), 5 + 7 * 64,
                 id="macro-exists-on-version"),
    # compile_test.go "quantity"
    pytest.param('device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
                 device(D, capacity={"name": "1Mi"}), True, 6, id="quantity"),
    # compile_test.go "check-positive"
    pytest.param('"name" in device.capacity["dra.example.com"] && '
                 'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
                 device(D, capacity={"name": "1Mi"}), True, 10, id="check-positive"),
    # compile_test.go "check-negative"
    pytest.param('!("name" in device.capacity["dra.example.com"]) || '
                 'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', NONE, True, 11,
                 id="check-negative"),
    # compile_test.go "all"
    pytest.param('''
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
''', device(D, {"bool": True, "int": 1, "string": "fish", "version": Version("1.0.0")}, {"quantity": "1Mi"}),
                 True, 52, id="all"),
    # compile_test.go "many"
    pytest.param('device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
                 'device.attributes["dra.example.com"].c', device(D, {"a": True, "b": True, "c": True}), True, 12,
                 id="many"),
    # compile_test.go "check_attribute_domains"
    pytest.param('device.attributes.exists_one(x, x == "dra.example.com")',
                 device(D, {"services": "some_example_value"}), True, 164, id="check_attribute_domains"),
    # compile_test.go "check_attribute_ids"
    pytest.param('device.attributes["dra.example.com"].exists_one(x, x == "services")',
                 device(D, {"services": "some_example_value"}), True, 133, id="check_attribute_ids"),
    # compile_test.go "split_attribute"
    pytest.param('device.attributes["dra.example.com"].services.split("example").size() >= 2',
                 device(D, {"services": "some_example_value"}), True, 19, id="split_attribute"),
    # compile_test.go "regexp_attribute"
    pytest.param('device.attributes["dra.example.com"].services.matches("[^a]?sym")',
                 device(D, {"services": "asymetric"}), True, 18, id="regexp_attribute"),
    # compile_test.go "check_capacity_domains"
    pytest.param('device.capacity.exists_one(x, x == "dra.example.com")', device(D, capacity={"memory": "1Mi"}),
                 True, 164, id="check_capacity_domains"),
    # compile_test.go "check_capacity_ids"
    pytest.param('device.capacity["dra.example.com"].exists_one(x, x == "memory")',
                 device(D, capacity={"memory": "1Mi"}), True, 133, id="check_capacity_ids"),
    # compile_test.go "expensive": Kubernetes compiles it with MaxCost 85555551 and its API validation
    # (`validateCELSelector`) rejects it, "too complex, exceeds cost limit"; compile_selector is that check.
    pytest.param('[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, '
                 '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, '
                 '[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, '
                 "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))", device(D),
                 CompileError("too complex, exceeds cost limit (estimated cost 85555551,"), 85555551, id="expensive"),
    # compile_test.go "allow_multiple_allocations"
    pytest.param("device.allowMultipleAllocations == true", device(D, allow_multiple_allocations=True), True, 3,
                 id="allow_multiple_allocations"),
    # compile_test.go "allow_multiple_allocations_default"
    pytest.param("device.allowMultipleAllocations == false", device(D), True, 3,
                 id="allow_multiple_allocations_default"),
]

LIBRARY_TESTS = [
    # quantity_test.go "parse" (compared with the same quantity)
    pytest.param('quantity("12Mi") == quantity("12582912")', True, id="quantity parse"),
    # quantity_test.go "parseInvalidSuffix"
    pytest.param('quantity("10Mo") == quantity("1")', MatchError("quantities must match the regular expression"),
                 id="quantity parseInvalidSuffix"),
    # quantity_test.go "parseInvalidSuffixPassesRegex"
    pytest.param('quantity("10Mm") == quantity("1")', MatchError("unable to parse quantity's suffix"),
                 id="quantity parseInvalidSuffixPassesRegex"),
    # quantity_test.go "isQuantity", "isQuantity_megabytes", "isQuantity_mebibytes"
    pytest.param('isQuantity("20") && isQuantity("20M") && isQuantity("20Mi")', True, id="quantity isQuantity"),
    # quantity_test.go "isQuantity_invalidSuffix"
    pytest.param('isQuantity("20Mo")', False, id="quantity isQuantity_invalidSuffix"),
    # quantity_test.go "isQuantity_passingRegex"
    pytest.param('isQuantity("10Mm")', False, id="quantity isQuantity_passingRegex"),
    # quantity_test.go "isQuantity_noOverload"
    pytest.param("isQuantity([1, 2, 3])", CompileError("found no matching overload for 'isQuantity' applied to"),
                 id="quantity isQuantity_noOverload"),
    # quantity_test.go "equality_symmetry"
    pytest.param('quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")', True,
                 id="quantity equality_symmetry"),
    # quantity_test.go "equality_transitivity"
    pytest.param('quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && '
                 'quantity("0.002G") == quantity("2000k")', True, id="quantity equality_transitivity"),
    # quantity_test.go "inequality"
    pytest.param('quantity("200M") == quantity("0.3G")', False, id="quantity inequality"),
    # quantity_test.go "quantity_less"
    pytest.param('quantity("50M").isLessThan(quantity("50Mi"))', True, id="quantity quantity_less"),
    # quantity_test.go "quantity_less_false"
    pytest.param('quantity("100M").isLessThan(quantity("50M"))', False, id="quantity quantity_less_false"),
    # quantity_test.go "quantity_greater"
    pytest.param('quantity("50Mi").isGreaterThan(quantity("50M"))', True, id="quantity quantity_greater"),
    # quantity_test.go "quantity_greater_false"
    pytest.param('quantity("50M").isGreaterThan(quantity("100M"))', False, id="quantity quantity_greater_false"),
    # quantity_test.go "compare_equal", "compare_less", "compare_greater"
    pytest.param('quantity("200M").compareTo(quantity("0.2G")) == 0 && '
                 'quantity("50M").compareTo(quantity("50Mi")) == -1 && '
                 'quantity("50Mi").compareTo(quantity("50M")) == 1', True, id="quantity compareTo"),
    # quantity_test.go "add_quantity"
    pytest.param('quantity("50k").add(quantity("20")) == quantity("50.02k")', True, id="quantity add_quantity"),
    # quantity_test.go "add_int"
    pytest.param('quantity("50k").add(20).isLessThan(quantity("50020"))', False, id="quantity add_int"),
    # quantity_test.go "sub_quantity"
    pytest.param('quantity("50k").sub(quantity("20")) == quantity("49.98k")', True, id="quantity sub_quantity"),
    # quantity_test.go "sub_int"
    pytest.param('quantity("50k").sub(20) == quantity("49980")', True, id="quantity sub_int"),
    # quantity_test.go "arith_chain_1"
    pytest.param('quantity("50k").add(20).sub(quantity("100k")).asInteger() == -49980', True,
                 id="quantity arith_chain_1"),
    # quantity_test.go "arith_chain"
    pytest.param('quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger() == 20', True,
                 id="quantity arith_chain"),
    # quantity_test.go "as_integer"
    pytest.param('quantity("50k").asInteger() == 50000', True, id="quantity as_integer"),
    # quantity_test.go "as_integer_error"
    pytest.param('quantity("9999999999999999999999999999999999999G").asInteger() == 0',
                 MatchError("cannot convert value to integer"), id="quantity as_integer_error"),
    # quantity_test.go "is_integer" (both cases)
    pytest.param('!quantity("9999999999999999999999999999999999999G").isInteger() && quantity("50").isInteger()',
                 True, id="quantity is_integer"),
    # quantity_test.go "as_float"
    pytest.param('quantity("50.703k").asApproximateFloat() == 50703.0', True, id="quantity as_float"),
    # quantity_test.go "add_does_not_mutate_receiver"
    pytest.param('[quantity("9999999999999999999999999999999999999")].all(x, '
                 'x.add(quantity("1")).compareTo(x.add(quantity("2"))) == -1)', True,
                 id="quantity add_does_not_mutate_receiver"),
    # semver_test.go "parse"
    pytest.param('semver("1.2.3") == semver("1.2.3")', True, id="semver parse"),
    # semver_test.go "parseInvalidVersion"
    pytest.param('semver("v1.0") == semver("1.0.0")', MatchError("No Major.Minor.Patch elements found"),
                 id="semver parseInvalidVersion"),
    # semver_test.go "isSemver"
    pytest.param('isSemver("1.2.3-beta.1+build.1")', True, id="semver isSemver"),
    # semver_test.go "isSemver_empty_false" ... "isSemver_major_minor_only_false"
    pytest.param('isSemver("") || isSemver("v1.0.0") || isSemver(" 1.0.0") || isSemver("1. 0.0") || '
                 'isSemver("1.0.0 ") || isSemver("01.01.01") || isSemver("1") || isSemver("1.1")', False,
                 id="semver isSemver false cases"),
    # semver_test.go "isSemver_empty_normalize_false" ... "isSemver_v_trailing_whitespace_normalize_false"
    pytest.param('isSemver("", true) || isSemver(" 1.0.0", true) || isSemver("1. 0.0", true) || '
                 'isSemver("1.0.0 ", true)', False, id="semver isSemver normalize false cases"),
    # semver_test.go "isSemver_v_prefix_normalize_true" ... "isSemver_major_minor_only_normalize_true"
    pytest.param('isSemver("v1.0.0", true) && isSemver("01.01.01", true) && isSemver("1", true) && '
                 'isSemver("1.1", true)', True, id="semver isSemver normalize true cases"),
    # semver_test.go "isSemver_noOverload"
    pytest.param("isSemver([1, 2, 3])", CompileError("found no matching overload for 'isSemver' applied to"),
                 id="semver isSemver_noOverload"),
    # semver_test.go "equality_normalize"
    pytest.param('semver("v01.01", true) == semver("1.1.0")', True, id="semver equality_normalize"),
    # semver_test.go "inequality"
    pytest.param('semver("1.2.3") == semver("1.0.0")', False, id="semver inequality"),
    # semver_test.go "semver_less", "semver_less_false"
    pytest.param('semver("1.0.0").isLessThan(semver("1.2.3")) && !semver("1.0.0").isLessThan(semver("1.0.0"))', True,
                 id="semver isLessThan"),
    # semver_test.go "semver_greater", "semver_greater_false"
    pytest.param('semver("1.2.3").isGreaterThan(semver("1.0.0")) && !semver("1.0.0").isGreaterThan(semver("1.0.0"))',
                 True, id="semver isGreaterThan"),
    # semver_test.go "compare_equal", "compare_less", "compare_greater"
    pytest.param('semver("1.2.3").compareTo(semver("1.2.3")) == 0 && semver("1.0.0").compareTo(semver("1.2.3")) == -1 '
                 '&& semver("1.2.3").compareTo(semver("1.0.0")) == 1', True, id="semver compareTo"),
    # semver_test.go "major", "minor", "patch"
    pytest.param('semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3', True,
                 id="semver major minor patch"),
]

# api/resource/v1/types.go, CELDeviceSelector.Expression: the fields of a device with driver
# dra.example.com, attributes "model" and "ext.example.com/family", capacity "modules".
DOC_DEVICE = device(D, {"model": "m1", "ext.example.com/family": "f1", "someBool": True, "anotherBool": True},
                    {"modules": "4"})
DOC_TESTS = [
    # types.go: "device.driver", "device.attributes[...].model", "...family", "device.capacity[...].modules"
    pytest.param('device.driver == "dra.example.com" && device.attributes["dra.example.com"].model == "m1" && '
                 'device.attributes["ext.example.com"].family == "f1" && '
                 'device.capacity["dra.example.com"].modules.compareTo(quantity("4")) == 0', DOC_DEVICE, True,
                 id="types.go the fields of a device"),
    # types.go: "If an unknown prefix is used as a lookup ... an empty map will be returned."
    pytest.param('device.attributes["unknown.example.com"].size() == 0 && '
                 'device.capacity["unknown.example.com"].size() == 0', DOC_DEVICE, True,
                 id="types.go an unknown prefix is an empty map"),
    # types.go: "Any reference to an unknown field will cause an evaluation error"
    pytest.param('device.attributes["dra.example.com"].color == "red"', DOC_DEVICE, MatchError("no such key: color"),
                 id="types.go an unknown field is an error"),
    # types.go: Common errors, "no such key": optional chaining (.? followed by orValue())
    pytest.param('device.attributes["dra.example.com"].?color.orValue("red") == "red"', DOC_DEVICE, True,
                 id="types.go optional chaining with orValue"),
    # types.go: Common errors, "no such key": ... or guarding the check with has()
    pytest.param('has(device.attributes["dra.example.com"].color) && '
                 'device.attributes["dra.example.com"].color == "red"', DOC_DEVICE, False,
                 id="types.go guarding with has"),
    # types.go: "cel.bind(dra, device.attributes["dra.example.com"], dra.someBool && dra.anotherBool)"
    pytest.param('cel.bind(dra, device.attributes["dra.example.com"], dra.someBool && dra.anotherBool)', DOC_DEVICE,
                 True, id="types.go cel.bind"),
    # types.go, CapacityRequirements.Requests: "semantically equivalent to a CEL selector with
    # device.capacity[<domain>].<name>.compareTo(quantity(<request quantity>)) >= 0"
    pytest.param("device.capacity['test-driver.cdi.k8s.io'].counters.compareTo(quantity('2')) >= 0",
                 device("test-driver.cdi.k8s.io", capacity={"counters": "3"}), True,
                 id="types.go CapacityRequirements equivalent selector"),
    pytest.param("device.capacity['test-driver.cdi.k8s.io'].counters.compareTo(quantity('2')) >= 0",
                 device("test-driver.cdi.k8s.io", capacity={"counters": "1"}), False,
                 id="types.go CapacityRequirements equivalent selector, too small"),
]

# compile_test.go cases whose devices need list-typed attributes: their estimates only.
LIST_ATTRIBUTE_COSTS = [
    pytest.param('device.attributes["dra.example.com"].names', 4, id="list-result-type-causes-match-error"),
    pytest.param('device.attributes["dra.example.com"].name.includes("fish")', 52, id="includes-function-can-evaluate"),
    pytest.param('device.attributes["dra.example.com"].names.size() == 2', 6, id="list-of-string"),
    pytest.param('device.attributes["dra.example.com"].names.exists(x, x > 0)', 5 + 6 * 64, id="macro-on-list-of-int"),
    pytest.param('device.attributes["dra.example.com"].names.all(x, x != "")', 5 + 4 * 64,
                 id="macro-on-list-of-string"),
    pytest.param('device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))', 5 + 6 * 64,
                 id="macro-on-list-of-semver"),
    pytest.param('1 in device.attributes["dra.example.com"].names', 4 + 64, id="in-operator-on-list"),
    pytest.param('device.attributes["dra.example.com"].name.includes("value-48")', 4 + 48,
                 id="includes-function-on-very-long-list-positive"),
]

COST_TESTS = [
    # cost_test.go TestStringLibrary
    pytest.param("'ABCDEFGHIJ abcdefghij'.lowerAscii() == 'abcdefghij ABCDEFGHIJ'.lowerAscii()", 7, 9,
                 id="lowerAsciiEquals"),
    pytest.param("strings.quote('ABCDEFGHIJ abcdefghij') == strings.quote('ABCDEFGHIJ abcdefghij')", 7, 11,
                 id="quoteEquals"),
    pytest.param("'abc 123 def 123'.replace('', 'x')", 3, 3, id="replace between all chars"),
    pytest.param("'abc 123 def 123'.split(' ', 1)", 3, 3, id="split with limit"),
    pytest.param("'abc 123 def 123'.substring(5, 8)", 2, 2, id="substring with end"),
    pytest.param("'  abc 123 def 123  '.trim()", 2, 2, id="trim"),
    pytest.param("'abc 123 def 123'.find('123')", 2, 2, id="find"),
    pytest.param("'abc 123 def 123'.findAll('123', 1)", 2, 2, id="findAll with limit"),
    # cost_test.go TestQuantityCost
    pytest.param('quantity("12Mi")', 1, 1, id="quantity"),
    pytest.param('quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")', 3, 6,
                 id="quantity equality_symmetry"),
    pytest.param('quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger() > 0', 7, 7,
                 id="quantity arith_chain"),
    pytest.param('quantity("50.703k").asApproximateFloat() > 0.0', 3, 3, id="quantity as_float"),
    # cost_test.go TestSemverCost
    pytest.param('semver("1234.56789012345.67890123456789")', 4, 4, id="semver long input"),
    pytest.param('isSemver("1234.56789012345.67890123456789")', 4, 4, id="isSemver long input"),
    pytest.param('semver("1.0.0").compareTo(semver("1.2.3"))', 3, 3, id="semver compareTo"),
]


def _check(expression: str, dev: DeviceFacts, expected: Outcome) -> int | None:
    """Compile and evaluate; assert the outcome; return the compiled selector's max cost."""
    if isinstance(expected, CompileError):
        with pytest.raises(CelError) as caught:
            compile_selector(expression, "DeviceClass test: spec.selectors[0].cel.expression")
        assert expected.contains in caught.value.problem
        return None
    selector = compile_selector(expression, "DeviceClass test: spec.selectors[0].cel.expression")
    if isinstance(expected, MatchError):
        with pytest.raises(CelError) as caught:
            selector.matches(dev)
        assert expected.contains in caught.value.problem
    else:
        assert selector.matches(dev) is expected
    return selector.max_cost


@pytest.mark.parametrize(("expression", "dev", "expected", "k8s_cost"), COMPILE_TEST)
def test_compile_test_go(expression: str, dev: DeviceFacts, expected: Outcome, k8s_cost: int | None) -> None:
    max_cost = _check(expression, dev, expected)
    if k8s_cost is not None:
        checked = decode(environment.check_env().compile(expression).serialize(), "test")
        assert cost.estimate(checked).max == k8s_cost
        if max_cost is not None:
            assert max_cost == k8s_cost


@pytest.mark.parametrize(("expression", "expected"), LIBRARY_TESTS)
def test_quantity_and_semver_library_tests(expression: str, expected: Outcome) -> None:
    _check(expression, NONE, expected)


@pytest.mark.parametrize(("expression", "k8s_cost"), LIST_ATTRIBUTE_COSTS)
def test_compile_test_go_estimates_of_list_attribute_cases(expression: str, k8s_cost: int) -> None:
    assert compile_selector(expression, "test").max_cost == k8s_cost


@pytest.mark.parametrize(("expression", "dev", "expected"), DOC_TESTS)
def test_api_documentation_examples(expression: str, dev: DeviceFacts, expected: Outcome) -> None:
    _check(expression, dev, expected)


@pytest.mark.parametrize(("expression", "k8s_min", "k8s_max"), COST_TESTS)
def test_cost_test_go_estimates(expression: str, k8s_min: int, k8s_max: int) -> None:
    checked = decode(environment.check_env().compile(expression).serialize(), "test")
    estimate = cost.estimate(checked)
    assert (estimate.min, estimate.max) == (k8s_min, k8s_max)
