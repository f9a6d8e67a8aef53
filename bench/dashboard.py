"""The dashboard at scale: the document the server builds, and the page in headless Chromium.

For each cluster size (default 200, 1,000 and 5,000 nodes of 8 GPUs, from bench/cluster_gen.py)
one scheduling cycle with the `bestfit` profile places pods on it until it is about 80 % full;
what is left waits with the core's reasons, in 100 queues. Then, best of `--runs`:

* `document`: `web.view.document` of that fleet (server side) and the JSON's size;
* `first view`: from navigation start to the end of the first drawing, in Chromium
  (`window.gpufleetDashboard.firstViewMs`: the page's own clock);
* `update`: a new version pushed over the live stream until the page has drawn it, measured
  here (end to end, including the server's 0.5 s stream poll and the document's build) and in
  the page (`updateMs`: parse and draw).

The 200-node row is the baseline the larger ones are read against (the README's cluster).
Goal (issue 23): the first view under 1 s at 5,000 nodes on this machine. With --json FILE the
results are also written there.

    .venv/bin/python bench/dashboard.py [--nodes 200,1000,5000] [--runs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import sys
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_gen  # noqa: E402

from gpufleet.core.cycle import schedule  # noqa: E402
from gpufleet.framework.profile import build_for  # noqa: E402
from gpufleet.framework.profiles import builtin  # noqa: E402
from gpufleet.model import ClusterSnapshot  # noqa: E402
from gpufleet.testing.browser import chromium  # noqa: E402
from gpufleet.web.fleet import Fleet, PodRef, queue_rows, waiting_of  # noqa: E402
from gpufleet.web.server import DashboardServer  # noqa: E402
from gpufleet.web.view import document  # noqa: E402


def make_fleet(n: int, seed: int = 0) -> Fleet:
    rng = random.Random(seed)
    nodes = cluster_gen.nodes(n, rng)
    nodes = [dataclasses.replace(node, labels=MappingProxyType({**node.labels, "karpenter.sh/nodepool": f"pool-{i % 4}"}))
             for i, node in enumerate(nodes)]
    pods, groups = cluster_gen.pods(int(n * 8 * 1.1), rng)
    queues = cluster_gen.queues(rng, n * 8)
    leaves = [q.name for q in queues if not any(c.parent == q.name for c in queues)]
    pods = cluster_gen.in_queues(pods, leaves, rng)
    snap = ClusterSnapshot.build(nodes, pod_groups=groups)
    settings = builtin("bestfit")
    result = schedule(snap, pods, build_for(settings, pods), now=0.0, rng=random.Random(seed))
    placed = {p.pod for p in result.binds}
    snap = snap.apply(result.binds)
    waiting = [p for p in pods if p.uid not in placed]
    reasons = {uid: s.message for uid, s in result.unschedulable.items()}
    refs = {p.uid: PodRef(p.key, p.namespace, p.queue) for p in pods if p.uid in placed}
    return Fleet(f"bench: {n} nodes", time.time(), tuple(nodes), tuple(snap.placements.values()),
                 MappingProxyType(refs), waiting_of(waiting, reasons), queue_rows(queues, snap, waiting))


class Bumping:
    """One frame whose version goes up when told (a live scheduler's cache changing)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet_ = fleet
        self.v = 1
        self.lock = threading.Lock()

    def frames(self) -> int:
        return 1

    def times(self) -> list[float]:
        return [self.fleet_.time]

    def fleet(self, frame: int) -> Fleet:
        return self.fleet_

    def version(self) -> int:
        with self.lock:
            return self.v


def measure(n: int, runs: int) -> dict[str, Any]:
    started = time.perf_counter()
    fleet = make_fleet(n)
    built_s = time.perf_counter() - started
    doc_s, size = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        body = json.dumps(document(fleet), separators=(",", ":")).encode()
        doc_s.append(time.perf_counter() - t)
        size = len(body)
    source = Bumping(fleet)
    server = DashboardServer(source, port=0, poll_s=0.5).start()
    first, update_e2e, update_page = [], [], []
    try:
        with chromium() as browser:
            for _ in range(runs):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(server.url)
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                first.append(page.evaluate("() => window.gpufleetDashboard.firstViewMs") / 1000)
                renders = page.evaluate("() => window.gpufleetDashboard.renders")
                t = time.perf_counter()
                with source.lock:
                    source.v += 1
                while page.evaluate("() => window.gpufleetDashboard.renders") == renders:
                    page.wait_for_timeout(5)
                update_e2e.append(time.perf_counter() - t)
                update_page.append(page.evaluate("() => window.gpufleetDashboard.updateMs") / 1000)
                page.close()
    finally:
        server.stop()
    s = document(fleet)["summary"]
    return {"nodes": n, "gpus": s["gpus"], "running": s["running"], "pending": s["pending"],
            "queues": len(fleet.queues), "document_s": min(doc_s), "json_bytes": size,
            "first_view_s": min(first), "first_view_runs_s": first, "update_end_to_end_s": min(update_e2e),
            "update_in_page_s": min(update_page), "fleet_setup_s": built_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", default="200,1000,5000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rows = []
    print(f"{'nodes':>6} {'GPUs':>6} {'pods':>6} {'pending':>7} {'document':>9} {'JSON':>8} "
          f"{'first view':>10} {'update (page)':>13} {'update (e2e)':>12}")
    for n in (int(x) for x in args.nodes.split(",")):
        r = measure(n, args.runs)
        rows.append(r)
        print(f"{r['nodes']:>6} {r['gpus']:>6} {r['running']:>6} {r['pending']:>7} {r['document_s']*1000:>7.0f}ms "
              f"{r['json_bytes'] / 1e6:>6.2f}MB {r['first_view_s']*1000:>8.0f}ms {r['update_in_page_s']*1000:>11.0f}ms "
              f"{r['update_end_to_end_s']*1000:>10.0f}ms", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": platform.platform(),
                                         "cpus": __import__("os").cpu_count(), "command": " ".join(sys.argv),
                                         "results": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
