"""End-to-end scheduling throughput and latency through the API, against the local API server.

Three phases, each on a fresh local API server (`gpufleet.testing.apiserver`) with simulated
GPU nodes and kubelets, and `gpufleet scheduler` as a separate process:

1. throttled: N pods are created first, then the scheduler starts with the client budget of
   kube-scheduler (--qps 50 --burst 100); binds/s is measured after the burst is spent
   (binds beyond the first 2 x burst), and compared with the 50 QPS budget (a bind is one
   request: the Binding carries the assignment annotation);
2. unthrottled: the same with --qps 0; binds/s over all binds;
3. latency: the scheduler running unthrottled, pods created at a steady rate; create-to-bound
   is from the create call's return to the bound pod's watch event, both seen by this process.

Every pod fits (fractions, whole GPUs, MIG slices, CPU-only), so only binding is measured;
`tests/kube/live/test_e2e.py` covers the unschedulable side. Prints figures; with --json the
last line is one JSON object.

    .venv/bin/python bench/e2e.py [--nodes 200] [--pods 1500] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpufleet.testing.apiserver import ApiServer, gpu_nodes  # noqa: E402

PROFILES = ROOT / "src/gpufleet/framework/profiles"


def fitting_pods(n: int, prefix: str, seed: int) -> list[dict[str, Any]]:
    """Pods that all fit on 200 nodes: small fractions, single GPUs, MIG 1g slices (one in 40:
    the 200 nodes carve 72), CPU-only."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        roll = rng.random()
        limits: dict[str, Any] = ({"nvidia.com/mig-1g.10gb": 1} if i % 40 == 0 else
                                  {"gpufleet.io/gpu-milli": rng.choice((100, 200))} if roll < 0.45 else
                                  {"nvidia.com/gpu": 1} if roll < 0.6 else {})
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-{i:05d}", "namespace": "default"},
                    "spec": {"schedulerName": "gpufleet", "containers": [{
                        "name": "main", "image": "x",
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": limits}}]}})
    return out


def _watch(url: str, out: Any) -> None:
    """In a child process: print `name time` for each pod when first seen bound."""
    seen: set[str] = set()
    client = httpx2.Client(base_url=url, timeout=httpx2.Timeout(10, read=None), trust_env=False)
    with client.stream("GET", "/api/v1/pods", params={"watch": "true"}) as r:
        for line in r.iter_lines():
            if not line:
                continue
            obj = json.loads(line).get("object") or {}
            name = (obj.get("metadata") or {}).get("name")
            if name is not None and (obj.get("spec") or {}).get("nodeName") and name not in seen:
                seen.add(name)
                out.put((name, time.monotonic()))


class Watcher:
    """Watches pods over HTTP and records when each is first seen bound (monotonic time).

    The watch runs in a child process (CLOCK_MONOTONIC is system-wide), so that decoding
    every event does not take the local API server's interpreter lock in this process.
    """

    def __init__(self, url: str) -> None:
        self.bound: dict[str, float] = {}
        self._queue: multiprocessing.Queue[tuple[str, float]] = multiprocessing.Queue()
        self._proc = multiprocessing.Process(target=_watch, args=(url, self._queue), daemon=True)
        self._proc.start()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            name, t = self._queue.get()
            self.bound[name] = t

    def stop(self) -> None:
        self._proc.terminate()


def create(url: str, pods: list[dict[str, Any]], threads: int = 8) -> dict[str, float]:
    client = httpx2.Client(base_url=url, timeout=30, trust_env=False,
                           limits=httpx2.Limits(max_connections=threads, max_keepalive_connections=threads))

    def post(pod: dict[str, Any]) -> tuple[str, float]:
        r = client.post("/api/v1/namespaces/default/pods", content=json.dumps(pod).encode(),
                        headers={"Content-Type": "application/json"})
        r.raise_for_status()
        return pod["metadata"]["name"], time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        done = dict(pool.map(post, pods))
    client.close()
    return done


ASSIGN = ["binding"]
"""--assign-with for the scheduler (set from the command line)."""
PROFILE = [PROFILES / "default.yaml"]
"""--config for the scheduler (set from the command line: --profile)."""


def start_scheduler(kubeconfig: Path, log: Path, qps: float, burst: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [sys.executable, "-m", "gpufleet.cli.scheduler_cmd", "scheduler", "--kubeconfig", str(kubeconfig),
           "--config", str(PROFILE[0]), "--http-port", "0", "--qps", str(qps), "--burst", str(burst),
           "--log-level", "WARNING", "--assign-with", ASSIGN[0]]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env)


def cluster(nodes: int, tmp: Path, name: str) -> tuple[ApiServer, Path]:
    srv = ApiServer(history=100_000).start()
    for n in gpu_nodes(nodes, seed=1):
        srv.create(n)
    return srv, srv.write_kubeconfig(tmp / f"{name}.kubeconfig")


def wait_bound(w: Watcher, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while len(w.bound) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    if len(w.bound) < n:
        raise SystemExit(f"only {len(w.bound)} of {n} pods bound after {timeout_s} s")


def batch(nodes: int, pods: int, qps: float, burst: int, tmp: Path, name: str) -> dict[str, float]:
    srv, kc = cluster(nodes, tmp, name)
    try:
        create(srv.url, fitting_pods(pods, name, seed=2))
        w = Watcher(srv.url)
        proc = start_scheduler(kc, tmp / f"{name}.log", qps, burst)
        try:
            wait_bound(w, pods, timeout_s=pods / max(qps, 20) + 120)
        finally:
            proc.terminate()
            proc.wait(20)
            w.stop()
        times = sorted(w.bound.values())
        skip = min(2 * burst, pods // 2) if qps > 0 else 0
        steady = (len(times) - 1 - skip) / (times[-1] - times[skip])
        return {"pods": pods, "binds_per_s": round(steady, 1),
                "all_binds_s": round(times[-1] - times[0], 2), "counted_after": skip}
    finally:
        srv.stop()


def latency(nodes: int, pods: int, rate: float, tmp: Path) -> dict[str, float]:
    srv, kc = cluster(nodes, tmp, "latency")
    try:
        w = Watcher(srv.url)
        proc = start_scheduler(kc, tmp / "latency.log", 0, 100)
        try:
            while not re.search(r"http :\d+", (tmp / "latency.log").read_text()):
                time.sleep(0.1)
            time.sleep(1.0)  # informers synced
            created: dict[str, float] = {}
            pending = fitting_pods(pods, "lat", seed=3)
            start = time.monotonic()
            for i in range(0, pods, 10):  # ten pods per create burst, paced to `rate`
                created.update(create(srv.url, pending[i:i + 10], threads=10))
                lag = start + (i + 10) / rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
            wait_bound(w, pods, 120)
        finally:
            proc.terminate()
            proc.wait(20)
            w.stop()
        lat = sorted(w.bound[k] - created[k] for k in created)
        return {"pods": pods, "rate_per_s": rate, "p50_ms": round(1000 * statistics.median(lat), 1),
                "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1), "max_ms": round(1000 * lat[-1], 1)}
    finally:
        srv.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=1500, help="pods per throughput phase")
    parser.add_argument("--latency-pods", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="pods created per second in the latency phase")
    parser.add_argument("--assign-with", choices=["binding", "patch"], default="binding",
                        help="how the scheduler writes the assignment annotation (see docs/scheduler.md)")
    parser.add_argument("--phases", default="throttled,unthrottled,latency")
    parser.add_argument("--profile", default="default",
                        help="a shipped profile (default, bestfit, ...) or a profile YAML file (default: default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ASSIGN[0] = args.assign_with
    PROFILE[0] = Path(args.profile) if args.profile.endswith((".yaml", ".yml")) else PROFILES / f"{args.profile}.yaml"
    if not PROFILE[0].is_file():
        parser.error(f"--profile: no such profile {args.profile!r} ({PROFILE[0]})")
    phases = set(args.phases.split(","))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        throttled: dict[str, float] = {}
        unthrottled: dict[str, float] = {}
        lat: dict[str, float] = {}
        if "throttled" in phases:
            throttled = batch(args.nodes, min(args.pods, 800), 50, 100, tmp, "throttled")
            throttled["budget_qps"] = 50
            throttled["of_budget_pct"] = round(100 * throttled["binds_per_s"] / 50, 1)
            print(f"throttled (--qps 50 --burst 100): {throttled['binds_per_s']} binds/s after the burst "
                  f"= {throttled['of_budget_pct']} % of the 50 QPS budget ({throttled['pods']} pods)")
        if "unthrottled" in phases:
            unthrottled = batch(args.nodes, args.pods, 0, 100, tmp, "unthrottled")
            print(f"unthrottled (--qps 0): {unthrottled['binds_per_s']} binds/s ({unthrottled['pods']} pods in "
                  f"{unthrottled['all_binds_s']} s)")
        if "latency" in phases:
            lat = latency(args.nodes, args.latency_pods, args.rate, tmp)
            print(f"create-to-bound at {lat['rate_per_s']:.0f} pods/s, unthrottled: p50 {lat['p50_ms']} ms, "
                  f"p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms")
    result = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
              "nodes": args.nodes, "assign_with": args.assign_with, "profile": args.profile, "throttled": throttled,
              "unthrottled": unthrottled, "latency": lat,
              "goals_met": throttled.get("of_budget_pct", 0) >= 95 and unthrottled.get("binds_per_s", 0) >= 500}
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
