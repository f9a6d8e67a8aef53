"""gpufleet and kube-scheduler allocating DRA ResourceClaims side by side on the real control plane.

Every run gets a fresh control plane of `gpufleet.testing.cluster` (as bench/e2e.py: etcd,
kube-apiserver, kube-controller-manager; audit log and node-lifecycle controller off) with N
nodes of 8 H100 GPUs, published in ResourceSlices of driver `gpu.nvidia.com` by the agent's own
publisher (`gpufleet.testing.dra_objects`: NVIDIA's device names and attributes), with NVIDIA's
DeviceClasses `gpu.nvidia.com` and `mig.nvidia.com`. Nothing plays the kubelet: only
allocation, the claim writes and binding are measured.

- fill: P pods, each with its own ResourceClaim, all created first, then the scheduler started
  (kube-scheduler v1.37 with its default profile; `gpufleet scheduler --dra-drivers gpu.nvidia.com`
  with the default profile, under deploy/'s ServiceAccount and RBAC). Pods per second from the
  first bind to the last. `--mix mixed` (the default): 3 nodes in 5 publish whole GPUs, 1 in 5
  Dynamic MIG (each GPU whole and every MIG placement, as partitionable devices sharing the GPU's
  counters), 1 in 5 GPUs shared by memory (consumable capacity); the pods ask for 1, 2, 4 or 8
  whole GPUs, a MIG device of 1g.10gb, 2g.20gb or 3g.40gb, or 10, 20 or 40 GiB of a shared GPU
  (`KINDS`). `--mix whole`: every node whole GPUs, every pod whole GPUs. After the fill, from the
  claims' allocations read back: nodes with nothing allocated (`whole_nodes_free`;
  `whole_gpus_free` = 8 x that: GPUs an 8-GPU job can still get), GPUs untouched on nodes that
  are partly taken (`fragmented_gpus_free`), GPUs holding MIG devices (`gpus_with_mig`) and
  GPUs holding memory shares smaller than the GPU (`gpus_shared`): fewer is better packed; and
  any device, MIG memory slice or shared memory handed out beyond what it has (`overcommitted`,
  must be 0).
- raw: the same pods and claims, allocated in advance (first fit), then written as fast as the
  server takes them by 4 processes x 8 threads, exactly the three writes a scheduler must make
  per pod (claim with its finalizer, claim status with allocation and reservedFor, Binding):
  this machine's ceiling for claim pods, whatever the scheduler.
- gang: 3 nodes; two pods with a 1-GPU claim (and 64 of 192 CPUs) each are placed first, then a
  gang of two pods with an 8-GPU claim each (a PodGroup with minMember 2 for gpufleet; kube-scheduler has no gang).
  kube-scheduler's scores do not see devices, so it spreads the two small claims over two nodes
  and then places the gang pod by pod: one member gets the one whole node, the other waits.
  gpufleet packs the small claims on one node and places the gang as a whole.

Prints a table; with --json the last line is one JSON object with `nodes`, `pods`,
`raw_pods_per_s`, `gpufleet_pods_per_s`, `kube_scheduler_pods_per_s`, `gpufleet_whole_gpus_free`,
`kube_scheduler_whole_gpus_free`, `gang_gpufleet_placed`, `gang_kube_scheduler_placed` and every
run under "runs".

    .venv/bin/python bench/dra.py [--nodes 1000] [--pods 5000] [--mix mixed|whole]
        [--schedulers raw,kube-scheduler,gpufleet] [--skip-fill] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e  # noqa: E402

from gpufleet.agent.resourceslices import MigMode  # noqa: E402
from gpufleet.model import annotations as ann  # noqa: E402
from gpufleet.model.dra import node_selector_for  # noqa: E402
from gpufleet.model.units import parse_quantity  # noqa: E402
from gpufleet.testing import dra_objects as dra  # noqa: E402
from gpufleet.testing.cluster import Cluster, binary  # noqa: E402

ROOT = e2e.ROOT
DRIVER = dra.NVIDIA
GPUS = 8
Obj = dict[str, Any]
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODS = "/api/v1/namespaces/default/pods"
SMALL_CPU = "64"
"""The small jobs of the gang case ask a third of a node's 192 CPUs, so kube-scheduler's
LeastAllocated tells the nodes apart (1 CPU scores the same on every node: a random tie)."""

KINDS: dict[str, tuple[tuple[str, Obj, float], ...]] = {
    "whole": (("gpu-1", dra.whole_gpus(1), 0.85), ("gpu-2", dra.whole_gpus(2), 0.10),
              ("gpu-4", dra.whole_gpus(4), 0.04), ("gpu-8", dra.whole_gpus(8), 0.01)),
    "mixed": (("gpu-1", dra.whole_gpus(1), 0.60), ("gpu-2", dra.whole_gpus(2), 0.10),
              ("gpu-4", dra.whole_gpus(4), 0.04), ("gpu-8", dra.whole_gpus(8), 0.01),
              ("mig-1g.10gb", dra.mig_device("1g.10gb"), 0.08), ("mig-2g.20gb", dra.mig_device("2g.20gb"), 0.05),
              ("mig-3g.40gb", dra.mig_device("3g.40gb"), 0.03),
              ("mem-10Gi", dra.gpu_memory("10Gi"), 0.05), ("mem-20Gi", dra.gpu_memory("20Gi"), 0.03),
              ("mem-40Gi", dra.gpu_memory("40Gi"), 0.01)),
}
"""Pod kinds per mix: name, the claim's one request, share of pods. `whole`: mean 1.29 GPUs, so
5,000 pods ask for about 80 % of 1,000 nodes x 8 GPUs; `mixed`: about 68 % (5,200 whole GPUs,
about 190 GPUs of MIG placements and 90 of shared memory), so what the fill leaves whole or
fragmented can be compared."""


def node_kind(i: int, mix: str) -> str:
    if mix == "whole":
        return "whole"
    return {3: "mig", 4: "shared"}.get(i % 5, "whole")


def node_slices(node: Obj, i: int, mix: str) -> tuple[Obj, ...]:
    gpus = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
    kind = node_kind(i, mix)
    return dra.node_slices(node["metadata"]["name"], [g.uuid for g in gpus],
                           mig=MigMode.DYNAMIC if kind == "mig" else MigMode.STATIC, memory_shares=kind == "shared")


def pod(name: str, scheduler: str, claim_name: str, group: str | None = None, cpu: str = "1") -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    if group:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                     "containers": [{"name": "main", "image": "train", "resources": {
                         "requests": {"cpu": cpu, "memory": "4Gi"}, "claims": [{"name": "gpu"}]}}]}}


def workload(n: int, scheduler: str, mix: str, seed: int = 2) -> tuple[list[Obj], list[Obj], list[str]]:
    """Claims, pods and each pod's kind."""
    kinds = KINDS[mix]
    rng = random.Random(seed)
    chosen = rng.choices(kinds, weights=[w for _, _, w in kinds], k=n)
    claims = [dra.claim(f"p-{i:05d}-gpu", "default", request) for i, (_, request, _) in enumerate(chosen)]
    pods = [pod(f"p-{i:05d}", scheduler, f"p-{i:05d}-gpu") for i in range(n)]
    return claims, pods, [k for k, _, _ in chosen]


def fresh_cluster(tmp: Path, name: str, n_nodes: int, mix: str) -> tuple[Cluster, e2e.Endpoint]:
    c, ep = e2e.fresh_cluster(tmp, name, n_nodes)
    for device_class in dra.device_classes():
        c.admin.create(device_class)
    e2e.create_all(ep, [s for i, n in enumerate(e2e.nodes(n_nodes)) for s in node_slices(n, i, mix)], SLICES)
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


def read_all(ep: e2e.Endpoint, path: str) -> list[Obj]:
    client = ep.client(1)
    try:
        items: list[Obj] = client.get(path).json()["items"]
        return items
    finally:
        client.close()


# --- what the fill left


def _gpu_of(device: str) -> int:
    m = re.match(r"gpu-(\d+)", device)
    if m is None:
        raise SystemExit(f"device {device!r} is not named gpu-<minor>[...]")
    return int(m.group(1))


def after_fill(claims: Iterable[Obj], slices: Iterable[Obj], n_nodes: int) -> Obj:
    """Whole, fragmented and partitioned GPUs, and every overcommitment, from the allocations read back."""
    devices: dict[tuple[str, str], Obj] = {}
    counter_sets: dict[tuple[str, str], dict[str, Decimal]] = {}
    for s in slices:
        pool = s["spec"]["pool"]["name"]
        for d in s["spec"].get("devices", []):
            devices[pool, d["name"]] = d
        for cs in s["spec"].get("sharedCounters", []):
            counter_sets[pool, cs["name"]] = {k: parse_quantity(v["value"], cs["name"]) for k, v in cs["counters"].items()}
    used_gpus: dict[str, set[int]] = {}
    with_mig: set[tuple[str, int]] = set()
    shared: set[tuple[str, int]] = set()
    holders: dict[tuple[str, str], int] = {}
    memory: dict[tuple[str, str], Decimal] = {}
    counters: dict[tuple[str, str, str], Decimal] = {}
    for c in claims:
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            key = (r["pool"], r["device"])
            d = devices[key]
            gpu = _gpu_of(r["device"])
            used_gpus.setdefault(r["pool"], set()).add(gpu)
            holders[key] = holders.get(key, 0) + 1
            if d["attributes"]["type"]["string"] == "mig":
                with_mig.add((r["pool"], gpu))
            if d.get("allowMultipleAllocations"):
                taken = parse_quantity((r.get("consumedCapacity") or {}).get("memory", d["capacity"]["memory"]["value"]),
                                       r["device"])
                memory[key] = memory.get(key, Decimal(0)) + taken
                if taken < parse_quantity(d["capacity"]["memory"]["value"], r["device"]):
                    shared.add((r["pool"], gpu))  # a share, not a whole-GPU claim on a shareable GPU
            for consumed in d.get("consumesCounters", []):
                for name, v in consumed["counters"].items():
                    k3 = (r["pool"], consumed["counterSet"], name)
                    counters[k3] = counters.get(k3, Decimal(0)) + parse_quantity(v["value"], name)
    over = [f"{p}/{d} held {n} times" for (p, d), n in holders.items()
            if n > 1 and not devices[p, d].get("allowMultipleAllocations")]
    over += [f"{p}/{d} memory {m} of {devices[p, d]['capacity']['memory']['value']}" for (p, d), m in memory.items()
             if m > parse_quantity(devices[p, d]["capacity"]["memory"]["value"], d)]
    over += [f"{p} {cs}.{name} {v} of {counter_sets[p, cs][name]}" for (p, cs, name), v in counters.items()
             if v > counter_sets[p, cs][name]]
    whole = n_nodes - sum(1 for gpus in used_gpus.values() if gpus)
    return {"devices_allocated": sum(holders.values()), "whole_nodes_free": whole, "whole_gpus_free": GPUS * whole,
            "fragmented_gpus_free": sum(GPUS - len(gpus) for gpus in used_gpus.values() if 0 < len(gpus) < GPUS),
            "gpus_with_mig": len(with_mig), "gpus_shared": len(shared), "overcommitted": len(over),
            "overcommitted_examples": over[:5]}


def fill_run(which: str, n_nodes: int, n_pods: int, mix: str, tmp: Path) -> Obj:
    name = f"{which}-fill-{mix}-{n_nodes}"
    scheduler = "default-scheduler" if which == "kube-scheduler" else "gpufleet"
    c, ep = fresh_cluster(tmp, name, n_nodes, mix)
    try:
        claims, pods, kinds = workload(n_pods, scheduler, mix)
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
        unbound: dict[str, int] = {}
        for i, kind in enumerate(kinds):
            if f"p-{i:05d}" not in watcher.bound:
                unbound[kind] = unbound.get(kind, 0) + 1
        reasons = sorted({f"{p['metadata']['name']}: {c.get('message', c.get('reason'))}" for p in read_all(ep, PODS)
                          if not p["spec"].get("nodeName")
                          for c in (p.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"})
        return {"scheduler": which, "run": "fill", "mix": mix, "nodes": n_nodes, "pods": n_pods, "bound": len(times),
                "unbound_by_kind": unbound, "unbound_reasons": reasons[:3], "pods_per_s": round((len(times) - 1) / (times[-1] - times[0]), 1),
                "wall_s": round(times[-1] - started, 1), "cpu_s": round(cpu, 1),
                **after_fill(read_all(ep, CLAIMS), read_all(ep, SLICES), n_nodes)}
    finally:
        c.stop()


# --- the raw limit: the three writes per pod, allocated in advance


def _write_claim_pod(client: httpx2.Client, job: tuple[Obj, Obj, str, list[str]]) -> None:
    """The claim's finalizer, its status (allocation and reservation), then the pod's Binding."""
    claim, pod_obj, node, devices = job
    name = claim["metadata"]["name"]
    headers = {"Content-Type": "application/json"}
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    r = client.put(f"{CLAIMS}/{name}", content=json.dumps(claim).encode(), headers=headers)
    if r.status_code != 200:
        raise SystemExit(f"finalizer on {name}: {r.status_code} {r.text[:200]}")
    claim = r.json()
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices]},
        "nodeSelector": node_selector_for(node),
        "allocationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "reservedFor": [{"resource": "pods", "name": pod_obj["metadata"]["name"], "uid": pod_obj["metadata"]["uid"]}]}
    r = client.put(f"{CLAIMS}/{name}/status", content=json.dumps(claim).encode(), headers=headers)
    if r.status_code != 200:
        raise SystemExit(f"status of {name}: {r.status_code} {r.text[:200]}")
    e2e.bind(client, pod_obj["metadata"]["name"], node)


def raw_run(n_nodes: int, n_pods: int, mix: str, tmp: Path) -> Obj:
    c, ep = fresh_cluster(tmp, f"raw-{mix}-{n_nodes}", n_nodes, mix)
    try:
        claims, pods, _ = workload(n_pods, "nobody", mix)
        e2e.create_all(ep, claims, CLAIMS)
        e2e.create_all(ep, pods, PODS)
        by_name = {o["metadata"]["name"]: o for o in read_all(ep, CLAIMS) + read_all(ep, PODS)}
        free = [GPUS] * n_nodes
        jobs: list[tuple[Obj, Obj, str, list[str]]] = []
        for claim in claims:  # first fit in creation order, chosen before the clock starts; each
            want = int(claim["spec"]["devices"]["requests"][0]["exactly"]["count"])  # MIG or share a GPU's worth
            node = next((i for i, f in enumerate(free) if f >= want), None)
            if node is None:
                break
            devices = [f"gpu-{GPUS - free[node] + k}" for k in range(want)]
            free[node] -= want
            name = claim["metadata"]["name"]
            jobs.append((by_name[name], by_name[name.removesuffix("-gpu")], f"gpu-{node:05d}", devices))
        seconds = e2e.as_fast_as_possible(ep, _write_claim_pod, jobs)
        return {"scheduler": "raw", "run": "fill", "mix": mix, "nodes": n_nodes, "pods": len(jobs),
                "pods_per_s": round(len(jobs) / seconds, 1)}
    finally:
        c.stop()


# --- the gang


def gang_run(which: str, tmp: Path) -> Obj:
    name = f"{which}-gang"
    scheduler = "default-scheduler" if which == "kube-scheduler" else "gpufleet"
    c, ep = fresh_cluster(tmp, name, 3, "whole")
    try:
        watcher = e2e.Watcher(ep)
        proc = start(which, c, tmp / name)
        try:
            e2e.create_all(ep, [dra.claim(f"small-{i}", "default", dra.whole_gpus(1)) for i in range(2)], CLAIMS)
            for i in range(2):  # one at a time, as small jobs arrive
                e2e.create_all(ep, [pod(f"small-{i}", scheduler, f"small-{i}", cpu=SMALL_CPU)], PODS)
                watcher.wait(i + 1, timeout_s=120, what=f"{name} small-{i}")
            if which == "gpufleet":
                c.admin.create({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}})
            e2e.create_all(ep, [dra.claim(f"train-{i}", "default", dra.whole_gpus(GPUS)) for i in range(2)], CLAIMS)
            e2e.create_all(ep, [pod(f"train-{i}", scheduler, f"train-{i}", "train") for i in range(2)], PODS)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and sum(1 for p in watcher.bound if p.startswith("train-")) < 2:
                time.sleep(0.2)
            time.sleep(5)  # anything still coming
        finally:
            proc.terminate()
            proc.wait(30)
            watcher.stop()
        used: dict[str, int] = {}
        for claim in read_all(ep, CLAIMS):
            for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
                used[r["pool"]] = used.get(r["pool"], 0) + 1
        placed = sum(1 for p in watcher.bound if p.startswith("train-"))
        return {"scheduler": which, "run": "gang", "nodes": 3, "gang_size": 2, "gang_placed": placed,
                "nodes_split_by_small_claims": len({n for n, k in used.items() if 0 < k < GPUS})}
    finally:
        c.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--mix", choices=sorted(KINDS), default="mixed")
    ap.add_argument("--schedulers", default="raw,kube-scheduler,gpufleet")
    ap.add_argument("--skip-fill", action="store_true", help="only the gang case")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    versions = {name: subprocess.run([str(binary(name)), "--version"], capture_output=True, text=True).stdout.strip()
                for name in ("kube-apiserver",)}
    runs: list[Obj] = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-dra-bench-") as tmp:
        for which in args.schedulers.split(","):
            if which == "raw":
                if not args.skip_fill:
                    runs.append(raw_run(args.nodes, args.pods, args.mix, Path(tmp)))
                    print(json.dumps(runs[-1]), file=sys.stderr)
                continue
            if not args.skip_fill:
                runs.append(fill_run(which, args.nodes, args.pods, args.mix, Path(tmp)))
                print(json.dumps(runs[-1]), file=sys.stderr)
            runs.append(gang_run(which, Path(tmp)))
            print(json.dumps(runs[-1]), file=sys.stderr)
    out: Obj = {"nodes": args.nodes, "pods": args.pods, "mix": args.mix}
    for r in runs:
        key = r["scheduler"].replace("-", "_")
        if r["run"] == "fill":
            out[f"{key}_pods_per_s"] = r["pods_per_s"]
            for metric in ("whole_gpus_free", "fragmented_gpus_free", "gpus_with_mig", "gpus_shared", "overcommitted"):
                if metric in r:
                    out[f"{key}_{metric}"] = r[metric]
        else:
            out[f"gang_{key}_placed"] = r["gang_placed"]
    out.update(runs=runs, versions=versions,
               machine=f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} "
                       f"{platform.python_version()}")
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    if any(r.get("overcommitted") for r in runs):
        print("overcommitted devices: " + "; ".join(e for r in runs for e in r.get("overcommitted_examples", [])),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
