"""docs/security.md's "What each component calls" lists exactly the RBAC grants of
tests/deploy/test_rbac.py (which test_rbac checks against deploy/ and the chart, and the live
suite against what the components did), so the page cannot drift from the rules.

Each table row is `| verbs | API group | resource | scope | why |`: verbs comma-separated, group
`core` for the API group "", the resource in backticks, scope `cluster` or a namespace.
"""

from __future__ import annotations

import re

import pytest

from tests.deploy.manifests import ROOT
from tests.deploy.test_rbac import AGENT, SCHEDULER

DOC = ROOT / "docs" / "security.md"
SECTION = "## What each component calls"
HEADINGS = {"scheduler": "### The scheduler", "agent": "### The agent"}
Grant = tuple[str, str, str, str]


def section(text: str, heading: str, level: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    start = text.index(heading + "\n") + len(heading) + 1
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", text[start:], re.M)]
    return text[start:start + ends[0]] if ends else text[start:]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the first table in `text`, header and separator left out."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) > 2 and set(lines[1]) <= set("|-: "), "no table"
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def documented(component: str) -> list[Grant]:
    calls = section(DOC.read_text(), SECTION, "##")
    out = []
    for verbs, group, resource, scope, why in table_rows(section(calls, HEADINGS[component], "###")):
        assert why, f"{component}: no reason given for {verbs} {resource}"
        assert resource.startswith("`") and resource.endswith("`"), resource
        for verb in verbs.split(", "):
            out.append((scope, "" if group == "core" else group, resource.strip("`"), verb))
    return out


@pytest.mark.parametrize(("component", "granted"), [
    pytest.param("scheduler", SCHEDULER, id="scheduler"),
    pytest.param("agent", AGENT, id="agent"),
])
def test_the_docs_list_each_grant_once_with_its_reason(component: str, granted: set[Grant]) -> None:
    rows = documented(component)
    assert len(rows) == len(set(rows)), "a call listed twice"
    assert sorted(set(rows) - granted) == [], "in the docs, not granted"
    assert sorted(granted - set(rows)) == [], "granted, not in the docs"


def test_the_table_parser_reads_a_row_as_one_grant_per_verb() -> None:
    text = "## What each component calls\n\n### The agent\n\n| verbs | API group | resource | scope | why |\n" \
           "|---|---|---|---|---|\n| get, patch | core | `nodes` | cluster | because |\n\n## Next\n"
    rows = table_rows(section(section(text, SECTION, "##"), HEADINGS["agent"], "###"))
    assert rows == [["get, patch", "core", "`nodes`", "cluster", "because"]]
