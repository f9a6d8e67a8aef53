"""gpufleet and kube-scheduler allocating DRA ResourceClaims side by side on the real control plane.

Every run gets a fresh control plane of `gpufleet.testing.cluster` (as bench/e2e.py: etcd,
kube-apiserver, kube-controller-manager; audit log and node-lifecycle controller off) with N
nodes of 8 H100 GPUs. Each node's GPUs are published in a ResourceSlice shaped as NVIDIA's DRA
driver publishes them (driver `gpu.nvidia.com`, devices `gpu-N` with `type`, `uuid`,
`productName`, capacity `memory`), with NVIDIA's DeviceClass `gpu.nvidia.com`. Nothing plays the
kubelet: only allocation, the claim writes and binding are measured.

- fill: P pods, each with its own ResourceClaim for 1, 2, 4 or 8 GPUs of the class (85/10/4/1 %:
  5,000 pods ask for about 80 % of 1,000 nodes), all created first, then the scheduler started (kube-scheduler v1.37 with its
  default profile; `gpufleet scheduler --dra-drivers gpu.nvidia.com` with the default profile,
  under deploy/'s ServiceAccount and RBAC). Pods per second from the first bind to the last;
  then, from the claims' allocations read back: nodes with all 8 GPUs free (`whole_nodes_free`;
  `whole_gpus_free` = 8 x that: GPUs an 8-GPU job can still get) and GPUs free on nodes that are
  partly taken (`fragmented_gpus_free`).
- gang: 3 nodes; two pods with a 1-GPU claim (and 64 of 192 CPUs) each are placed first, then a
  gang of two pods with an 8-GPU claim each (a PodGroup with minMember 2 for gpufleet; kube-scheduler has no gang).
  kube-scheduler's scores do not see devices, so it spreads the two small claims over two nodes
  and then places the gang pod by pod: one member gets the one whole node, the other waits.
  gpufleet packs the small claims on one node and places the gang as a whole.

Prints a table; with --json the last line is one JSON object with `nodes`, `pods`,
`gpufleet_pods_per_s`, `kube_scheduler_pods_per_s`, `gpufleet_whole_gpus_free`,
`kube_scheduler_whole_gpus_free`, `gang_gpufleet_placed`, `gang_kube_scheduler_placed` and every
run under "runs".

    .venv/bin/python bench/dra.py [--nodes 1000] [--pods 5000] [--schedulers kube-scheduler,gpufleet] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e  # noqa: E402

from gpufleet.model import annotations as ann  # noqa: E402
from gpufleet.testing.cluster import Cluster, binary  # noqa: E402

ROOT = e2e.ROOT
DRIVER = "gpu.nvidia.com"
GPUS = 8
Obj = dict[str, Any]
DEVICE_CLASS: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                                   "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SMALL_CPU = "64"
"""The small jobs of the gang case ask a third of a node's 192 CPUs, so kube-scheduler's
LeastAllocated tells the nodes apart (1 CPU scores the same on every node: a random tie)."""
PODS = "/api/v1/namespaces/default/pods"


def node_slice(node: Obj) -> Obj:
    name = node["metadata"]["name"]
    gpus = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
    devices = [{"name": f"gpu-{g.index}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": g.uuid}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
        "capacity": {"memory": {"value": "80Gi"}}} for g in gpus]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{name}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def claim(name: str, count: int) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": count}}]}}}


def pod(name: str, scheduler: str, claim_name: str, group: str | None = None, cpu: str = "1") -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    if group:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                     "containers": [{"name": "main", "image": "train", "resources": {
                         "requests": {"cpu": cpu, "memory": "4Gi"}, "claims": [{"name": "gpu"}]}}]}}


SIZES = ((1, 0.85), (2, 0.1), (4, 0.04), (8, 0.01))
"""GPUs per claim and their shares: mean 1.29 GPUs, so 5,000 pods ask for about 80 % of 1,000
nodes x 8 GPUs and what the fill leaves whole or fragmented can be compared."""


def workload(n: int, scheduler: str, seed: int = 2) -> tuple[list[Obj], list[Obj]]:
    rng = random.Random(seed)
    sizes = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES], k=n)
    claims = [claim(f"p-{i:05d}-gpu", g) for i, g in enumerate(sizes)]
    return claims, [pod(f"p-{i:05d}", scheduler, f"p-{i:05d}-gpu") for i in range(n)]


def fresh_cluster(tmp: Path, name: str, n_nodes: int) -> tuple[Cluster, e2e.Endpoint]:
    c, ep = e2e.fresh_cluster(tmp, name, n_nodes)
    c.admin.create(DEVICE_CLASS)
    e2e.create_all(ep, [node_slice(n) for n in e2e.nodes(n_nodes)], "/apis/resource.k8s.io/v1/resourceslices")
    return c, ep


def start(which: str, c: Cluster, tmp: Path) -> subprocess.Popen[bytes]:
    tmp.mkdir(parents=True, exist_ok=True)
    log = (tmp / f"{which}.log").open("ab")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    if which == "kube-scheduler":
        return e2e.start_scheduler(which, c, tmp, 0, 100, e2e.PROFILES / "default.yaml")
    kubeconfig = c.service_account_kubeconfig("gpufleet-system", "gpufleet-scheduler", tmp / "gpufleet.kubeconfig")
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [sys.executable, "-m", "gpufleet.cli.scheduler_cmd", "scheduler", "--kubeconfig", str(kubeconfig),
           "--config", str(e2e.PROFILES / "default.yaml"), "--http-port", "0", "--qps", "0", "--burst", "100",
           "--dra-drivers", DRIVER, "--log-level", "WARNING"]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def allocated_per_node(ep: e2e.Endpoint) -> dict[str, int]:
    client = ep.client(1)
    try:
        items = client.get(CLAIMS).json()["items"]
    finally:
        client.close()
    used: dict[str, int] = {}
    for c in items:
        for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", []):
            used[r["pool"]] = used.get(r["pool"], 0) + 1
    return used


def fill_run(which: str, n_nodes: int, n_pods: int, tmp: Path) -> Obj:
    name = f"{which}-fill-{n_nodes}"
    scheduler = "default-scheduler" if which == "kube-scheduler" else "gpufleet"
    c, ep = fresh_cluster(tmp, name, n_nodes)
    try:
        claims, pods = workload(n_pods, scheduler)
        e2e.create_all(ep, claims, CLAIMS)
        watcher = e2e.Watcher(ep)
        e2e.create_all(ep, pods, PODS)
        started = time.monotonic()
        proc = start(which, c, tmp / name)
        try:
            watcher.wait(n_pods, timeout_s=3600, what=name, quiet_s=30)
            cpu = e2e.cpu_seconds(proc)
        finally:
            proc.terminate()
            proc.wait(30)
            watcher.stop()
        times = sorted(watcher.bound.values())
        if len(times) < 2:
            raise SystemExit(f"{name}: {len(times)} pods bound; logs in {tmp / name}")
        used = allocated_per_node(ep)
        whole = n_nodes - sum(1 for n in used.values() if n > 0)
        fragmented = sum(GPUS - n for n in used.values() if 0 < n < GPUS)
        return {"scheduler": which, "run": "fill", "nodes": n_nodes, "pods": n_pods, "bound": len(times),
                "pods_per_s": round((len(times) - 1) / (times[-1] - times[0]), 1),
                "wall_s": round(times[-1] - started, 1), "cpu_s": round(cpu, 1),
                "devices_allocated": sum(used.values()), "whole_nodes_free": whole, "whole_gpus_free": GPUS * whole,
                "fragmented_gpus_free": fragmented}
    finally:
        c.stop()


def gang_run(which: str, tmp: Path) -> Obj:
    name = f"{which}-gang"
    scheduler = "default-scheduler" if which == "kube-scheduler" else "gpufleet"
    c, ep = fresh_cluster(tmp, name, 3)
    try:
        watcher = e2e.Watcher(ep)
        proc = start(which, c, tmp / name)
        try:
            e2e.create_all(ep, [claim(f"small-{i}", 1) for i in range(2)], CLAIMS)
            for i in range(2):  # one at a time, as small jobs arrive
                e2e.create_all(ep, [pod(f"small-{i}", scheduler, f"small-{i}", cpu=SMALL_CPU)], PODS)
                watcher.wait(i + 1, timeout_s=120, what=f"{name} small-{i}")
            if which == "gpufleet":
                c.admin.create({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}})
            e2e.create_all(ep, [claim(f"train-{i}", GPUS) for i in range(2)], CLAIMS)
            e2e.create_all(ep, [pod(f"train-{i}", scheduler, f"train-{i}", "train") for i in range(2)], PODS)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and sum(1 for p in watcher.bound if p.startswith("train-")) < 2:
                time.sleep(0.2)
            time.sleep(5)  # anything still coming
        finally:
            proc.terminate()
            proc.wait(30)
            watcher.stop()
        small_nodes = len({n for n, k in allocated_per_node(ep).items() if 0 < k < GPUS})
        placed = sum(1 for p in watcher.bound if p.startswith("train-"))
        return {"scheduler": which, "run": "gang", "nodes": 3, "gang_size": 2, "gang_placed": placed,
                "nodes_split_by_small_claims": small_nodes}
    finally:
        c.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--schedulers", default="kube-scheduler,gpufleet")
    ap.add_argument("--skip-fill", action="store_true", help="only the gang case")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    versions = {name: subprocess.run([str(binary(name)), "--version"], capture_output=True, text=True).stdout.strip()
                for name in ("kube-apiserver",)}
    runs: list[Obj] = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-dra-bench-") as tmp:
        for which in args.schedulers.split(","):
            if not args.skip_fill:
                runs.append(fill_run(which, args.nodes, args.pods, Path(tmp)))
                print(json.dumps(runs[-1]), file=sys.stderr)
            runs.append(gang_run(which, Path(tmp)))
            print(json.dumps(runs[-1]), file=sys.stderr)
    out: Obj = {"nodes": args.nodes, "pods": args.pods}
    for r in runs:
        key = r["scheduler"].replace("-", "_")
        if r["run"] == "fill":
            out[f"{key}_pods_per_s"] = r["pods_per_s"]
            out[f"{key}_whole_gpus_free"] = r["whole_gpus_free"]
            out[f"{key}_fragmented_gpus_free"] = r["fragmented_gpus_free"]
        else:
            out[f"gang_{key}_placed"] = r["gang_placed"]
    out.update(runs=runs, versions=versions,
               machine=f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} "
                       f"{platform.python_version()}")
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
