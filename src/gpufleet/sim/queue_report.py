"""Reports of the queueing experiment: a terminal table, and an HTML page with plots.

Plots: each queue's GPUs held against its fair share over time (one panel per policy, for
the five busiest queues), Jain's index over time per policy, and GPU utilisation over time.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpufleet.sim.queue_experiment import QueueRun  # noqa: E402
from gpufleet.sim.queue_kpis import QueueSample  # noqa: E402
from gpufleet.sim.report import _png, print_table  # noqa: E402

COLUMNS = (("jct_mean_s", "mean JCT (h)", 1 / 3600), ("jct_p99_s", "p99 JCT (h)", 1 / 3600),
           ("wait_max_s", "max wait (h)", 1 / 3600), ("jain_fairness", "Jain", 1.0),
           ("gpu_utilisation", "GPU util", 1.0), ("preemptions", "preemptions", 1.0),
           ("gpu_hours_lost", "GPU-h lost", 1.0), ("priority_inversions", "inverted pods", 1.0))


def terminal_table(rows: dict[str, dict[str, float]], title: str) -> None:
    print_table(title, "policy", [label for _, label, _ in COLUMNS],
                ([name, *(f"{row[key] * scale:.3g}" for key, _, scale in COLUMNS)] for name, row in rows.items()))


def shares_png(runs: Sequence[tuple[str, Sequence[QueueSample]]]) -> str:
    """Per policy, the busiest queues' GPUs held (solid) against their fair share (dotted)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.2 * len(runs)), sharex=True, squeeze=False)
    for ax, (policy, samples) in zip(axes[:, 0], runs):
        if not samples:
            continue
        totals: dict[str, float] = {}
        for s in samples:
            for q, v in s.fair.items():
                totals[q] = totals.get(q, 0.0) + v
        busiest = sorted(totals, key=lambda q: -totals[q])[:5]
        hours = [s.time / 3600 for s in samples]
        for k, q in enumerate(busiest):
            color = f"C{k}"
            ax.step(hours, [s.held.get(q, 0.0) for s in samples], where="post", color=color, label=q)
            ax.step(hours, [s.fair.get(q, 0.0) for s in samples], where="post", color=color, ls=":")
        ax.set_ylabel(f"{policy}\nGPUs")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=5, title="held (solid) vs fair share (dotted)", title_fontsize=7)
    axes[-1, 0].set_xlabel("time (hours)")
    return _png(fig)


def _jain_png(runs: Sequence[QueueRun]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    for run in runs:
        points = [(s.time / 3600, s.jain) for s in run.samples if s.jain is not None]
        ax.step([t for t, _ in points], [j for _, j in points], where="post", label=run.policy, lw=0.8)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("Jain's index (held / fair)")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def _util_png(runs: Sequence[QueueRun]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    for run in runs:
        ax.step([t / 3600 for t, _ in run.utilisation], [u * 100 for _, u in run.utilisation], where="post",
                label=run.policy, lw=0.8)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPU allocated (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def write_html(runs: Sequence[QueueRun], rows: dict[str, dict[str, float]], out: Path,
               meta: dict[str, object]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in COLUMNS)
    body = "".join(f"<tr><td>{html.escape(p)}</td>" + "".join(
        f"<td>{row[key] * scale:.4g}</td>" for key, _, scale in COLUMNS) + "</tr>" for p, row in rows.items())
    meta_rows = "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in meta.items())
    images = "".join(f"<h2>{title}</h2><img src='data:image/png;base64,{png}'>" for title, png in (
        ("GPUs held against fair share, per queue", shares_png([(r.policy, r.samples) for r in runs])),
        ("Jain's index over time", _jain_png(runs)),
        ("GPU utilisation over time", _util_png(runs))))
    (out / "report.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>gpufleet queueing experiment</title></head>"
        f"<body style='font-family:sans-serif'><h1>gpufleet queueing experiment</h1><ul>{meta_rows}</ul>"
        f"<table border=1 cellpadding=3><tr><th>policy</th>{head}</tr>{body}</table>{images}</body></html>\n")
