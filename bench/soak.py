"""The soak: an hour of churn on the real control plane, and whether anything was lost (issue 24).

What runs, all on this machine:

- the control plane of `gpufleet.testing.cluster` (etcd, kube-apiserver with its audit log,
  kube-controller-manager with the node-lifecycle controller, KWOK) with 1,000 GPU nodes of
  `gpufleet.testing.gpu_nodes` (six AWS shapes, 5,031 GPUs), deploy/'s CRDs and RBAC, three
  Queues (weights 2:1:1, guarantees 64/32/16 GPUs: a queue below its fair share reclaims);
- two `gpufleet scheduler` processes with leader election and signed assignments, under the
  scheduler's ServiceAccount, talking to kube-apiserver through the API fault proxy
  (`gpufleet.testing.cluster.faultproxy`);
- one `gpufleet agent run` process (fake NVML backend, 8 H100) for one node, with the kubelet's
  side of the device-plugin API played by the stand-in of tests/agent/kubelet.py: every pod
  the scheduler binds to that node is allocated its devices through the agent's Allocate, as a
  kubelet does before it starts the containers. KWOK plays every node's kubelet otherwise.

The load: pods arrive as Poisson streams (the mix of `gpufleet.testing.workload`: whole GPUs,
fractions, MIG slices, gangs with their PodGroups, CPU-only pods, three queues, a quarter high
priority), one stream per resource class, each at the rate that keeps about `--load` of its
class busy: the whole GPUs (whole-GPU pods, fractions and gangs), each MIG profile's slices
(a MIG pod can use nothing else), and CPU-only pods in their share of the mix. One rate for the
whole mix would offer the fleet's few 2g.20gb slices three times what they hold, and that
class's queue, not the scheduler, would grow all hour. Each pod runs a duration drawn from 2 to
12 minutes (so that arrivals and completions are both steady by minute 12, before the memory
window opens at minute 20), started 2 s after binding (an image pull); finished pods are
deleted, as a Job's TTL would. Ten pods that fit no node (16 GPUs; a GPU model no node has) wait all along.
When more than `--max-pending` pods wait, arrivals pause (a submission quota): the seconds
paused are reported, so an overload cannot hide.

Faults, on a fixed schedule: a leader failover (kill -9 of the leading scheduler; a new
standby started) every `--failover-min`; a GPU fault (XID 79 written as the agent writes it)
every `--gpu-fault-min`, healed two periods later; a node's kubelet dying (KWOK stops playing
it; the node goes NotReady) every `--node-fault-min`, back after 5 minutes; and every
`--api-fault-min` the proxy answers 3 bindings with 500, 3 pod status patches with 429, the
next pod watch with 410, and every third time cuts every open watch.

Measured: each process's RSS, the leader's cycle time (its gpufleet_cycle_duration_seconds),
create-to-bound latency (create call returned, to the first watch event showing the pod bound,
on this machine's monotonic clock), and at the end, after the arrivals stop and the scheduler
settles: bindings the API server accepted twice for a pod (audit log), devices overcommitted
(checked every minute from the API objects), pods lost (pending without PodScheduled=False/
Unschedulable, or pending where one more cycle would place them), and the agent's Allocate
answers for the scheduler's pods. Prints a table and the plot's path; with --json the last
line is one JSON object.

    .venv/bin/python bench/soak.py [--minutes 60] [--nodes 1000] [--load 0.7] [--json]
        [--out docs/results/soak-DATE.json] [--plot docs/images/soak.png]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Iterator

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "bench")]

from agent.kubelet import FakeKubelet  # noqa: E402  (the kubelet's side of the device-plugin API)
from e2e import Endpoint, Watcher  # noqa: E402
from live.cluster_kit import (AGENT_SA, NAMESPACE, SCHEDULER_SA, Scheduler, agent_kubeconfig, clean_env,  # noqa: E402
                              create_all, install_gpufleet, successful_bindings)
from live.node_faults import set_gpu_health, start_kubelet, stop_kubelet  # noqa: E402

from gpufleet.kube import translate  # noqa: E402
from gpufleet.model import annotations as ann  # noqa: E402
from gpufleet.testing import workload  # noqa: E402
from gpufleet.testing.cluster import DURATION_ANNOTATION, Cluster, ClusterOptions  # noqa: E402
from gpufleet.testing.cluster.cluster import START_DELAY_ANNOTATION  # noqa: E402
from gpufleet.testing.cluster.faultproxy import FaultProxy, Reply, Rule  # noqa: E402
from gpufleet.testing.gpu_nodes import gpu_nodes  # noqa: E402

Obj = dict[str, Any]
GPU_CLASS, CPU_CLASS = "gpu", "cpu"
"""The resource classes besides the MIG profiles (`nvidia.com/mig-<profile>`)."""
AGENT_FIXTURE = "h100-sxm-8"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the workload


def fits_nowhere(pod: Obj) -> bool:
    """The mix's pods that no node can take (16 GPUs; a GPU model the fleet lacks)."""
    spec = pod["spec"]
    limits = spec["containers"][0]["resources"]["limits"]
    return "affinity" in spec or int(limits.get(ann.GPU_RESOURCE, 0)) > 8


def resource_class(pod: Obj) -> str:
    """What the pod competes for: `nvidia.com/mig-<profile>`, whole GPUs (`gpu`, fractions too), or `cpu`."""
    limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
    mig = [k for k in limits if k.startswith(ann.MIG_RESOURCE_PREFIX)]
    if mig:
        return str(mig[0])
    return CPU_CLASS if translate.pod_spec(pod).gpu.kind.value == "none" else GPU_CLASS


def demand(pod: Obj) -> float:
    """How much of its class the pod keeps busy: GPUs (a fraction by its milli), MIG slices, or 1 pod."""
    g = translate.pod_spec(pod).gpu
    if g.kind.value == "none":
        return 1.0
    if g.kind.value == "mig":
        return float(g.count)
    return g.count * g.milli / 1000


class Stream:
    """Jobs (a pod, or a PodGroup and its members) of the workload mix, without the pods that fit nowhere."""

    def __init__(self, nodes: list[Obj], seed: int, min_s: float, max_s: float, start_delay: str,
                 only: str | None = None, prefix: str = "s") -> None:
        self.nodes, self.rng, self.min_s, self.max_s, self.start_delay = nodes, random.Random(seed), min_s, max_s, start_delay
        self.only, self.prefix = only, prefix
        """`only`: the resource class whose jobs are kept (None: all); `prefix` starts each name."""
        self.block = 0
        self.jobs: deque[list[Obj]] = deque()

    def __iter__(self) -> Iterator[list[Obj]]:
        return self

    def __next__(self) -> list[Obj]:
        while not self.jobs:
            self._refill()
        return self.jobs.popleft()

    def _refill(self) -> None:
        pods, groups = workload.pod_manifests(self.nodes, 60, seed=1000 + self.block, prefix=f"{self.prefix}{self.block:05d}")
        self.block += 1
        by_group = {g["metadata"]["name"]: g for g in groups}
        members: dict[str, list[Obj]] = {}
        for p in pods:
            if fits_nowhere(p) or (self.only is not None and resource_class(p) != self.only):
                continue
            group = p["metadata"]["labels"].get(translate.POD_GROUP_LABEL)
            if group is None:
                self.jobs.append([self._timed(p, self._duration())])
            else:
                members.setdefault(group, []).append(p)
        for name, ms in members.items():
            d = self._duration()
            self.jobs.append([by_group[name], *(self._timed(p, d) for p in ms)])

    def _duration(self) -> float:
        return round(self.rng.uniform(self.min_s, self.max_s))

    def _timed(self, pod: Obj, seconds: float) -> Obj:
        pod["metadata"]["annotations"] = {DURATION_ANNOTATION: f"{seconds:g}s", START_DELAY_ANNOTATION: self.start_delay}
        return pod


@dataclass(frozen=True)
class ClassRate:
    rate_per_s: float
    """Pods per second."""
    mean_demand: float
    """GPUs (or slices) a pod of the class keeps busy, on average; 1 for CPU-only pods."""
    capacity: int
    """GPUs (or slices) of the class in the fleet; for `cpu`, 0."""


def arrival_rates(nodes: list[Obj], load: float, mean_s: float) -> dict[str, ClassRate]:
    """Per resource class, the pods per second that keep `load` of its GPUs (or MIG slices) busy;
    CPU-only pods arrive in their share of the mix next to the whole-GPU class's pods."""
    capacity: Counter[str] = Counter()
    for n in nodes:
        for resource, value in n["status"]["capacity"].items():
            if resource == ann.GPU_RESOURCE or resource.startswith(ann.MIG_RESOURCE_PREFIX):
                capacity[GPU_CLASS if resource == ann.GPU_RESOURCE else resource] += int(value)
    sample = Stream(nodes, 99, 1, 1, "0s")
    by_class: dict[str, list[float]] = {}
    for _ in range(2000):
        for p in next(sample):
            if p["kind"] == "Pod":
                by_class.setdefault(resource_class(p), []).append(demand(p))
    rates = {c: ClassRate(load * capacity[c] / (statistics.fmean(d) * mean_s), statistics.fmean(d), capacity[c])
             for c, d in by_class.items() if c != CPU_CLASS and capacity[c]}
    if CPU_CLASS in by_class and GPU_CLASS in rates:
        share = len(by_class[CPU_CLASS]) / len(by_class[GPU_CLASS])
        rates[CPU_CLASS] = ClassRate(rates[GPU_CLASS].rate_per_s * share, 1.0, 0)
    return rates


# --- the run


@dataclass
class Sample:
    t: float
    """Seconds since the arrivals started."""
    scheduler_rss_mib: float
    """The leader's RSS (0 while no scheduler leads)."""
    standby_rss_mib: float
    agent_rss_mib: float
    cycle_ms: float
    """The leader's mean cycle over the last interval (nan when it ran no cycle)."""
    running: int
    pending: int
    pending_by_class: dict[str, int] = field(default_factory=dict)


@dataclass
class Soak:
    args: argparse.Namespace
    cluster: Cluster
    proxy: FaultProxy
    scheduler_kubeconfig: Path
    keys: Path
    work: Path
    nodes: list[Obj]
    agent_node: str
    rng: random.Random = field(default_factory=lambda: random.Random(5))
    schedulers: list[Scheduler] = field(default_factory=list)
    created: dict[str, float] = field(default_factory=dict)
    """Pod name -> monotonic time its create returned."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    """(t, what) of every fault injected, for the plot and the log."""
    overcommits: set[str] = field(default_factory=set)
    completed: int = 0
    paused_s: dict[str, float] = field(default_factory=dict)
    """Per resource class, the seconds its arrivals paused (more than --max-pending pods waiting)."""
    takeovers_s: list[float] = field(default_factory=list)
    failover_windows: list[tuple[float, float]] = field(default_factory=list)
    """(kill, new leader) in seconds since the start, of each failover."""
    handover_rss_mib: list[tuple[float, float, int]] = field(default_factory=list)
    """(t, RSS, pods it held: bound and pending) of each leader just before it was killed, and of
    the last one at the end."""
    allocations: Counter[str] = field(default_factory=Counter)
    pending_now: int = 0
    pending_by_class: Counter[str] = field(default_factory=Counter)
    running_now: int = 0
    t0: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    spawned: int = 0
    agent_pid: int = 0

    # --- processes

    def start_scheduler(self) -> Scheduler:
        self.spawned += 1
        name = f"sched-{self.spawned}"
        s = Scheduler(self.scheduler_kubeconfig, self.work / f"{name}.log", "--leader-elect", "--assignment-keys",
                      str(self.keys), name=name)
        self.schedulers.append(s)
        return s

    def live_schedulers(self) -> list[Scheduler]:
        return [s for s in self.schedulers if s.proc.poll() is None]

    def leader(self) -> Scheduler | None:
        return next((s for s in self.live_schedulers() if s.leading()), None)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, what: str) -> None:
        self.events.append((self.now(), what))
        log(what)

    # --- threads

    def arrivals(self, stream: Stream, rate: float, seed: int) -> None:
        client = self.cluster.client(self.cluster.admin_token)
        rng = random.Random(seed)
        next_at = time.monotonic()
        for job in stream:
            if self.stop.is_set():
                return
            while self.pending_now > self.args.max_pending and not self.stop.is_set():
                self.paused_s[stream.only or "all"] = self.paused_s.get(stream.only or "all", 0.0) + 1.0
                time.sleep(1.0)
            next_at += rng.expovariate(rate / max(1, sum(1 for o in job if o["kind"] == "Pod")))
            delay = next_at - time.monotonic()
            if delay > 0 and self.stop.wait(delay):
                return
            for obj in job:
                client.create(obj)
                if obj["kind"] == "Pod":
                    self.created[obj["metadata"]["name"]] = time.monotonic()
                else:
                    self.groups[obj["metadata"]["name"]] = [p["metadata"]["name"] for p in job if p["kind"] == "Pod"]

    def reaper(self) -> None:
        """Deletes finished pods (a Job's TTL) and the PodGroups whose pods are all gone; counts pods."""
        client = self.cluster.client(self.cluster.admin_token)
        while not self.stop.wait(10):
            pods = client.list("pods", "default")
            names = set()
            running = pending = 0
            by_class: Counter[str] = Counter()
            for p in pods:
                name = p["metadata"]["name"]
                names.add(name)
                phase = (p.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp"):
                    client.delete("pods", name, "default", grace_period_s=0)
                    self.completed += 1
                elif translate.node_name(p):
                    running += 1
                elif name in self.created:
                    pending += 1
                    by_class[resource_class(p)] += 1
            self.running_now, self.pending_now, self.pending_by_class = running, pending, by_class
            for group, members in list(self.groups.items()):
                if not names.intersection(members):
                    client.delete("podgroups", group, "default")
                    del self.groups[group]

    def monitor(self) -> None:
        last: dict[str, tuple[float, float]] = {}
        while not self.stop.wait(10):
            leader = self.leader()
            cycle_ms = math.nan
            if leader is not None:
                s, n = leader.metric("gpufleet_cycle_duration_seconds_sum"), leader.metric("gpufleet_cycle_duration_seconds_count")
                before = last.get(leader.name)
                if before is not None and n > before[1]:
                    cycle_ms = 1000 * (s - before[0]) / (n - before[1])
                last[leader.name] = (s, n)
            standby = [s for s in self.live_schedulers() if s is not leader]
            self.samples.append(Sample(self.now(), rss(leader.proc.pid) if leader else 0.0,
                                       rss(standby[0].proc.pid) if standby else 0.0, rss(self.agent_pid), cycle_ms,
                                       self.running_now, self.pending_now, dict(self.pending_by_class)))

    def checker(self) -> None:
        """Every minute: no device overcommitted, from the objects the API server holds."""
        while not self.stop.wait(60):
            self.check_devices()

    def check_devices(self) -> None:
        problems = workload.check_assignments(self.cluster.admin.list("pods"), self.cluster.admin.list("nodes"))
        for p in problems:
            if p not in self.overcommits:
                log(f"PROBLEM: {p}")
        self.overcommits.update(problems)


def rss(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


# --- the agent's node: its kubelet's device-plugin calls


def allocate_loop(soak: Soak, kubelet: FakeKubelet) -> None:
    """For each pod bound to the agent's node: Allocate its devices, as the kubelet would before
    starting its containers (KWOK starts them 2 s after binding), and check the answer names the
    GPUs the scheduler assigned. The available device IDs are those of the agent's last
    ListAndWatch this kubelet has not handed to another running pod, and among them it takes
    what the plugin's GetPreferredAllocation prefers (the scheduler's choice), as the kubelet
    does for a plugin that offers it."""
    client, node = soak.cluster.client(soak.cluster.admin_token), soak.agent_node
    held: dict[str, tuple[str, list[str]]] = {}
    done: set[str] = set()
    lists: dict[str, list[str]] = {}
    while not soak.stop.wait(0.5):
        pods = client.list("pods", "default", field_selector=f"spec.nodeName={node}")
        alive = {p["metadata"]["uid"] for p in pods if not translate.is_terminal(p)}
        for uid in [u for u in held if u not in alive]:
            del held[uid]
        for p in sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), translate.key_of(p))):
            uid = p["metadata"]["uid"]  # the kubelet admits the pods it is given oldest first
            if uid in done or translate.is_terminal(p):
                continue
            done.add(uid)
            g = translate.pod_spec(p).gpu
            if g.kind.value == "none":
                continue
            if g.kind.value == "mig":
                soak.allocations["mig (the agent's node has none)"] += 1
                continue
            resource, size = (ann.GPU_RESOURCE, g.count) if g.milli == 1000 else (ann.GPU_MILLI_RESOURCE, g.milli)
            ep = kubelet.endpoint(resource)
            while not ep.lists.empty():
                lists[resource] = [d.ID for d in ep.lists.get_nowait().devices if d.health == "Healthy"]
            taken = {i for r, ids in held.values() if r == resource for i in ids}
            free = [i for i in lists.get(resource, []) if i not in taken]
            if len(free) < size:
                soak.allocations["no free device IDs"] += 1
                continue
            try:
                # as the kubelet does: the plugin's preferred IDs (the scheduler's choice), then Allocate
                ids = ep.preferred(free, size)
                answer = ep.allocate(ids)
            except Exception as exc:  # grpc.RpcError: the agent refused
                soak.allocations["refused"] += 1
                log(f"agent refused {p['metadata']['name']}: {exc}")
                continue
            assigned = translate.assignment_of(p)
            visible = answer.container_responses[0].envs.get("NVIDIA_VISIBLE_DEVICES", "")
            if assigned is not None and sorted(visible.split(",")) == sorted(assigned.gpus):
                soak.allocations["served the assigned GPUs"] += 1
            else:
                soak.allocations["served other GPUs"] += 1
                log(f"agent served {visible} to {p['metadata']['name']}, assigned {assigned}")
            held[uid] = (resource, ids)


# --- faults


def faults(soak: Soak) -> None:
    a = soak.args
    gpu_heal: list[tuple[float, str, int]] = []
    node_back: list[tuple[float, str]] = []
    gpus = {n["metadata"]["name"]: int(n["status"]["capacity"].get(ann.GPU_RESOURCE, 0)) for n in soak.nodes}
    kwok_nodes = [name for name, count in gpus.items() if name != soak.agent_node and count]
    next_failover, next_gpu, next_api = a.failover_min * 60, a.gpu_fault_min * 60, a.api_fault_min * 60
    next_node = a.node_fault_min * 60 / 3
    api_rounds = 0
    while not soak.stop.wait(1.0):
        t = soak.now()
        if t >= next_failover:
            next_failover += a.failover_min * 60
            failover(soak)
        if t >= next_gpu:
            next_gpu += a.gpu_fault_min * 60
            node = soak.rng.choice(kwok_nodes)
            index = soak.rng.randrange(gpus[node])
            set_gpu_health(soak.cluster, soak.work / "agent.kubeconfig", node, index, False)
            gpu_heal.append((t + 2 * a.gpu_fault_min * 60, node, index))
            soak.note(f"GPU fault: {node} GPU {index}")
        for item in [h for h in gpu_heal if h[0] <= t]:
            gpu_heal.remove(item)
            set_gpu_health(soak.cluster, soak.work / "agent.kubeconfig", item[1], item[2], True)
            soak.note(f"GPU healed: {item[1]} GPU {item[2]}")
        if t >= next_node:
            next_node += a.node_fault_min * 60
            node = soak.rng.choice(kwok_nodes)
            stop_kubelet(soak.cluster, node)
            node_back.append((t + 300, node))
            soak.note(f"node fault: the kubelet of {node} stops")
        for back in [b for b in node_back if b[0] <= t]:
            node_back.remove(back)
            start_kubelet(soak.cluster, back[1])
            soak.note(f"node back: {back[1]}")
        if t >= next_api:
            next_api += a.api_fault_min * 60
            api_rounds += 1
            soak.proxy.inject(Rule("POST", r"/binding$", Reply(500), times=3),
                              Rule("PATCH", r"^/api/v1/namespaces/[^/]+/pods/[^/]+/status$", Reply(429, retry_after_s=1),
                                   times=3),
                              Rule("GET", r"^/api/v1/pods$", Reply(410), watch=True))
            cut = soak.proxy.cut_watches() if api_rounds % 3 == 0 else 0
            soak.note(f"API faults: 3 x 500 on bindings, 3 x 429 on pod status, a 410 on the pod watch"
                      + (f", {cut} watches cut" if cut else ""))
    for _, node, index in gpu_heal:
        set_gpu_health(soak.cluster, soak.work / "agent.kubeconfig", node, index, True)
    for _, node in node_back:
        start_kubelet(soak.cluster, node)


def failover(soak: Soak) -> None:
    leader = soak.leader()
    if leader is None:
        soak.note("failover skipped: no scheduler leads")
        return
    soak.handover_rss_mib.append((soak.now(), rss(leader.proc.pid), soak.running_now + soak.pending_now))
    leader.kill()
    killed = time.monotonic()
    soak.note(f"failover: kill -9 {leader.name}")
    soak.start_scheduler()
    while soak.leader() is None and not soak.stop.is_set():
        time.sleep(0.2)
    took = time.monotonic() - killed
    soak.takeovers_s.append(took)
    soak.failover_windows.append((killed - soak.t0, soak.now()))
    soak.note(f"failover: new leader after {took:.1f} s")


# --- figures


def p99_ms(latencies: list[float]) -> float:
    if not latencies:
        return math.nan
    s = sorted(latencies)
    return 1000 * s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def growth_pct(series: list[tuple[float, float]], start: float, end: float, window: float = 300.0) -> float:
    """RSS growth from the median of the first `window` s after `start` to that of the last before `end`."""
    first = [v for t, v in series if start <= t < start + window and v > 0]
    last = [v for t, v in series if end - window <= t <= end and v > 0]
    if not first or not last:
        return math.nan
    return 100 * (statistics.median(last) / statistics.median(first) - 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--load", type=float, default=0.7,
                   help="share of each resource class the arrivals keep busy (at 0.85 the whole-GPU class's backlog "
                        "grows all along: 8-GPU pods and gangs wait for whole free nodes; docs/results.md)")
    p.add_argument("--min-duration-s", type=float, default=120)
    p.add_argument("--max-duration-s", type=float, default=720,
                   help="pods run a duration drawn between the two (default 2-12 min: completions are steady "
                        "by minute 12, before the 40-minute memory window starts)")
    p.add_argument("--max-pending", type=int, default=400, help="arrivals pause while more pods wait")
    p.add_argument("--failover-min", type=float, default=10)
    p.add_argument("--gpu-fault-min", type=float, default=3)
    p.add_argument("--node-fault-min", type=float, default=15)
    p.add_argument("--api-fault-min", type=float, default=2)
    p.add_argument("--settle-s", type=float, default=180, help="after the arrivals stop: longest wait for the end state")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, help="write the figures and samples here (JSON)")
    p.add_argument("--plot", type=Path, help="write the plot here (PNG)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit log)")
    a = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufleet-soak-"))
    log(f"work directory {work}")
    nodes = gpu_nodes(a.nodes, seed=7)
    agent_node = next(n["metadata"]["name"] for n in nodes
                      if n["metadata"]["labels"].get("node.kubernetes.io/instance-type") == "p5.48xlarge")
    mean_s = (a.min_duration_s + a.max_duration_s) / 2
    rates = arrival_rates(nodes, a.load, mean_s)
    for cls, r in sorted(rates.items()):
        log(f"{cls}: {r.capacity or '-'} in the fleet; a pod keeps {r.mean_demand:.2f} busy for {mean_s:.0f} s on "
            f"average: {r.rate_per_s:.3f} pods/s")
    log(f"{a.nodes} nodes, {sum(r.rate_per_s for r in rates.values()):.2f} pods/s in all for a load of {a.load:.0%}")
    kubelet_dir = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))  # unix socket paths stay under 108 bytes
    try:
        with Cluster(work / "cluster", ClusterOptions(audit=True, node_lifecycle=True)) as c:
            result = run(a, c, work, nodes, agent_node, rates, kubelet_dir)
    finally:
        shutil.rmtree(kubelet_dir, ignore_errors=True)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(result))
    if a.json:
        print(json.dumps(result["figures"]))
    return 0


def run(a: argparse.Namespace, c: Cluster, work: Path, nodes: list[Obj], agent_node: str, rates: dict[str, ClassRate],
        kubelet_dir: Path) -> Obj:
    install_gpufleet(c)
    c.admin.create_all(workload.queue_manifests() + workload.priority_class_manifests())
    create_all(c.admin, nodes)
    untainted = lambda: sum(1 for n in c.admin.list("nodes") if not (n.get("spec") or {}).get("taints"))  # noqa: E731
    deadline = time.monotonic() + 600
    while untainted() < len(nodes):
        if time.monotonic() > deadline:
            raise SystemExit("the nodes did not become Ready and untainted within 10 minutes")
        time.sleep(2)
    log("nodes Ready")
    keys = work / "assignment-keys"
    keys.mkdir()
    (keys / "k1").write_text(random.Random(3).randbytes(32).hex())
    agent_kc = agent_kubeconfig(c, work / "agent.kubeconfig")
    config = work / "agent.yaml"
    config.write_text("gpufleet: {fractions: true, metricsPort: 0}\n")
    kubelet = FakeKubelet(kubelet_dir)
    kubelet.start()
    agent_log = (work / "agent.log").open("ab")
    agent = subprocess.Popen([sys.executable, "-m", "gpufleet.cli.main", "agent", "run", "--fake", AGENT_FIXTURE,
                              "--kubelet-dir", str(kubelet_dir), "--node-name", agent_node, "--metrics-port", "0",
                              "--kubeconfig", str(agent_kc), "--config", str(config), "--assignment-keys", str(keys)],
                             stdout=agent_log, stderr=subprocess.STDOUT, env=clean_env())
    kubelet.endpoint(ann.GPU_MILLI_RESOURCE, timeout_s=60)
    before = next(n for n in nodes if n["metadata"]["name"] == agent_node)["metadata"]["annotations"]
    deadline = time.monotonic() + 60
    while (c.admin.get("nodes", agent_node) or {})["metadata"]["annotations"].get(ann.INVENTORY_ANNOTATION) \
            == before[ann.INVENTORY_ANNOTATION]:  # the agent's own inventory (its fake GPUs' UUIDs) replaces it
        if time.monotonic() > deadline:
            raise SystemExit(f"the agent did not publish its inventory on {agent_node}; see {work / 'agent.log'}")
        time.sleep(1)
    with FaultProxy.for_cluster(c, work / "proxy") as proxy:
        token = c.service_account_token(NAMESPACE, SCHEDULER_SA)
        soak = Soak(a, c, proxy, proxy.kubeconfig(work / "scheduler.kubeconfig", token), keys, work, nodes, agent_node)
        soak.agent_pid = agent.pid
        first, second = soak.start_scheduler(), soak.start_scheduler()
        for s in (first, second):
            while not s.ready():
                time.sleep(0.5)
        unfit, _ = workload.pod_manifests(nodes, 400, seed=7, prefix="never")
        unfit = [p for p in unfit if fits_nowhere(p)][:10]
        c.admin.create_all(unfit)
        ep = Endpoint(c.url, c.admin_token, str(c.ca_file))
        watcher = Watcher(ep)
        soak.t0 = time.monotonic()
        streams = [Stream(nodes, 1 + i, a.min_duration_s, a.max_duration_s, "2s", only=cls, prefix=f"s{i}-")
                   for i, cls in enumerate(sorted(rates))]
        threads = [*(threading.Thread(target=soak.arrivals, args=(st, rates[st.only or ""].rate_per_s, 5 + i), daemon=True)
                     for i, st in enumerate(streams)),
                   threading.Thread(target=soak.reaper, daemon=True), threading.Thread(target=soak.monitor, daemon=True),
                   threading.Thread(target=soak.checker, daemon=True), threading.Thread(target=faults, args=(soak,), daemon=True),
                   threading.Thread(target=allocate_loop, args=(soak, kubelet), daemon=True)]
        for t in threads:
            t.start()
        end = a.minutes * 60
        while soak.now() < end:
            time.sleep(min(60.0, end - soak.now()))
            log(f"{soak.now() / 60:.0f} min: {len(soak.created)} created, {len(watcher.bound)} bound, "
                f"{soak.completed} completed, {soak.running_now} running, {soak.pending_now} pending")
        soak.stop.set()
        for t in threads:
            t.join(120)
        leader = soak.leader()
        if leader is not None:
            soak.handover_rss_mib.append((soak.now(), rss(leader.proc.pid), soak.running_now + soak.pending_now))
        log("arrivals stopped; waiting for the scheduler to settle")
        lost = settle(c, a.settle_s)
        soak.check_devices()
        watcher.stop()
        agent.terminate()
        agent.wait(15)
        agent_log.close()
        kubelet.stop()
        for s in soak.live_schedulers():
            s.terminate()
        double = {k: n for k, n in successful_bindings(c).items() if n > 1}
    return figures(soak, watcher.bound, double, lost, rates, proxy)


def settle(c: Cluster, timeout_s: float) -> list[str]:
    """Waits until every pending pod is reported and none could be placed; what is still wrong."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = c.admin.list("pods")
        wrong = workload.check_pending(pods) + workload.placeable(pods, c.admin.list("nodes"), c.admin.list("podgroups"))
        if not wrong or time.monotonic() > deadline:
            return wrong
        time.sleep(5)


def figures(soak: Soak, bound: dict[str, float], double: dict[str, int], lost: list[str], rates: dict[str, ClassRate],
            proxy: FaultProxy) -> Obj:
    a = soak.args
    end = a.minutes * 60
    lat = [(soak.created[n] - soak.t0, bound[n] - soak.created[n]) for n in soak.created if n in bound]
    first = [d for t, d in lat if t < 600]
    last = [d for t, d in lat if end - 600 <= t]

    def calm(t: float) -> bool:
        """Created neither during a failover nor in the 5 s before it (those wait for the new leader)."""
        return not any(k - 5 <= t <= e for k, e in soak.failover_windows)
    first_calm = [d for t, d in lat if t < 600 and calm(t)]
    last_calm = [d for t, d in lat if end - 600 <= t and calm(t)]
    warm = min(20 * 60.0, end / 2)
    agent_series = [(s.t, s.agent_rss_mib) for s in soak.samples]
    agent_growth = growth_pct(agent_series, warm, end)
    handovers = [(t, v) for t, v, _ in soak.handover_rss_mib if t >= warm - 1]
    sched_growth = (100 * (handovers[-1][1] / handovers[0][1] - 1)) if len(handovers) >= 2 else math.nan
    growths = [g for g in (agent_growth, sched_growth) if not math.isnan(g)]
    cycles = [s.cycle_ms for s in soak.samples if not math.isnan(s.cycle_ms)]
    figs: Obj = {
        "minutes": a.minutes, "nodes": a.nodes, "gpus": rates[GPU_CLASS].capacity if GPU_CLASS in rates else 0,
        "pods_created": len(soak.created), "pods_bound": len(bound), "pods_completed": soak.completed,
        "arrival_rate_per_s": {c: round(r.rate_per_s, 3) for c, r in sorted(rates.items())},
        "arrivals_paused_s": dict(soak.paused_s),
        "failovers": len(soak.takeovers_s), "takeover_s": [round(x, 1) for x in soak.takeovers_s],
        "gpu_faults": sum(1 for _, e in soak.events if e.startswith("GPU fault")),
        "node_faults": sum(1 for _, e in soak.events if e.startswith("node fault")),
        "api_faults_injected": len(proxy.injected),
        "agent_allocations": dict(soak.allocations),
        "cycle_ms_median": round(statistics.median(cycles), 1) if cycles else None,
        "p50_ms_all": round(1000 * statistics.median([d for _, d in lat]), 1) if lat else None,
        "double_binds": len(double), "overcommits": len(soak.overcommits), "lost_pods": len(lost),
        "rss_growth_pct": round(max(growths), 2) if growths else None,
        "agent_rss_growth_pct": round(agent_growth, 2), "scheduler_rss_growth_pct": round(sched_growth, 2),
        "leader_rss_at_handovers": [f"{t / 60:.0f} min: {v:.0f} MiB, {n} pods held"
                                    for t, v, n in soak.handover_rss_mib],
        "p99_ms_first_10min_outside_failovers": round(p99_ms(first_calm), 1),
        "p99_ms_last_10min_outside_failovers": round(p99_ms(last_calm), 1),
        "p99_ms_first_10min": round(p99_ms(first), 1), "p99_ms_last_10min": round(p99_ms(last), 1),
    }
    result: Obj = {"date": date.today().isoformat(), "machine": f"{platform.node()}, {psutil.cpu_count()} cores, "
                   f"{psutil.virtual_memory().total / 2**30:.0f} GiB", "command": " ".join(sys.argv),
                   "figures": figs, "lost": lost[:50], "double_bound": double, "overcommits": sorted(soak.overcommits)[:50],
                   "events": soak.events, "samples": [s.__dict__ for s in soak.samples],
                   "latency": [(round(t, 1), round(d, 4)) for t, d in lat], "handover_rss_mib": soak.handover_rss_mib}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    if a.plot:
        plot(result, a.plot)
    return result


def plot(result: Obj, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = result["samples"]
    minutes = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    ax = axes[0]
    ax.plot(minutes, [s["scheduler_rss_mib"] or math.nan for s in samples], label="scheduler (leader)")
    ax.plot(minutes, [s["standby_rss_mib"] or math.nan for s in samples], label="scheduler (standby)", alpha=0.6)
    ax.plot(minutes, [s["agent_rss_mib"] or math.nan for s in samples], label="agent")
    ax.set_ylabel("RSS (MiB)")
    ax.legend(loc="upper left", fontsize=8)
    axes[1].plot(minutes, [s["cycle_ms"] for s in samples], ".", markersize=3)
    axes[1].set_ylabel("leader's mean cycle (ms)")
    by_minute: dict[int, list[float]] = {}
    for t, d in result["latency"]:
        by_minute.setdefault(int(t // 60), []).append(d)
    xs = sorted(by_minute)
    axes[2].plot(xs, [p99_ms(by_minute[x]) / 1000 for x in xs], label="p99")
    axes[2].plot(xs, [statistics.median(by_minute[x]) for x in xs], label="p50")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("create-to-bound (s)\nby minute created")
    axes[2].legend(loc="upper left", fontsize=8)
    axes[3].plot(minutes, [s["running"] for s in samples], label="bound")
    axes[3].plot(minutes, [s["pending"] for s in samples], label="pending")
    for cls in sorted({c for s in samples for c in s.get("pending_by_class", {})}):
        axes[3].plot(minutes, [s.get("pending_by_class", {}).get(cls, 0) for s in samples], linewidth=0.7,
                     linestyle="--", label=f"pending {cls.removeprefix(ann.MIG_RESOURCE_PREFIX)}")
    axes[3].set_ylabel("pods")
    axes[3].set_xlabel("minutes")
    axes[3].legend(loc="upper left", fontsize=8)
    marks = {"failover: kill": ("red", "-"), "node fault": ("purple", "--"), "GPU fault": ("darkorange", ":")}
    for t, what in result["events"]:
        mark = next((m for k, m in marks.items() if what.startswith(k)), None)
        if mark:
            for ax in axes:
                ax.axvline(t / 60, color=mark[0], linestyle=mark[1], alpha=0.5, linewidth=0.9)
    f = result["figures"]
    fig.suptitle(f"gpufleet soak: {f['minutes']:g} min, {f['nodes']} KWOK nodes, {f['pods_created']} pods; "
                 "red: failovers, purple dashed: node faults, orange dotted: GPU faults", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: Obj) -> str:
    return "\n".join(f"{k:28} {v}" for k, v in result["figures"].items())


if __name__ == "__main__":
    raise SystemExit(main())
