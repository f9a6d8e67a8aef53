"""docs/reference/profile.md names exactly the keys, plugins and arguments the profile loader takes.

Checked against the code, both directions:

* document keys: the keys each level of `load_profiles` allows, read from the loader's own
  "unknown key ...; allowed: ..." error by putting an unknown key at each level;
* plugins: the names of `default_registry()`, each with the extension points its instance
  implements and the arguments it takes;
* plugin arguments and `queueing`: the fields of each plugin's `Args` dataclass and of
  `QueueingConfig`, spelled as the YAML spells them (camelCase, which the loader's `_snake`
  must map back to the field), with their type and default.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any, Callable, get_args, get_origin, get_type_hints

import pytest
import yaml

from gpufleet.framework import interfaces as points
from gpufleet.framework.profile import ProfileError, _snake, load_profiles
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.registry import BuildContext, NoArgs, default_registry

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "profile.md"
FIX = "update the tables of docs/reference/profile.md (by hand: the table rows are `key | type | default | meaning`)"

EXTENSION_POINTS: tuple[tuple[str, type], ...] = (
    ("pre_filter", points.PreFilterPlugin), ("filter", points.FilterPlugin), ("score", points.ScorePlugin),
    ("normalize_score", points.NormalizeScorePlugin), ("uniform", points.UniformScorePlugin),
    ("pick_devices", points.DevicePicker), ("reserve", points.ReservePlugin), ("permit", points.PermitPlugin))


# -- the code -------------------------------------------------------------------------------

BASE: dict[str, Any] = {"profiles": [{
    "schedulerName": "probe",
    "plugins": {"filter": {"enabled": [{"name": "GpuFit"}]}, "score": {"enabled": [{"name": "Topology", "weight": 1}]}},
    "pluginConfig": [{"name": "Topology", "args": {}}],
    "queueing": {}}]}

# Where the loader checks a mapping's keys, as the reference writes the path to it.
LEVELS: tuple[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]], ...] = (
    ("", lambda d: d),
    ("profiles[]", lambda d: d["profiles"][0]),
    ("profiles[].plugins", lambda d: d["profiles"][0]["plugins"]),
    ("profiles[].plugins.filter", lambda d: d["profiles"][0]["plugins"]["filter"]),
    ("profiles[].plugins.filter.enabled[]", lambda d: d["profiles"][0]["plugins"]["filter"]["enabled"][0]),
    ("profiles[].plugins.score", lambda d: d["profiles"][0]["plugins"]["score"]),
    ("profiles[].plugins.score.enabled[]", lambda d: d["profiles"][0]["plugins"]["score"]["enabled"][0]),
    ("profiles[].pluginConfig[]", lambda d: d["profiles"][0]["pluginConfig"][0]),
)


def allowed_keys(level: Callable[[dict[str, Any]], dict[str, Any]]) -> list[str]:
    """The keys the loader allows at `level`, from its error for an unknown one."""
    doc = copy.deepcopy(BASE)
    level(doc)["zzNotAKey"] = 1
    with pytest.raises(ProfileError) as err:
        load_profiles(yaml.safe_dump(doc))
    m = re.search(r"unknown key 'zzNotAKey'; allowed: (.*)$", str(err.value))
    assert m, f"the loader no longer names the allowed keys: {err.value}"
    return m.group(1).split(", ")


def code_document_keys() -> set[str]:
    load_profiles(yaml.safe_dump(BASE))  # the probe document itself is valid
    return {f"{path}.{key}" if path else key for path, level in LEVELS for key in allowed_keys(level)}


def camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(p.capitalize() for p in rest)


def yaml_type(hint: Any) -> str:
    if get_origin(hint) is tuple:
        plural = {"string": "strings", "number": "numbers", "integer": "integers"}
        return "list of " + plural[yaml_type(get_args(hint)[0])]
    return {str: "string", float: "number", int: "integer", bool: "boolean"}[hint]


def yaml_default(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def code_args(args_type: type) -> dict[str, tuple[str, Any]]:
    """YAML key -> (type, default) of an Args dataclass; each key maps back to its field."""
    hints = get_type_hints(args_type)
    out = {}
    for f in dataclasses.fields(args_type):
        key = camel(f.name)
        assert _snake(key) == f.name, f"the loader reads YAML key {key!r} as {_snake(key)!r}, not {f.name!r}"
        default = f.default_factory() if f.default is dataclasses.MISSING and f.default_factory is not \
            dataclasses.MISSING else f.default
        out[key] = (yaml_type(hints[f.name]), yaml_default(default))
    return out


def code_plugins() -> dict[str, tuple[set[str], set[str]]]:
    """Plugin name -> (extension points, YAML argument keys)."""
    out = {}
    for name, entry in default_registry().items():
        plugin = entry.factory(entry.args_type(), BuildContext())
        implemented = {point for point, protocol in EXTENSION_POINTS if isinstance(plugin, protocol)}
        out[name] = (implemented, set() if entry.args_type is NoArgs else set(code_args(entry.args_type)))
    return out


# -- the page -------------------------------------------------------------------------------

def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def rows(text: str) -> list[list[str]]:
    """The cells of the table rows whose first cell is code (`...`)."""
    return [[c.strip() for c in line.strip().strip("|").split(" | ")]
            for line in text.splitlines() if line.startswith("| `")]


def code_of(cell: str) -> str:
    m = re.fullmatch(r"`([^`]*)`", cell)
    assert m, f"expected one `code` span, got {cell!r}"
    return m.group(1)


def names_in(cell: str) -> set[str]:
    return set() if cell == "none" else {n.strip().strip("`") for n in cell.split(",")}


def doc_args(table: list[list[str]]) -> dict[str, tuple[str, Any]]:
    return {code_of(r[0]): (r[1], yaml.safe_load(code_of(r[2]))) for r in table}


def page() -> str:
    return PAGE.read_text()


# -- checks ---------------------------------------------------------------------------------

def check_document_keys(text: str, code: set[str]) -> None:
    documented = {code_of(r[0]) for r in rows(section(text, "Document keys"))}
    assert sorted(code - documented) == [], f"profile keys the loader takes but docs/reference/profile.md lacks; {FIX}"
    assert sorted(documented - code) == [], f"keys in docs/reference/profile.md the loader rejects; {FIX}"


def check_plugins(text: str, code: dict[str, tuple[set[str], set[str]]]) -> None:
    documented = {code_of(r[0]): (names_in(r[1]), names_in(r[2])) for r in rows(section(text, "Plugins"))}
    assert sorted(code.keys() - documented.keys()) == [], f"registered plugins missing from the Plugins table; {FIX}"
    assert sorted(documented.keys() - code.keys()) == [], f"plugins in the Plugins table that are not registered; {FIX}"
    wrong = {n: {"code": code[n], "docs": documented[n]} for n in code if code[n] != documented[n]}
    assert wrong == {}, f"extension points or args differ between the registry and the Plugins table; {FIX}"


def check_plugin_args(text: str, code: dict[str, dict[str, tuple[str, Any]]]) -> None:
    table = rows(section(text, "Plugin arguments"))
    documented: dict[str, dict[str, tuple[str, Any]]] = {}
    for r in table:
        documented.setdefault(code_of(r[0]), {}).update(doc_args([r[1:]]))
    assert documented == code, f"plugin arguments (key, type, default) differ from the Args dataclasses; {FIX}"


def check_queueing(text: str, code: dict[str, tuple[str, Any]]) -> None:
    documented = doc_args(rows(section(text, "queueing")))
    assert sorted(code.keys() - documented.keys()) == [], f"queueing keys missing from docs/reference/profile.md; {FIX}"
    assert sorted(documented.keys() - code.keys()) == [], \
        f"queueing keys in docs/reference/profile.md the loader rejects; {FIX}"
    assert documented == code, f"queueing key types or defaults differ from QueueingConfig; {FIX}"


def code_plugin_args() -> dict[str, dict[str, tuple[str, Any]]]:
    return {name: code_args(e.args_type) for name, e in default_registry().items() if e.args_type is not NoArgs}


def test_the_document_keys_are_the_ones_the_loader_takes() -> None:
    check_document_keys(page(), code_document_keys())


def test_the_plugins_table_is_the_registry_with_its_extension_points_and_args() -> None:
    check_plugins(page(), code_plugins())


def test_the_plugin_arguments_are_the_args_dataclasses_fields() -> None:
    check_plugin_args(page(), code_plugin_args())


def test_the_queueing_keys_are_queueing_config_fields() -> None:
    check_queueing(page(), code_args(QueueingConfig))


def test_the_example_profile_on_the_page_loads() -> None:
    example = re.search(r"```yaml\n(.*?)```", page(), re.S)
    assert example is not None
    load_profiles(example.group(1), "docs/reference/profile.md")


def test_each_check_fails_when_the_page_loses_a_row_or_the_code_gains_a_key() -> None:
    text = page()

    def without(row_start: str) -> str:
        line = next(line for line in text.splitlines() if line.startswith(row_start))
        return text.replace(line + "\n", "", 1)

    with pytest.raises(AssertionError, match="lacks"):
        check_document_keys(without("| `profiles[].plugins.score.enabled[].weight`"), code_document_keys())
    with pytest.raises(AssertionError, match="missing"):
        check_plugins(without("| `RecentFaults`"), code_plugins())
    with pytest.raises(AssertionError, match="differ"):
        check_plugin_args(without("| `Topology` | `rackLabels`"), code_plugin_args())
    with pytest.raises(AssertionError, match="missing"):
        check_queueing(without("| `reclaim`"), code_args(QueueingConfig))
    with pytest.raises(AssertionError, match="missing"):
        check_queueing(text, {**code_args(QueueingConfig), "newKnob": ("boolean", False)})
    with pytest.raises(AssertionError, match="lacks"):
        check_document_keys(text, code_document_keys() | {"profiles[].plugins.permit"})
    with pytest.raises(AssertionError, match="differ"):
        check_plugins(text, {**code_plugins(), "Topology": ({"score"}, {"rackLabels"})})
