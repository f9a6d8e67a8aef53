"""Reports of the failure experiment: a terminal table and one PNG with three panels."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpufleet.sim.fault_experiment import FaultRun  # noqa: E402
from gpufleet.sim.report import print_table  # noqa: E402

COLUMNS = (("faults", "faults/seed", 1.0), ("gpu_hours_lost_to_faults", "GPU-h lost", 1.0),
           ("gpu_hours_out_of_service", "GPU-h out of service", 1.0),
           ("gang_restart_s_mean", "gang back (min)", 1 / 60), ("gang_restarts", "gangs hit", 1.0),
           ("restart_s_mean", "any job back (min)", 1 / 60), ("never_restarted", "never back", 1.0),
           ("jct_mean_s", "mean JCT (h)", 1 / 3600), ("gpu_utilisation", "GPU util", 1.0))


def terminal_table(rows: dict[str, dict[str, float]], title: str) -> None:
    print_table(title, "policy", [label for _, label, _ in COLUMNS],
                ([name, *(f"{row[key] * scale:.3g}" for key, _, scale in COLUMNS)] 
                 for name, row in rows.items()), width=160)


def write_png(runs: Sequence[FaultRun], rows: dict[str, dict[str, float]], path: Path, title: str) -> None:
    """GPU-hours lost per seed, out-of-service GPU-hours per seed (log scale), and every gang's
    time to run again."""
    arms = list(rows)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, key, label in ((axes[0], "gpu_hours_lost_to_faults", "GPU-hours lost to faults (per seed)"),
                           (axes[1], "gpu_hours_out_of_service", "GPU-hours out of service (per seed)")):
        ax.bar(arms, [rows[a][key] for a in arms], yerr=[rows[a][f"{key}_ci95"] for a in arms],
               color=[f"C{k}" for k in range(len(arms))], capsize=4)
        for k, arm in enumerate(arms):
            ax.scatter([k] * len([r for r in runs if r.arm == arm]), [r.summary[key] for r in runs if r.arm == arm],
                       color="k", s=6, zorder=3)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_yscale("log")
    ax = axes[2]
    for k, arm in enumerate(arms):  # every gang, not a box: at the default rate there are few
        minutes = [d / 60 for r in runs if r.arm == arm for d in r.gang_restarts]
        ax.scatter([k + (j % 5 - 2) * 0.05 for j in range(len(minutes))], minutes, color=f"C{k}", s=18)
        if minutes:
            ax.hlines(sum(minutes) / len(minutes), k - 0.3, k + 0.3, color=f"C{k}", lw=2)
    ax.set_xticks(range(len(arms)), arms, fontsize=8)
    ax.set_yscale("log")
    ax.set_title("minutes from the fault until a hit gang runs again\n(dots: gangs; bar: mean)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def runs_from_json(doc: dict[str, object]) -> list[FaultRun]:
    """The runs of a JSON file the experiment wrote (to plot it again)."""
    runs = doc["runs"]
    assert isinstance(runs, list)
    return [FaultRun(r["policy"], r["seed"], {k: v for k, v in r.items() if isinstance(v, float)},
                     list(r["gang_restarts_s"]), [], r["never_restarted"]) for r in runs]
