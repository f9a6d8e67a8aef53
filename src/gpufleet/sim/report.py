"""Reports of a comparison: terminal table, JSON, CSV and an HTML page with plots."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from gpufleet.sim.compare import Summary  # noqa: E402

COLUMNS = ("90", "95", "100", "110", "120", "130")


def table_rows(summary: Summary, metric: str = "unallocated_gpu_pct") -> list[list[str]]:
    rows = []
    for policy, metrics in summary.items():
        cells = [policy]
        for col in COLUMNS:
            v = metrics[metric][col]
            cells.append("-" if v["mean"] is None else f"{v['mean']:.2f} ± {v['sd'] or 0.0:.2f}")
        rows.append(cells)
    return rows


def write_json(summary: Mapping[str, Any], path: Path, meta: dict[str, object]) -> None:
    path.write_text(json.dumps({"meta": meta, "policies": summary}, indent=1))


def write_csv(summary: Summary, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "metric", "arrived_pct", "mean", "sd"])
        for policy, metrics in summary.items():
            for metric, buckets in metrics.items():
                for b, v in buckets.items():
                    w.writerow([policy, metric, b, v["mean"], v["sd"]])


def _plot(summary: Summary, metric: str, ylabel: str, xmax: int, xmin: int = 0) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    if metric == "unallocated_gpu_pct":
        ideal = list(range(xmin, xmax + 1))
        ax.plot(ideal, [max(0, 100 - x) for x in ideal], "k--", linewidth=0.8, label="ideal")
    for policy, metrics in summary.items():
        xs = [int(b) for b, v in metrics[metric].items() if xmin <= int(b) <= xmax and v["mean"] is not None]
        mean = [float(metrics[metric][str(x)]["mean"] or 0.0) for x in xs]
        sd = [float(metrics[metric][str(x)]["sd"] or 0.0) for x in xs]
        ax.plot(xs, mean, label=policy)
        ax.fill_between(xs, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], alpha=0.2)
    ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def _png(fig: Figure) -> str:
    """The figure as base64 PNG for an <img> data URL (one self-contained HTML file)."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_png(summary: Summary, path: Path, metric: str = "unallocated_gpu_pct", xmin: int = 70) -> None:
    """One curve plot as a PNG file (for docs), the same figure the HTML report embeds."""
    path.write_bytes(base64.b64decode(_plot(summary, metric, metric.replace("_", " "), 130, xmin)))


def write_html(summary: Summary, path: Path, title: str, meta: dict[str, object]) -> None:
    plots = [("Unallocated GPU % from 70 % arrived (lower is better; band = ±1 sd over seeds)",
              "unallocated_gpu_pct", "unallocated GPU %", 130, 70),
             ("Fragmented GPU as % of capacity", "frag_gpu_pct", "fragmented GPU %", 100, 0),
             ("Fragmentation ratio (% of idle GPU that is fragmented)", "frag_ratio_pct", "fragmentation ratio %", 100, 0)]
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in table_rows(summary))
    head = "".join(f"<th>@{c}%</th>" for c in COLUMNS)
    figures = "".join(f"<h2>{html.escape(t)}</h2><img src='data:image/png;base64,{_plot(summary, m, y, x, lo)}'>"
                      for t, m, y, x, lo in plots)
    meta_rows = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    "<style>body{font-family:sans-serif;max-width:900px;margin:auto}td,th{padding:2px 8px}</style>"
                    f"</head><body><h1>{html.escape(title)}</h1><ul>{meta_rows}</ul>"
                    f"<h2>Unallocated GPU % by arrived workload (mean ± sd)</h2>"
                    f"<table><tr><th>policy</th>{head}</tr>{rows}</table>{figures}</body></html>")


def print_table(title: str, first: str, labels: Sequence[str], rows: Iterable[Sequence[str]],
                width: int = 150) -> None:
    """A right-aligned table on stderr (the terminal output of every experiment command)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column(first)
    for label in labels:
        table.add_column(label, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(stderr=True, width=width).print(table)


def terminal_table(summary: Summary, title: str) -> None:
    print_table(title, "policy", [f"@{c}%" for c in COLUMNS], table_rows(summary))



TIME_COLUMNS = ("jct_mean_s", "jct_p50_s", "jct_p99_s", "wait_mean_s", "wait_p99_s", "wait_max_s",
                "makespan_over_bound", "gpu_utilisation_while_arriving", "jain_fairness", "priority_inversions",
                "preemptions", "gpu_hours_lost")


def time_table(summary: dict[str, dict[str, dict[str, float]]], title: str) -> None:
    print_table(title, "policy", TIME_COLUMNS,
                ([policy, *(f"{metrics[c]['mean']:.3g}" for c in TIME_COLUMNS)] for policy, metrics in summary.items()))


def write_time_html(summary: dict[str, dict[str, dict[str, float]]],
                    curves: dict[str, list[tuple[float, float]]], path: Path, title: str,
                    meta: dict[str, object], shares_png: str | None = None) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for policy, points in curves.items():
        ax.step([t / 3600 for t, _ in points], [u * 100 for _, u in points], where="post", label=policy)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPU allocated (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    img = _png(fig)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in TIME_COLUMNS)
    rows = "".join(f"<tr><td>{html.escape(p)}</td>" + "".join(
        f"<td>{m[c]['mean']:.4g} ± {m[c]['sd']:.2g}</td>" for c in TIME_COLUMNS) + "</tr>" for p, m in summary.items())
    meta_rows = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
                    f"<body style='font-family:sans-serif'><h1>{html.escape(title)}</h1><ul>{meta_rows}</ul>"
                    f"<table><tr><th>policy</th>{head}</tr>{rows}</table>"
                    f"<h2>GPU utilisation over time (first seed)</h2><img src='data:image/png;base64,{img}'>"
                    + (f"<h2>GPUs held against fair share, per queue (first seed)</h2>"
                       f"<img src='data:image/png;base64,{shares_png}'>" if shares_png else "")
                    + "</body></html>")
