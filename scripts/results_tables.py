"""Print docs/results.md's tables from `gpufleet experiment fgd --json` outputs.

    .venv/bin/python scripts/results_tables.py docs/results   # reads fgd-openb-<variant>.json

Published numbers (shared/experiments/fgd.md section 5) are printed beside ours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PUBLISHED_T1 = {  # @90, 95, 100, 110, 120, 130 (mean, sd)
    "random": [(14.98, .29), (14.29, .34), (13.70, .33), (13.12, .34), (12.72, .31), (12.53, .32)],
    "dotprod": [(10.02, .05), (9.42, .19), (9.38, .19), (9.30, .20), (9.23, .20), (9.15, .20)],
    "clustering": [(10.02, .05), (8.39, .61), (8.35, .61), (8.27, .62), (8.20, .62), (8.12, .62)],
    "packing": [(10.02, .05), (8.26, .53), (8.22, .53), (8.14, .55), (8.08, .55), (8.00, .55)],
    "bestfit": [(10.01, .04), (7.18, .15), (7.14, .14), (7.07, .13), (7.00, .14), (6.92, .13)],
    "fgd": [(10.02, .05), (5.09, .06), (4.77, .11), (4.70, .10), (4.65, .10), (4.61, .08)],
}
PUBLISHED_T2 = {  # frag % of capacity @50, 70, 80, 90, 100
    "random": [15.10, 15.90, 15.92, 14.48, 13.49], "dotprod": [12.09, 10.78, 10.09, 9.43, 9.30],
    "clustering": [12.11, 10.27, 9.36, 8.45, 8.21], "packing": [12.01, 10.19, 9.28, 8.37, 8.13],
    "bestfit": [10.81, 9.13, 8.29, 7.41, 7.05], "fgd": [8.93, 6.95, 5.97, 5.00, 4.73],
}
PUBLISHED_T3 = {  # frag ratio @50, 70, 80, 90, 100
    "random": [30.17, 51.63, 74.64, 96.65, 98.44], "dotprod": [24.19, 35.92, 50.50, 94.19, 99.19],
    "clustering": [24.23, 34.23, 46.86, 84.33, 98.40], "packing": [24.02, 33.95, 46.43, 83.60, 98.88],
    "bestfit": [21.62, 30.44, 41.49, 74.08, 98.84], "fgd": [17.86, 23.17, 29.86, 49.97, 99.07],
}
PUBLISHED_T4 = {  # gpushare 40, 60, 80, 100 @100
    "random": [15.14, 17.19, 19.38, 21.10], "dotprod": [10.70, 13.18, 15.86, 18.02],
    "clustering": [10.24, 13.10, 15.50, 17.77], "packing": [10.23, 12.85, 15.35, 17.87],
    "bestfit": [8.56, 10.94, 13.34, 15.38], "fgd": [6.04, 8.74, 10.92, 13.36],
}
PUBLISHED_T5 = {  # multigpu 20, 30, 40, 50 @100
    "random": [13.08, 13.37, 14.62, 18.72], "dotprod": [8.15, 6.89, 5.96, 5.27],
    "clustering": [6.66, 5.45, 4.65, 4.31], "packing": [6.50, 5.30, 4.41, 3.94],
    "bestfit": [6.27, 5.43, 4.90, 4.38], "fgd": [4.47, 3.64, 3.09, 2.91],
}


def load(folder: Path, variant: str) -> dict | None:  # type: ignore[type-arg]
    path = folder / f"fgd-openb-{variant}.json"
    return json.loads(path.read_text())["policies"] if path.is_file() else None


def cell(data: dict, policy: str, metric: str, col: str) -> str:  # type: ignore[type-arg]
    v = data.get(policy, {}).get(metric, {}).get(col)
    return "-" if not v or v["mean"] is None else f"{v['mean']:.2f} ± {v['sd']:.2f}"


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n**{title}**\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main(folder: Path) -> None:
    policies = list(PUBLISHED_T1) + ["gpufleet"]
    d = load(folder, "default")
    if d:
        cols = ["90", "95", "100", "110", "120", "130"]
        table("T1 default: unallocated GPU % (ours, 10 seeds; published in brackets)", ["policy"] + [f"@{c}%" for c in cols],
              [[p] + [cell(d, p, "unallocated_gpu_pct", c) + (f" ({PUBLISHED_T1[p][i][0]:.2f})" if p in PUBLISHED_T1 else "")
                      for i, c in enumerate(cols)] for p in policies])
        cols = ["50", "70", "80", "90", "100"]
        table("T2 default: fragmented GPU % of capacity", ["policy"] + [f"@{c}%" for c in cols],
              [[p] + [cell(d, p, "frag_gpu_pct", c) + (f" ({PUBLISHED_T2[p][i]:.2f})" if p in PUBLISHED_T2 else "")
                      for i, c in enumerate(cols)] for p in policies])
        table("T3 default: fragmentation ratio %", ["policy"] + [f"@{c}%" for c in cols],
              [[p] + [cell(d, p, "frag_ratio_pct", c) + (f" ({PUBLISHED_T3[p][i]:.2f})" if p in PUBLISHED_T3 else "")
                      for i, c in enumerate(cols)] for p in policies])
    for name, variants, published in (("T4 GPU-sharing share: unallocated GPU % @100%", ["gpushare40", "gpushare60", "gpushare80", "gpushare100"], PUBLISHED_T4),
                                      ("T5 multi-GPU share: unallocated GPU % @100%", ["multigpu20", "multigpu30", "multigpu40", "multigpu50"], PUBLISHED_T5)):
        data = {v: load(folder, v) for v in variants}
        if not any(data.values()):
            continue
        table(name, ["policy"] + variants,
              [[p] + [(cell(data[v], p, "unallocated_gpu_pct", "100") if data[v] else "-")
                      + (f" ({published[p][i]:.2f})" if p in published else "") for i, v in enumerate(variants)]
               for p in policies])
    g20 = load(folder, "gpushare20")
    if g20:
        table("gpushare20 (no published table): unallocated GPU % @100%", ["policy", "@100%"],
              [[p, cell(g20, p, "unallocated_gpu_pct", "100")] for p in policies])


def lookahead_table(folder: Path) -> None:
    """gpufleet-lookahead (its own runs) beside FGD and gpufleet (the 7-policy runs), same seeds."""
    variants = ["default", "gpushare20", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
                "multigpu20", "multigpu30", "multigpu40", "multigpu50"]
    rows = []
    for v in variants:
        path = folder / f"lookahead-openb-{v}.json"
        base = load(folder, v)
        if not path.is_file() or base is None:
            continue
        la = json.loads(path.read_text())["policies"]
        cells = [v]
        for col in ("95", "100"):
            for data, policy in ((base, "fgd"), (base, "gpufleet"), (la, "gpufleet-lookahead")):
                cells.append(cell(data, policy, "unallocated_gpu_pct", col))
        rows.append(cells)
    if rows:
        table("gpufleet-lookahead against FGD and gpufleet: unallocated GPU % at arrived = 95 % and 100 % (10 seeds)",
              ["trace", "FGD @95", "gpufleet @95", "lookahead @95", "FGD @100", "gpufleet @100", "lookahead @100"], rows)


def plot(folder: Path) -> None:
    """Write <folder>/fgd-openb-default.png from the default run."""
    from gpufleet.sim import report

    data = json.loads((folder / "fgd-openb-default.json").read_text())["policies"]
    report.write_png(data, folder / "fgd-openb-default.png")


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
    main(target)
    lookahead_table(target)
    if (target / "fgd-openb-default.json").is_file():
        plot(target)
