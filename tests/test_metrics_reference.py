"""The metric tables of the reference docs name exactly the metrics the code exports.

docs/scheduler.md ("Metrics and probes") for the scheduler's registry, docs/agent.md ("Metrics")
for the agent's: a metric in a table that the code does not export, or one the code exports that
its table leaves out, fails here. Names are as a scrape shows them (counters with `_total`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpufleet.agent.metrics import AgentMetrics
from gpufleet.kube.metrics import Metrics

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _table_names(section: str) -> set[str]:
    """The metric names in the first column of the section's tables."""
    return {m for line in section.splitlines() if line.startswith("| `")
            for m in re.findall(r"`(gpufleet_[a-z0-9_]+)`", line.split("|")[1])}


def _scraped_names(registry: CollectorRegistry) -> set[str]:
    return {f.name + ("_total" if f.type == "counter" else "") for f in registry.collect()}


@pytest.mark.parametrize(("doc", "heading", "registry"), [
    ("scheduler.md", "Metrics and probes", lambda: Metrics().registry),
    ("agent.md", "Metrics", lambda: AgentMetrics().registry),
], ids=["scheduler", "agent"])
def test_the_metrics_table_and_the_registry_name_the_same_metrics(doc: str, heading: str, registry: object) -> None:
    documented = _table_names(_section(DOCS / doc, heading))
    exported = _scraped_names(registry())  # type: ignore[operator]
    assert sorted(exported - documented) == [], f"exported but not in docs/{doc}"
    assert sorted(documented - exported) == [], f"in docs/{doc} but not exported"
