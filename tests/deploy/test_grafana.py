"""deploy/grafana/gpufleet.json queries only metrics the scheduler and the agent export, and shows each of them.

The exported names come from the code's own registries (`kube.metrics.Metrics`,
`agent.metrics.AgentMetrics`), with the sample suffixes Prometheus adds per metric type.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.agent.metrics import AgentMetrics
from gpufleet.kube.metrics import Metrics

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpufleet.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
METRIC = re.compile(r"\b(gpufleet_[a-z0-9_]+)")


def _board() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(BOARD.read_text())
    return data


def _panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in _panels(board) for t in p.get("targets", [])]


def _exported() -> dict[str, str]:
    """Every sample name a scrape can show -> its metric family."""
    names: dict[str, str] = {}
    for registry in (Metrics().registry, AgentMetrics().registry):
        for family in registry.collect():
            for suffix in SUFFIXES[family.type]:
                names[family.name + suffix] = family.name
    return names


def test_every_metric_the_board_queries_is_exported() -> None:
    exported = _exported()
    queried = {name for expr in _exprs(_board()) for name in METRIC.findall(expr)}
    assert queried, "the board queries nothing"
    assert sorted(queried - set(exported)) == []


def test_every_exported_metric_is_on_the_board() -> None:
    exported = _exported()
    shown = {exported[n] for expr in _exprs(_board()) for n in METRIC.findall(expr) if n in exported}
    assert sorted(set(exported.values()) - shown) == []


def test_the_template_variables_the_queries_use_are_defined() -> None:
    board = _board()
    defined = {v["name"] for v in board["templating"]["list"]}
    used = {m for expr in _exprs(board) for m in re.findall(r"\$(\w+)", expr)}
    used |= {m for p in _panels(board) for m in re.findall(r"\$\{?(\w+)", json.dumps(p.get("datasource", {})))}
    assert used and used <= defined


def test_panels_have_unique_ids_and_sit_on_the_24_column_grid() -> None:
    panels = list(_panels(_board()))
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]


@pytest.mark.parametrize("expr", _exprs(_board()))
def test_each_query_is_balanced_and_rates_only_counters_and_histograms(expr: str) -> None:
    """A cheap shape check (no PromQL parser here): brackets balance, and rate()/increase() take a
    counter or a histogram bucket, never a gauge."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for ch in re.sub(r'"[^"]*"', '""', expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            assert stack and stack.pop() == pairs[ch], expr
    assert not stack, expr
    for name in re.findall(r"(?:rate|increase)\((gpufleet_[a-z0-9_]+)", expr):
        assert name.endswith(("_total", "_bucket")), expr
