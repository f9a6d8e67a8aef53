"""The FGD packing experiment on Alibaba's openb trace, asked once through extended resources
and once through DRA ResourceClaims (`sim.claims`): whether every attempt places the same.

    .venv/bin/python bench/dra_openb.py --traces ../shared/traces [--policy fgd] [--seeds 1] [--json]

Prints, per policy and seed, the tasks placed each way, the attempts whose metrics differ and
both runs' seconds; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from gpufleet.sim import fgd_experiment
from gpufleet.sim.traces import openb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, required=True, help="the folder holding alibaba-gpu-v2023-openb")
    ap.add_argument("--variant", default="default")
    ap.add_argument("--policy", action="append", help="FGD-experiment policy (repeatable; default fgd, gpufleet)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    workload = openb.load(*openb.variant_files(args.traces, args.variant))
    runs = []
    for policy in args.policy or ["fgd", "gpufleet"]:
        for seed in range(args.seeds):
            start = time.perf_counter()
            plain = fgd_experiment.run(workload, policy, seed)
            middle = time.perf_counter()
            claims = fgd_experiment.run(workload, policy, seed, claims=True)
            end = time.perf_counter()
            differ = int(sum(np.count_nonzero(claims.series[m] != s) for m, s in plain.series.items()))
            runs.append({"policy": policy, "seed": seed, "tasks": len(plain.arrived_pct), "placed": plain.placed,
                         "placed_with_claims": claims.placed, "differing_metric_values": differ,
                         "seconds": round(middle - start, 1), "seconds_with_claims": round(end - middle, 1)})
            print(f"{policy} seed {seed}: {plain.placed} placed, {claims.placed} with claims; "
                  f"{differ} metric values differ; {middle - start:.1f} s / {end - middle:.1f} s", file=sys.stderr)
    out = {"variant": args.variant, "runs": runs}
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
