"""Hypothesis strategies for fuzzing: valid documents with one place broken, and plain garbage.

A near-valid input is a seed (`seeds.py`) with one change at a random place: a value replaced
by a wrong type, an out-of-range or huge number, NaN or infinity, odd Unicode, deep nesting;
a key removed or added; or, in the text, a raw YAML token that no dumper would write (a
timestamp that is no date, an unknown tag, a recursive alias, an integer of 5,000 digits,
billion-laughs aliases). These get past the first checks a parser makes, where raw garbage
mostly stops at the syntax error.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
from typing import Any, Callable

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", "0"))
"""Examples per fuzz test when set (`hack/fuzz.py --engine hypothesis`); each test's small default otherwise."""


def fuzz_settings(default: int) -> settings:
    """A fuzz test's settings: `default` examples (CI), no deadline (the hang limit is
    `targets.time_limit`, a hard interrupt; a deadline only fails after the example ends and is
    flaky on a shared 2-core machine), and no health checks against slow or filtered data."""
    return settings(max_examples=EXAMPLES or default, deadline=None,
                    suppress_health_check=list(HealthCheck))


WEIRD_TEXT = ["", " ", "\n", "\t", "a\nb", "é", "名前", "\u2028", "\x00", "\ufeff", "🚀", "'", '"', "{", "[", "*", "&",
              "-1", "0", "1.5", "1e3", "1e999999999", "NaN", "inf", "-0", "0x1F", "0o17", "1_000", "²", "١٢",
              "500m", "4Gi", "1Ei", "9Ei", "100Mi", "true", "null", "~", "v1", "nvidia.com/gpu", "a" * 300,
              "9" * 30, "9" * 5000]

NASTY = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-2**70, max_value=2**70),
    st.sampled_from([0, -1, 1, 2, 7, 63, 64, 65, 999, 1000, 1001, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 10**18, 10**30,
                     10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WEIRD_TEXT), st.text(max_size=12),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.integers(), st.text(max_size=3), min_size=1, max_size=2),
    st.integers(min_value=1, max_value=150).map(lambda n: _nested(n)),
)
"""Values to put where a valid one was."""

RAW_YAML = ["2026-13-45", "2026-02-30 25:61:00", "!foo bar", "!!binary '~~~'", "!!python/object:os.system ls",
            "!!int x", "!!float x", "&a [*a]", "*nowhere", "9" * 5000, "-" + "9" * 5000, "0x" + "f" * 5000,
            "1:2:3:4", ".nan", ".inf", "-.inf", "0b102", "[" * 300 + "]" * 300, "{a: " * 200 + "1" + "}" * 200,
            "|\n  a\n  b", "? [a, b]\n  : c", "<<: {a: 1}", "{<<: [1]}", "\"\\ud800\"", "'\t'", "!!timestamp 2026-01-01x",
            "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "{[1]: 2}", "{{a: 1}: 2}", "@x", "`", "%YAML 1.1"]
"""Raw YAML put in the text where a value was: what no dumper writes and parsers still meet."""

LAUGHS = ("lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
          + "".join(f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)))


def _nested(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `doc` (keys and list indexes from the root), the root included."""
    found = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*prefix, i))
    return found


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


MARK = "FUZZ-MARK-8c1e"


@st.composite
def mutated(draw: st.DrawFn, docs: list[Any], raw: list[str] | None = None) -> tuple[Any, str | None]:
    """(a seed with one change, or the raw token to put at MARK in the dumped text)."""
    doc = copy.deepcopy(draw(st.sampled_from(docs)))
    path = draw(st.sampled_from(_paths(doc)))
    action = draw(st.sampled_from(["replace", "replace", "delete", "add", "raw"] if raw else
                                  ["replace", "replace", "delete", "add"]))
    if not path:
        return (draw(NASTY), None) if action != "raw" else (MARK, draw(st.sampled_from(raw or [""])))
    parent, last = _get(doc, path[:-1]), path[-1]
    if action == "replace":
        parent[last] = draw(NASTY)
    elif action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=8), st.integers()))] = draw(NASTY)
    elif action == "add":
        parent.insert(last, draw(NASTY))
    else:
        parent[last] = MARK
        return doc, draw(st.sampled_from(raw or [""]))
    return doc, None


def _dump_yaml(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, width=10**6)
    except (ValueError, yaml.YAMLError, RecursionError):  # an int PyYAML cannot write (10**4000)
        return yaml.safe_dump(json.loads(json.dumps(doc, default=str).replace("Infinity", "1e999")),
                              allow_unicode=True, sort_keys=False)


@st.composite
def yaml_texts(draw: st.DrawFn, seed_texts: Callable[[], list[bytes]]) -> str:
    """A near-valid YAML document, billion laughs, or garbage text."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["laughs", "garbage", "token"]))
    if kind == "laughs":
        return LAUGHS + draw(st.sampled_from(["profiles: *l8\n", "nodes: *l8\n", "flags: *l8\n", "x: *l8\n"]))
    if kind == "garbage":
        return draw(st.text(max_size=300))
    texts = seed_texts()
    if kind == "token":
        text = draw(st.sampled_from(texts)).decode()
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        return text[:cut] + draw(st.sampled_from(RAW_YAML + WEIRD_TEXT)) + text[cut:]
    doc, raw = draw(mutated([yaml.safe_load(t) for t in texts], RAW_YAML))
    text = _dump_yaml(doc)
    if raw is not None:
        text = text.replace(f"'{MARK}'", MARK).replace(MARK, raw.replace("\n", "\n  "), 1)
    return text


@st.composite
def json_texts(draw: st.DrawFn, docs: list[Any]) -> str:
    """A near-valid JSON document, or JSON no encoder writes (deep, huge numbers), or garbage."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["deep", "number", "garbage"]))
    if kind == "deep":
        return "[" * draw(st.integers(min_value=900, max_value=100_000))
    if kind == "number":
        return '{"node": "n", "gpus": ["a"], "milli": ' + "9" * draw(st.integers(min_value=4000, max_value=6000)) + "}"
    if kind == "garbage":
        return draw(st.text(max_size=200))
    doc, _ = draw(mutated(docs))
    try:
        return json.dumps(doc)
    except ValueError:
        return json.dumps(doc, default=str)


@st.composite
def csv_texts(draw: st.DrawFn, seed_texts: Callable[[], list[bytes]], delimiter: str = ",") -> bytes:
    """A trace with one cell, row or line changed, or garbage bytes."""
    kind = draw(st.sampled_from(["cell"] * 5 + ["row", "header", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    text = draw(st.sampled_from(seed_texts())).decode("utf-8", "replace")
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter)) if delimiter == "," else \
        [line.split(delimiter) for line in text.splitlines()]
    if not rows:
        rows = [[""]]
    r = draw(st.integers(min_value=0 if kind == "header" else min(1, len(rows) - 1), max_value=len(rows) - 1))
    if kind in ("cell", "header") and rows[r]:
        c = draw(st.integers(min_value=0, max_value=len(rows[r]) - 1))
        rows[r][c] = draw(st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=20),
                                    st.integers(min_value=-10, max_value=10**25).map(str)))
    else:
        change = draw(st.sampled_from(["drop-field", "add-field", "duplicate", "delete"]))
        if change == "drop-field" and rows[r]:
            rows[r].pop()
        elif change == "add-field":
            rows[r].append(draw(st.sampled_from(WEIRD_TEXT)))
        elif change == "duplicate":
            rows.insert(r, list(rows[r]))
        else:
            del rows[r]
    if delimiter != ",":
        return "\n".join(delimiter.join(row) for row in rows).encode()
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()
