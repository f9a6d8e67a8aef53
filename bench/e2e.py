"""gpufleet and kube-scheduler side by side on the real control plane, and the bind limit of this machine.

Every run gets a fresh control plane of `gpufleet.testing.cluster` (etcd, kube-apiserver,
kube-controller-manager; audit log off, node-lifecycle controller off, as in scale tests) with
N nodes of 8 H100 GPUs (`nvidia.com/gpu: 8`, the feature-discovery labels and gpufleet's
inventory annotation), and the same 10,000 pods asking for whole GPUs through `nvidia.com/gpu`
(1, 2, 4 or 8), which both schedulers can place. Nodes are Ready and no kubelet stand-in runs:
only scheduling and binding are measured.

Runs, each on its own fresh cluster:

- raw: the pods are created unbound, then bound to nodes chosen in advance by a loop of
  Binding POSTs (4 processes x 8 threads, each on a keep-alive connection, its replies read
  with httptools as gpufleet reads them: the cheapest client Python has): the most binds/s
  this API server takes here.
  Timed as the scheduler runs are, from the first to the last bind the bench's watch sees
  (that watch runs in every run); the loop's own count over its own time is
  `loop_binds_per_s`;
- raw-as-scheduler: the same loop as gpufleet's ServiceAccount under deploy/'s RBAC, each
  Binding with the assignment annotation gpufleet writes, and a second watch of every pod as that
  ServiceAccount (read, not decoded): the requests and the watch of a scheduler that decided in
  no time;
- kube-scheduler (v1.37, default profile) and gpufleet (`gpufleet scheduler`, the default
  profile, under the ServiceAccount and RBAC of deploy/):
  - batch: all pods created first, then the scheduler started: binds/s from the first to the
    last bind, then the placement left: 8-GPU nodes still whole;
  - rate: the scheduler running, pods created at a fixed rate: create-to-bound latency (from
    the create call's return to the first watch event showing the pod bound, both on this
    machine's monotonic clock);
  each both at kube-scheduler's default client budget (50 QPS, burst 100) and unthrottled.

CPU seconds are each scheduler process's user + system time over its run. Each run also says
where the machine's CPU went while it bound (`ServerLoad`): every component's CPU per pod bound
over the bind window, kube-apiserver's requests per pod bound, and a Binding's mean time in its
handlers. Prints a table;
with --json the last line is one JSON object (the 5,000-node unthrottled figures at its top
level when those ran, every run under "runs").

--split-cpus runs the control plane on CPU 0 and everything else on CPU 1, so that a
scheduler's own CPU is not taken from the API server (as on a node of its own);
--apiserver-pprof DIR keeps kube-apiserver's CPU profile of each batch run's first seconds of
binding.

    .venv/bin/python bench/e2e.py [--nodes 1000,5000] [--pods 10000] [--rate 50 --rate-pods 3000]
        [--budgets unthrottled,throttled] [--schedulers raw,raw-as-scheduler,kube-scheduler,gpufleet]
        [--modes batch,rate] [--split-cpus] [--apiserver-pprof DIR] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import queue
import random
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx2
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpufleet.kube import http1, translate  # noqa: E402
from gpufleet.model import Placement, PodUid  # noqa: E402
from gpufleet.model import annotations as ann  # noqa: E402
from gpufleet.testing.cluster import Cluster, ClusterOptions, binary  # noqa: E402
from gpufleet.testing.cluster.binaries import read_versions  # noqa: E402
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION, SHAPES, gpu_node  # noqa: E402

PROFILES = ROOT / "src/gpufleet/framework/profiles"
H100 = next(s for s in SHAPES if s.name == "p5.48xlarge")
SIZES = ((1, 0.55), (2, 0.2), (4, 0.15), (8, 0.1))
"""GPUs per pod and their shares: mean 2.35 GPUs."""
Obj = dict[str, Any]
SPLIT_CPUS = False
"""Set by --split-cpus."""
PPROF_SECONDS = 8.0
"""Of binding profiled with --apiserver-pprof: within every batch run here (10,000 pods at 500-1,000/s)."""


def nodes(n: int) -> list[Obj]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        node = gpu_node(f"gpu-{i:05d}", H100, rng, index=i)
        node["metadata"]["annotations"].pop(KWOK_ANNOTATION)  # nothing plays the kubelet: no status writes
        out.append(node)
    return out


def pods(n: int, scheduler: str, seed: int = 2) -> list[Obj]:
    rng = random.Random(seed)
    sizes = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES], k=n)
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i:05d}", "namespace": "default"},
             "spec": {"schedulerName": scheduler, "containers": [{
                 "name": "main", "image": "train", "resources": {
                     "requests": {"cpu": "1", "memory": "4Gi"}, "limits": {ann.GPU_RESOURCE: str(g)}}}]}}
            for i, g in enumerate(sizes)]


# --- talking to the API server


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str
    ca: str

    def client(self, connections: int = 8) -> httpx2.Client:
        return httpx2.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, trust_env=False,
                             verify=ssl.create_default_context(cafile=self.ca), timeout=60,
                             limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections))


def create_all(ep: Endpoint, objs: list[Obj], path: str, threads: int = 8,
               client: httpx2.Client | None = None) -> dict[str, float]:
    """POST every object; name -> when its create returned."""
    own = client is None
    client = client or ep.client(threads)

    def post(obj: Obj) -> tuple[str, float]:
        r = client.post(path, content=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
        if r.status_code != 201:
            raise SystemExit(f"creating {obj['metadata']['name']}: {r.status_code} {r.text[:300]}")
        return obj["metadata"]["name"], time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(post, objs))
    finally:
        if own:
            client.close()


def _watch(ep: Endpoint, out: Any, ready: Any) -> None:
    """In a child process: put (name, time) for each pod when first seen bound. Resumes a watch that
    ends from the last resourceVersion seen, as an informer does (and relists after an ERROR event);
    each resumption is reported as ("", time). Sets `ready` once the first watch is answered."""
    # Forked: a SIGTERM handler the parent installed (a CLI's, run in a test process) would keep
    # this child alive after `Watcher.stop()`, resuming against a stopped cluster.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seen: set[str] = set()
    client = httpx2.Client(base_url=ep.url, headers={"Authorization": f"Bearer {ep.token}"}, trust_env=False,
                           verify=ssl.create_default_context(cafile=ep.ca), timeout=httpx2.Timeout(10, read=None))
    path = "/api/v1/namespaces/default/pods"

    def saw(obj: Obj) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name is not None and (obj.get("spec") or {}).get("nodeName") and name not in seen:
            seen.add(name)
            out.put((name, time.monotonic()))
    rv = ""
    while True:
        try:
            if not rv:
                listed = client.get(path).json()
                for obj in listed.get("items", []):
                    saw(obj)
                rv = listed["metadata"]["resourceVersion"]
            params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": rv}
            with client.stream("GET", path, params=params) as r:
                if r.status_code == 200:
                    ready.set()
                for line in r.iter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        rv = ""
                        break
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    saw(obj)
        except (httpx2.HTTPError, ValueError) as exc:
            print(f"watch: {type(exc).__name__}: {exc}; resuming", file=sys.stderr, flush=True)
            time.sleep(0.1)  # a refused connection: not a busy loop
        out.put(("", time.monotonic()))


def _bare_watch(ep: Endpoint, out: Any, ready: Any) -> None:
    """In a child process: what a scheduler's watch of every pod costs the server, at the least CPU
    a client can spend on it: one LIST for its resourceVersion (as an informer starts), then the
    watch from there on an `http.client` connection, its body read and each line showing a bound
    pod counted, none decoded. Puts how many more it saw after each read that saw some."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in `_watch`
    client = Connections(ep)
    conn = client.connect()
    path = "/api/v1/namespaces/default/pods"
    rv = json.loads(client.request(conn, "GET", path).rest())["metadata"]["resourceVersion"]
    reader = client.request(conn, "GET", f"{path}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}")
    if reader.status != 200:
        raise SystemExit(f"bare watch: {reader.status} {reader.rest()[:200]!r}")
    ready.set()
    tail = b""
    for chunk in reader.pieces():
        *lines, tail = (tail + chunk).split(b"\n")
        seen = sum(1 for line in lines if b'"nodeName":"' in line)
        if seen:
            out.put(seen)


class BareWatcher:
    """`_bare_watch` in a child process: how many bound pods it has seen."""

    def __init__(self, ep: Endpoint) -> None:
        self._queue: multiprocessing.Queue[int] = multiprocessing.Queue()
        ready = multiprocessing.Event()
        self._proc = multiprocessing.Process(target=_bare_watch, args=(ep, self._queue, ready), daemon=True)
        self._proc.start()
        if not ready.wait(60):
            self.stop()
            raise SystemExit("bare watch: not watching after 60 s")
        self.seen = 0

    def count(self, settle_s: float = 1.0) -> int:
        """Bound pods seen, once none more came for `settle_s`."""
        while True:
            try:
                self.seen += self._queue.get(timeout=settle_s)
            except queue.Empty:
                return self.seen

    def stop(self) -> None:
        self._proc.kill()
        self._proc.join(10)


class Watcher:
    """Pod watch in a child process (CLOCK_MONOTONIC is system-wide): when each pod was first seen bound."""

    def __init__(self, ep: Endpoint) -> None:
        self.bound: dict[str, float] = {}
        self.resumed = 0
        """Times the watch ended and was resumed."""
        self._queue: multiprocessing.Queue[tuple[str, float]] = multiprocessing.Queue()
        self._ready = multiprocessing.Event()
        self._proc = multiprocessing.Process(target=_watch, args=(ep, self._queue, self._ready), daemon=True)
        self._proc.start()
        threading.Thread(target=self._drain, daemon=True).start()

    def watching(self, timeout_s: float = 60.0) -> None:
        """Wait until the watch is open. Binds made before are seen only when it opens, all at
        that moment: started right after a LIST of 10,000 pods (1-2 s in Python here), the raw
        loop's first second counted 1,100-2,300 binds and its binds/s 7-19 % above its own clock's."""
        if not self._ready.wait(timeout_s):
            raise SystemExit(f"bench watch: not watching after {timeout_s:.0f} s")

    def _drain(self) -> None:
        while True:
            name, t = self._queue.get()
            if name:
                self.bound[name] = t
            else:
                self.resumed += 1

    def wait(self, n: int, timeout_s: float, what: str, quiet_s: float = 15.0) -> None:
        """Until all `n` pods are bound, or none more was bound for `quiet_s` (the rest fit nowhere now)."""
        deadline = time.monotonic() + timeout_s
        last, last_change = 0, time.monotonic()
        while len(self.bound) < n:
            now = time.monotonic()
            if len(self.bound) != last:
                last, last_change = len(self.bound), now
            if last and now - last_change > quiet_s:
                return
            if now > deadline:
                raise SystemExit(f"{what}: {len(self.bound)} of {n} pods bound after {timeout_s:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        self._proc.kill()
        self._proc.join(10)


def by_second(times: list[float]) -> list[int]:
    """Binds in each second from the first (sorted times): where a run was slow."""
    counts = [0] * (int(times[-1] - times[0]) + 1)
    for t in times:
        counts[int(t - times[0])] += 1
    return counts


def whole_nodes_free(ep: Endpoint) -> int:
    """Nodes with none of their 8 GPUs taken, from the bound pods read back."""
    client = ep.client(1)
    try:
        items = client.get("/api/v1/pods").json()["items"]
        node_names = [n["metadata"]["name"] for n in client.get("/api/v1/nodes").json()["items"]]
    finally:
        client.close()
    used = {p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}
    return sum(1 for n in node_names if n not in used)


COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager")


class ServerLoad:
    """Where the machine's CPU went while pods were bound: each control-plane component's CPU
    seconds (and the scheduler's, once `track`ed), the machine's idle time, and the rest ("other":
    the bench's own processes, the raw loop's included), sampled every 0.2 s and taken from the
    last sample before the first bind the bench's watch saw to the first sample after the last,
    per pod bound; kube-apiserver's requests by verb and resource over the whole run
    (`apiserver_request_total`), per pod bound; and the mean time a Binding POST spent in
    kube-apiserver's handlers (`apiserver_request_duration_seconds`). Shows where a run's binds/s
    went: a loop with W binds in flight at R binds/s waits W/R s per bind, of which the server's
    handlers hold `bind_handler_ms`."""

    def __init__(self, c: Cluster, ep: Endpoint, scheduler: int | None = None) -> None:
        self._ep = ep
        self._procs = {name: psutil.Process(c.component(name).pid) for name in COMPONENTS}
        if scheduler is not None:
            self._procs["scheduler"] = psutil.Process(scheduler)
        self._requests = self._requests_now()
        self._samples = [self._sample()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sampling, daemon=True)
        self._thread.start()

    def track(self, name: str, pid: int) -> None:
        """Sample process `pid` too, from now on (started after this began; none of its CPU missed
        as long as it binds nothing before the next sample)."""
        self._procs = {**self._procs, name: psutil.Process(pid)}

    def _sample(self) -> tuple[float, dict[str, float]]:
        now = time.monotonic()
        cpu = {"idle": psutil.cpu_times().idle, "wall": now * (os.cpu_count() or 1)}
        for name, proc in self._procs.items():
            try:
                cpu[name] = sum(proc.cpu_times()[:2])
            except psutil.Error:
                pass
        return now, cpu

    def _sampling(self) -> None:
        while not self._stop.wait(0.2):
            self._samples.append(self._sample())

    def _requests_now(self) -> dict[str, float]:
        """kube-apiserver's request counts by "VERB resource subresource", and the seconds its
        Binding POSTs took in its handlers ("binding seconds")."""
        client = self._ep.client(1)
        try:
            text = client.get("/metrics").text
        finally:
            client.close()
        out: dict[str, float] = {}
        for line in text.splitlines():
            count = line.startswith("apiserver_request_total{")
            if not (count or line.startswith("apiserver_request_duration_seconds_sum{")):
                continue
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.rindex("}")].split(","))
            what = tuple(labels[k].strip('"') for k in ("verb", "resource", "subresource"))
            key = " ".join(x for x in what if x) if count else \
                "binding seconds" if what == ("POST", "pods", "binding") else ""
            if key:
                out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def stop(self) -> None:
        """Stop sampling (again: a no-op); a run that fails before `per_bind` calls it too."""
        self._stop.set()
        self._thread.join()

    def per_bind(self, times: list[float]) -> Obj:
        """`times`: when each pod was seen bound, sorted."""
        self.stop()
        self._samples.append(self._sample())
        requests, n = self._requests_now(), max(len(times), 1)
        first = next(cpu for t, cpu in reversed(self._samples) if t <= times[0]) if times else self._samples[0][1]
        last = next(cpu for t, cpu in self._samples if t >= times[-1]) if times else self._samples[-1][1]
        spent = {k: last[k] - first[k] for k in last if k in first}
        spent["other"] = spent.pop("wall") - sum(spent.values())
        delta = {k: v - self._requests.get(k, 0.0) for k, v in requests.items()}
        binding = delta.pop("binding seconds", 0.0)
        return {"cpu_ms_per_bind": {k: round(1000 * v / n, 3) for k, v in spent.items()},
                "requests_per_bind": {k: round(v / n, 3) for k, v in sorted(delta.items()) if v >= 1},
                "bind_handler_ms": round(1000 * binding / max(delta.get("POST pods binding", 0.0), 1), 2)}


class ApiserverProfile:
    """kube-apiserver's own CPU profile (Go's pprof, `/debug/pprof/profile`) over `seconds` from
    the first bind the bench's watch sees, written to `out`: where its CPU per bind goes, read
    with `go tool pprof -top`."""

    def __init__(self, ep: Endpoint, watcher: Watcher, out: Path, seconds: float) -> None:
        self._ep, self._watcher, self._out, self._seconds = ep, watcher, out, seconds
        self._thread = threading.Thread(target=self._take, daemon=True)
        self._thread.start()

    def _take(self) -> None:
        while not self._watcher.bound:
            time.sleep(0.02)
        client = self._ep.client(1)
        try:
            r = client.get("/debug/pprof/profile", params={"seconds": f"{self._seconds:g}"},
                           timeout=self._seconds + 30)
            r.raise_for_status()
            self._out.parent.mkdir(parents=True, exist_ok=True)
            self._out.write_bytes(r.content)
        except httpx2.HTTPError as exc:
            print(f"{self._out.name}: no profile: {exc}", file=sys.stderr, flush=True)
        finally:
            client.close()

    def join(self) -> None:
        self._thread.join(self._seconds + 60)


def untaint_nodes(ep: Endpoint, n: int) -> None:
    """kube-apiserver's TaintNodesByCondition admission taints every new node
    `node.kubernetes.io/not-ready:NoSchedule`; the node-lifecycle controller (off here) lifts it from
    Ready nodes. Lift it as that controller would."""
    client = ep.client(8)

    def lift(i: int) -> None:
        r = client.patch(f"/api/v1/nodes/gpu-{i:05d}", content=b'{"spec":{"taints":null}}',
                         headers={"Content-Type": "application/merge-patch+json"})
        if r.status_code != 200:
            raise SystemExit(f"untaint gpu-{i:05d}: {r.status_code} {r.text[:200]}")
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lift, range(n)))
    finally:
        client.close()


# --- one run


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` onto `cpus`; the threads and processes it starts later inherit them."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


SPLIT = {"control plane": {0}, "clients": {1}}
"""--split-cpus: the control plane on one CPU, the scheduler (or the raw loop) and the bench on the other."""


def fresh_cluster(tmp: Path, name: str, n_nodes: int, profiling: bool = False) -> tuple[Cluster, Endpoint]:
    c = Cluster(tmp / name, ClusterOptions(audit=False, node_lifecycle=False,
                                           extra_apiserver_args=["--profiling=true"] if profiling else []))
    c.start()
    if SPLIT_CPUS:
        for component in (*COMPONENTS, "kwok"):
            pid = c.component(component).pid
            if pid is None:
                raise SystemExit(f"--split-cpus: {component} is not running")
            pin(pid, SPLIT["control plane"])
        pin(os.getpid(), SPLIT["clients"])
    admin = c.admin
    for path in ("deploy/namespace.yaml", "deploy/crds/podgroups.scheduling.x-k8s.io.yaml",
                 "deploy/crds/queues.gpufleet.io.yaml", "deploy/scheduler/rbac.yaml"):
        for doc in yaml.safe_load_all((ROOT / path).read_text()):
            if doc:
                admin.create(doc)
    ep = Endpoint(c.url, c.admin_token, str(c.ca_file))
    create_all(ep, nodes(n_nodes), "/api/v1/nodes", threads=8)
    untaint_nodes(ep, n_nodes)
    c.wait_for_service_account("default")
    return c, ep


def start_scheduler(which: str, c: Cluster, tmp: Path, qps: float, burst: int, profile: Path,
                    extra: list[str]) -> subprocess.Popen[bytes]:
    log = (tmp / f"{which}.log").open("ab")
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    if which == "kube-scheduler":
        kubeconfig = c.workdir / "kube-scheduler.kubeconfig"
        config = tmp / "kube-scheduler.yaml"
        # unthrottled: client-go builds no rate limiter for a negative QPS
        config.write_text(json.dumps({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps if qps > 0 else -1, "burst": burst},
            "leaderElection": {"leaderElect": False}}))
        cmd = [str(binary("kube-scheduler")), f"--config={config}", f"--authentication-kubeconfig={kubeconfig}",
               f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    kubeconfig = c.service_account_kubeconfig("gpufleet-system", "gpufleet-scheduler", tmp / "gpufleet.kubeconfig")
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [sys.executable, "-m", "gpufleet.cli.scheduler_cmd", "scheduler", "--kubeconfig", str(kubeconfig),
           "--config", str(profile), "--http-port", "0", "--qps", str(qps), "--burst", str(burst),
           "--log-level", "WARNING", *extra]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    try:
        t = psutil.Process(proc.pid).cpu_times()
        return float(t.user + t.system)
    except psutil.Error:
        return float("nan")


def scheduler_run(which: str, mode: str, n_nodes: int, n_pods: int, qps: float, rate: float, tmp: Path,
                  profile: Path, extra: list[str], pprof: Path | None = None) -> Obj:
    name = f"{which}-{mode}-{n_nodes}-{'q' if qps else 'u'}"
    scheduler_name = "default-scheduler" if which == "kube-scheduler" else "gpufleet"
    c, ep = fresh_cluster(tmp, name, n_nodes, profiling=pprof is not None)
    try:
        work = pods(n_pods, scheduler_name)
        watcher = Watcher(ep)
        watcher.watching()
        profiler = ApiserverProfile(ep, watcher, pprof / f"{name}.pprof", PPROF_SECONDS) if pprof else None
        pod_path = "/api/v1/namespaces/default/pods"
        if mode == "batch":
            create_all(ep, work, pod_path)
            load = ServerLoad(c, ep)
            started = time.monotonic()
            proc = start_scheduler(which, c, tmp / name, qps, 100, profile, extra)
            load.track("scheduler", proc.pid)
            created: dict[str, float] = {}
        else:
            proc = start_scheduler(which, c, tmp / name, qps, 100, profile, extra)
            time.sleep(5)  # the scheduler's informers synced
            load = ServerLoad(c, ep, scheduler=proc.pid)
            started = time.monotonic()
            created = {}
            creator = ep.client(10)
            for i in range(0, n_pods, 10):  # ten pods per burst, paced to `rate`
                created.update(create_all(ep, work[i:i + 10], pod_path, threads=10, client=creator))
                lag = started + (i + 10) / rate - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
            creator.close()
        try:
            watcher.wait(n_pods, timeout_s=n_pods / max(qps, 20) + 600, what=name)
            time.sleep(1)
            cpu = cpu_seconds(proc)
            server = load.per_bind(sorted(watcher.bound.values()))
            if profiler:
                profiler.join()
        finally:
            load.stop()
            proc.terminate()
            proc.wait(30)
            watcher.stop()
        times = sorted(watcher.bound.values())
        if len(times) < 2:
            raise SystemExit(f"{name}: {len(times)} pods bound; logs in {tmp / name}")
        result: Obj = {"scheduler": which, "mode": mode, "nodes": n_nodes, "pods": n_pods,
                       "budget": f"{qps:g} QPS" if qps else "unthrottled", "bound": len(times),
                       "binds_per_s": round((len(times) - 1) / (times[-1] - times[0]), 1),
                       "binds_per_s_by_second": by_second(times),
                       "wall_s": round(times[-1] - started, 1), "cpu_s": round(cpu, 1),
                       "watch_resumed": watcher.resumed, **server}
        if mode == "batch":
            result["whole_nodes_free"] = whole_nodes_free(ep)
        else:
            lat = sorted(watcher.bound[k] - created[k] for k in created if k in watcher.bound)
            result.update(rate_per_s=rate, p50_ms=round(1000 * statistics.median(lat), 1),
                          p99_ms=round(1000 * lat[int(0.99 * (len(lat) - 1))], 1), max_ms=round(1000 * lat[-1], 1))
        return result
    finally:
        c.stop()


# --- the raw bind limit


class Connections:
    """One keep-alive connection per thread, each request written and its reply read as gpufleet's
    client does it (`gpufleet.kube.http1`, httptools: less than half of `http.client`'s CPU per
    request, a sixth of httpx's, here), so the raw loop measures the server, not its own client."""

    def __init__(self, ep: Endpoint) -> None:
        self._ep, self._local = ep, threading.local()
        self._ctx = ssl.create_default_context(cafile=ep.ca)
        url = urlsplit(ep.url)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._host_header = f"{self._host}:{self._port}"

    def connect(self) -> http.client.HTTPSConnection:
        """A new connection (opened by `open`)."""
        return http.client.HTTPSConnection(self._host, self._port, context=self._ctx, timeout=60)

    def open(self, conn: http.client.HTTPSConnection) -> socket.socket:
        if conn.sock is None:
            conn.connect()
        sock: socket.socket = conn.sock
        return sock

    def request(self, conn: http.client.HTTPSConnection, method: str, path: str,
                body: bytes | None = None) -> http1.ReplyReader:
        """Send one request on `conn` and read its reply's head; the caller reads its body."""
        headers = {"Authorization": f"Bearer {self._ep.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        sock = self.open(conn)
        sock.sendall(http1.request_bytes(method, path, self._host_header, headers, body))
        reader = http1.ReplyReader(sock)
        reader.head()
        return reader

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        reader = self.request(conn, "POST", path, body)
        content = reader.rest()
        if not reader.keep_alive:
            conn.close()
        return reader.status, content


def bind(client: Connections, pod: str, node: str, assignment: str = "") -> None:
    """POST the pod's Binding to `node` (with gpufleet's assignment annotation and field manager when
    `assignment` is given, as gpufleet sends it); anything but 201 ends the run."""
    body: Obj = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": "default"},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    url = f"/api/v1/namespaces/default/pods/{pod}/binding"
    if assignment:
        body["metadata"]["annotations"] = {ann.ASSIGNMENT_ANNOTATION: assignment}
        url += "?fieldManager=gpufleet-scheduler"
    status, text = client.post(url, json.dumps(body).encode())
    if status != 201:
        raise SystemExit(f"bind {pod}: {status} {text[:200]!r}")


def _worker(ep: Endpoint, write: Callable[[Any, Any], None], jobs: list[Any], out: Any,
            client_for: Callable[[Endpoint], Any]) -> None:
    client = client_for(ep)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda job: write(client, job), jobs))
    out.put(time.monotonic())


def httpx_client(ep: Endpoint) -> httpx2.Client:
    return ep.client(8)


def as_fast_as_possible(ep: Endpoint, write: Callable[[Any, Any], None], jobs: list[Any],
                        processes: int = 4, client_for: Callable[[Endpoint], Any] = httpx_client) -> float:
    """Seconds for `processes` processes of 8 threads each to `write` every job (the raw limits:
    what the API server takes with no scheduler deciding). `write` is a module-level function."""
    done: multiprocessing.Queue[float] = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_worker, args=(ep, write, jobs[k::processes], done, client_for))
               for k in range(processes)]
    start = time.monotonic()
    for w in workers:
        w.start()
    ends = [done.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(10)
    return max(ends) - start


def _bind_job(client: Connections, job: tuple[str, str, str]) -> None:
    bind(client, *job)


def raw_run(n_nodes: int, n_pods: int, tmp: Path, *, as_scheduler: bool = False, pprof: Path | None = None,
            in_flight: int = 32, watches: int | None = None) -> Obj:
    """The raw loop as the cluster admin, plain Bindings; or (`as_scheduler`) as gpufleet's
    ServiceAccount under deploy/'s RBAC, each Binding with the assignment annotation gpufleet would
    write, and a second watch of every pod as that ServiceAccount (the scheduler's own, read but not
    decoded: `_bare_watch`): the requests and the watch of a scheduler that decided in no time.
    `watches`: of every pod, the bench's included (default 1, or 2 as the scheduler); `in_flight`:
    Bindings at once, 8 threads per process."""
    watches = watches or (2 if as_scheduler else 1)
    name = "raw-as-scheduler" if as_scheduler else "raw"
    c, ep = fresh_cluster(tmp, f"{name}-{n_nodes}", n_nodes, profiling=pprof is not None)
    try:
        work = pods(n_pods, "nobody")
        create_all(ep, work, "/api/v1/namespaces/default/pods")
        node_objs = nodes(n_nodes)
        free: list[list[int]] = [list(range(8)) for _ in range(n_nodes)]
        jobs: list[tuple[str, str, str]] = []
        for p in work:  # first fit in creation order, chosen before the clock starts
            g = int(p["spec"]["containers"][0]["resources"]["limits"][ann.GPU_RESOURCE])
            for i, f in enumerate(free):
                if len(f) >= g:
                    gpus, free[i] = tuple(f[:g]), f[g:]
                    text = ""
                    if as_scheduler:
                        info = translate.node_info(node_objs[i])
                        text = ann.encode_assignment(translate.assignment(
                            Placement(PodUid(p["metadata"]["name"]), info.name, 1000, 4096, gpus, 1000, 81920), info))
                    jobs.append((p["metadata"]["name"], f"gpu-{i:05d}", text))
                    break
        binder = Endpoint(c.url, c.service_account_token("gpufleet-system", "gpufleet-scheduler"), ep.ca) \
            if as_scheduler else ep
        watcher = Watcher(ep)  # watching as in the scheduler runs: the same load on the server
        watcher.watching()  # before the first bind: one made earlier would be seen late
        more: list[BareWatcher] = []
        load: ServerLoad | None = None
        try:
            more += [BareWatcher(binder) for _ in range(watches - 1)]  # as a scheduler's own watch of every pod
            profiler = ApiserverProfile(ep, watcher, pprof / f"{name}-{n_nodes}.pprof", PPROF_SECONDS) \
                if pprof else None
            load = ServerLoad(c, ep)
            seconds = as_fast_as_possible(binder, _bind_job, jobs, processes=in_flight // 8,
                                          client_for=Connections)
            watcher.wait(len(jobs), timeout_s=120, what="raw")
            time.sleep(1)
            server = load.per_bind(sorted(watcher.bound.values()))
            if profiler:
                profiler.join()
            seen = [len(watcher.bound), *(w.count() for w in more)]
        finally:
            if load is not None:
                load.stop()
            watchers: list[Watcher | BareWatcher] = [watcher, *more]
            for w in watchers:
                w.stop()
        times = sorted(watcher.bound.values())
        return {"scheduler": name, "mode": "batch", "nodes": n_nodes, "pods": len(jobs),
                "binds_per_s": round((len(times) - 1) / (times[-1] - times[0]), 1),
                "binds_per_s_by_second": by_second(times),
                "loop_binds_per_s": round(len(jobs) / seconds, 1), "in_flight": in_flight,
                "watches": watches, "seen_bound_by_each_watch": seen, **server}
    finally:
        c.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", default="1000,5000", help="node counts, comma-separated (default 1000,5000)")
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50.0,
                        help="pods created per second in the rate runs (default 50: what both schedulers sustain here)")
    parser.add_argument("--rate-pods", type=int, default=3000, help="pods created in each rate run (default 3000)")
    parser.add_argument("--budgets", default="unthrottled,throttled")
    parser.add_argument("--schedulers", default="raw,raw-as-scheduler,kube-scheduler,gpufleet")
    parser.add_argument("--modes", default="batch,rate")
    parser.add_argument("--profile", default="default", help="gpufleet's profile: a shipped name or a YAML file")
    parser.add_argument("--gpufleet-args", default="",
                        help="more flags for `gpufleet scheduler`, space-separated (e.g. \"--workers 32\")")
    parser.add_argument("--apiserver-pprof", type=Path, metavar="DIR",
                        help=f"write kube-apiserver's CPU profile of each batch run's first {PPROF_SECONDS:g} s of "
                             "binding to DIR/<run>.pprof (read with `go tool pprof -top`)")
    parser.add_argument("--split-cpus", action="store_true",
                        help="run the control plane on CPU 0 and everything else (the scheduler or the raw loop, the "
                             "bench's watch) on CPU 1: a scheduler that takes no CPU from the API server, as on its "
                             "own node")
    parser.add_argument("--raw-in-flight", type=int, default=32,
                        help="Bindings in flight in the raw runs, 8 threads per process (default 32)")
    parser.add_argument("--raw-watches", type=int,
                        help="watches of every pod during the raw runs, the bench's included (default 1 for raw, "
                             "2 for raw-as-scheduler: the bench's and the scheduler's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.raw_in_flight < 8 or args.raw_in_flight % 8:
        parser.error(f"--raw-in-flight: a positive multiple of 8 (8 threads per process), got {args.raw_in_flight}")
    if args.raw_watches is not None and args.raw_watches < 1:
        parser.error(f"--raw-watches: at least 1 (the bench's own), got {args.raw_watches}")
    if args.split_cpus:
        if (os.cpu_count() or 1) < 2:
            parser.error("--split-cpus: needs two CPUs")
        global SPLIT_CPUS
        SPLIT_CPUS = True
    profile = Path(args.profile) if args.profile.endswith((".yaml", ".yml")) else PROFILES / f"{args.profile}.yaml"
    if not profile.is_file():
        parser.error(f"--profile: no such profile {args.profile!r} ({profile})")
    budgets = {"unthrottled": 0.0, "throttled": 50.0}
    runs: list[Obj] = []
    c_versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n_nodes in (int(x) for x in args.nodes.split(",")):
            for which in args.schedulers.split(","):
                if which in ("raw", "raw-as-scheduler"):
                    runs.append(raw_run(n_nodes, args.pods, tmp, as_scheduler=which == "raw-as-scheduler",
                                        pprof=args.apiserver_pprof, in_flight=args.raw_in_flight,
                                        watches=args.raw_watches))
                    print(_line(runs[-1]), flush=True)
                    continue
                for budget in args.budgets.split(","):
                    for mode in args.modes.split(","):
                        (tmp / f"{which}-{mode}-{n_nodes}-{'q' if budgets[budget] else 'u'}").mkdir()
                        n_pods = args.rate_pods if mode == "rate" else args.pods
                        runs.append(scheduler_run(which, mode, n_nodes, n_pods, budgets[budget], args.rate, tmp,
                                                  profile, args.gpufleet_args.split() if which == "gpufleet" else [],
                                                  args.apiserver_pprof if mode == "batch" else None))
                        print(_line(runs[-1]), flush=True)
        c_versions = read_versions().as_dict()
    result: Obj = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
                   "control_plane": c_versions, "profile": args.profile, "pods": args.pods, "rate_per_s": args.rate,
                   "split_cpus": args.split_cpus,
                   "runs": runs}
    result.update(headline(runs, max(int(x) for x in args.nodes.split(","))))
    if args.json:
        print(json.dumps(result))
    return 0


def _line(r: Obj) -> str:
    extra = (f"whole nodes free {r['whole_nodes_free']}" if "whole_nodes_free" in r else
             f"p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms max {r['max_ms']} ms" if "p99_ms" in r else "")
    cpu = r.get("cpu_ms_per_bind", {})
    server = (f"; per bind: kube-apiserver {cpu.get('kube-apiserver')} ms CPU, "
              f"its handler {r.get('bind_handler_ms')} ms") if cpu else ""
    return (f"{r['nodes']:>5} nodes {r['scheduler']:>14} {r['mode']:>5} {r.get('budget', ''):>11}: "
            f"{r['binds_per_s']:>7} binds/s, {r.get('bound', r['pods'])} bound, cpu {r.get('cpu_s', '-')} s  {extra}"
            f"{server}")


def headline(runs: list[Obj], nodes: int) -> Obj:
    def find(s: str, mode: str) -> Obj:
        return next((r for r in runs if r["scheduler"] == s and r["mode"] == mode and r["nodes"] == nodes
                     and r.get("budget", "unthrottled") == "unthrottled"), {})
    raw_sa = find("raw-as-scheduler", "batch")
    raw, gb, kb, gr, kr = find("raw", "batch"), find("gpufleet", "batch"), find("kube-scheduler", "batch"), \
        find("gpufleet", "rate"), find("kube-scheduler", "rate")
    def share(a: Obj, b: Obj) -> float | None:
        return round(100 * a["binds_per_s"] / b["binds_per_s"], 1) if a and b else None
    return {"nodes": nodes, "raw_binds_per_s": raw.get("binds_per_s"),
            "gpufleet_pct_of_raw": share(gb, raw), "gpufleet_pct_of_raw_as_scheduler": share(gb, raw_sa),
            "raw_as_scheduler_binds_per_s": raw_sa.get("binds_per_s"),
            "gpufleet_binds_per_s": gb.get("binds_per_s"), "kube_scheduler_binds_per_s": kb.get("binds_per_s"),
            "gpufleet_p99_ms": gr.get("p99_ms"), "kube_scheduler_p99_ms": kr.get("p99_ms"),
            "gpufleet_whole_nodes_free": gb.get("whole_nodes_free"),
            "kube_scheduler_whole_nodes_free": kb.get("whole_nodes_free"),
            "gpufleet_cpu_s": gb.get("cpu_s"), "kube_scheduler_cpu_s": kb.get("cpu_s")}


if __name__ == "__main__":
    sys.exit(main())
