"""Reports of the autoscaling experiment: a terminal table, JSON-ready rows and two PNG plots.

- `autoscale-fleet.png`: GPUs paid for (solid) and allocated (dotted) over the day, one
  colour per arm, first seed;
- `autoscale-tradeoff.png`: p95 wait against GPU-hours paid and against cost for each
  autoscaler over the consolidation delay (`consolidate_after_s`), means over seeds (the
  fixed cluster, far to the right, is in the table only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpufleet.sim.autoscale_experiment import Experiment  # noqa: E402
from gpufleet.sim.report import print_table  # noqa: E402

COLUMNS = (("gpu_hours_paid", "GPU-h paid", "{:,.0f}"), ("idle_gpu_hours", "idle GPU-h", "{:,.0f}"),
           ("cost", "cost", "{:,.0f}"), ("wait_p95_s", "p95 wait (s)", "{:.0f}"),
           ("wait_mean_s", "mean wait (s)", "{:.1f}"), ("finished", "finished", "{:.0f}"),
           ("jobs", "jobs", "{:.0f}"), ("peak_gpus", "peak GPUs", "{:.0f}"))
COLOURS = {"fixed": "C7", "karpenter": "C1", "gpufleet": "C0", "gpufleet-underutilized": "C2"}


def cell(row: dict[str, float], key: str, fmt: str) -> str:
    sd = row.get(f"{key}_sd", 0.0)
    text = fmt.format(row[key])
    return f"{text} ± {fmt.format(sd)}" if sd and row.get("seeds", 1) > 1 else text


def terminal_table(rows: dict[str, dict[str, float]], title: str) -> None:
    print_table(title, "arm", [label for _, label, _ in COLUMNS],
                ([name, *(cell(row, key, fmt) for key, _, fmt in COLUMNS)] 
                 for name, row in rows.items()), width=160)


def markdown_table(rows: dict[str, dict[str, float]]) -> str:
    head = "| arm | " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    body = ["| " + arm + " | " + " | ".join(cell(row, k, f) for k, _, f in COLUMNS) + " |" for arm, row in rows.items()]
    return "\n".join([head, rule, *body])


def to_json(exp: Experiment, meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "arms": exp.table(), "curve": exp.curve_rows(),
            "runs": [{"arm": r.spec.arm, "seed": r.spec.seed, "consolidate_after_s": r.spec.consolidate_after_s,
                      "fixed_nodes": dict(r.spec.fixed), "peak_nodes": r.peak_nodes, **r.summary}
                     for r in exp.runs]}


def fleet_png(exp: Experiment, path: Path) -> None:
    seed = exp.seeds[0]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for arm in exp.arms:
        runs = [r for r in exp.of(arm) if r.spec.seed == seed]
        if not runs:
            continue
        hours = [t / 3600 for t, _, _ in runs[0].series]
        colour = COLOURS.get(arm, "k")
        ax.step(hours, [p for _, p, _ in runs[0].series], where="post", color=colour, lw=1.0, label=f"{arm}: paid")
        ax.step(hours, [a for _, _, a in runs[0].series], where="post", color=colour, lw=0.8, ls=":",
                label=f"{arm}: allocated")
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs")
    ax.set_title(f"GPUs paid for and allocated over the day (seed {seed})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tradeoff_png(exp: Experiment, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, label in ((axes[0], "gpu_hours_paid", "GPU-hours paid"), (axes[1], "cost", "cost")):
        for arm, rows in exp.curve_rows().items():
            xs = [r[key] for r in rows]
            ys = [r["wait_p95_s"] for r in rows]
            ax.plot(xs, ys, "o-", color=COLOURS.get(arm, "k"), label=arm)
            for r, x, y in zip(rows, xs, ys):
                ax.annotate(f"{r['consolidate_after_s']:g}s", (x, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xlabel(f"{label} (mean over {len(exp.seeds)} seed(s))")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("p95 wait (s)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Trade-off over the consolidation delay (labels: consolidate_after_s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(exp: Experiment, out: Path) -> list[Path]:
    """The fleet plot, and the trade-off plot when an arm that draws a curve (karpenter, gpufleet) ran."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "autoscale-fleet.png"]
    fleet_png(exp, paths[0])
    if any(exp.curve_rows().values()):
        paths.append(out / "autoscale-tradeoff.png")
        tradeoff_png(exp, paths[1])
    return paths
