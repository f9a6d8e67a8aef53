"""Prometheus metrics of the live scheduler and the small HTTP server for /metrics, /healthz, /readyz.

| metric | type | labels | meaning |
|---|---|---|---|
| gpufleet_pending_pods | gauge | queue, reason | pods waiting: Unschedulable, SchedulingGated, InvalidRequest, QueueNotAllowed, Binding |
| gpufleet_schedule_attempts_total | counter | result | scheduled, unschedulable, error (per pod per cycle) |
| gpufleet_e2e_scheduling_duration_seconds | histogram | | pod created (its watch event; `creationTimestamp` for pods found by a list) to its Binding returned |
| gpufleet_bind_errors_total | counter | reason | failed annotation patches or Bindings by HTTP status or error kind |
| gpufleet_binds_total | counter | | successful Bindings |
| gpufleet_gpu_allocation_ratio | gauge | | allocated GPU-milli / GPU-milli of all GPUs |
| gpufleet_gpu_fragmentation_ratio | gauge | | FGD fragmentation of free GPU-milli / all GPU-milli |
| gpufleet_cycle_duration_seconds | histogram | | one `schedule()` call with its snapshot |
| gpufleet_leader | gauge | | 1 while this replica leads (or runs without election) |
| gpufleet_evictions_total | counter | result | Eviction API calls: evicted, blocked (429), failed |
| gpufleet_faults_total | counter | kind | fault episodes seen: device (a GPU marked unhealthy), node (NotReady) |
| gpufleet_faults_active | gauge | kind | fault episodes open now |
| gpufleet_fault_evictions_total | counter | kind | pods evicted for a fault, gang mates included (once per episode) |
| gpufleet_nodeclaims_created_total | counter | nodepool | Karpenter NodeClaims gpufleet created (`--karpenter`) |
| gpufleet_nodeclaim_errors_total | counter | reason | NodeClaim creations that failed |
| gpufleet_do_not_disrupt_nodes | gauge | | GPU nodes gpufleet keeps `karpenter.sh/do-not-disrupt` on (GPUs busy) |
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.pending = Gauge("gpufleet_pending_pods", "Pods waiting for gpufleet, by queue and reason",
                             ["queue", "reason"], registry=r)
        self.attempts = Counter("gpufleet_schedule_attempts", "Scheduling attempts by result", ["result"], registry=r)
        self.e2e = Histogram("gpufleet_e2e_scheduling_duration_seconds",
                             "From the pod's creation (as its watch event arrived) to its Binding returned", buckets=LATENCY_BUCKETS, registry=r)
        self.bind_errors = Counter("gpufleet_bind_errors", "Failed binds by reason", ["reason"], registry=r)
        self.binds = Counter("gpufleet_binds", "Successful Bindings", registry=r)
        self.allocation = Gauge("gpufleet_gpu_allocation_ratio", "Allocated GPU share of all GPUs", registry=r)
        self.fragmentation = Gauge("gpufleet_gpu_fragmentation_ratio",
                                   "FGD fragmentation (free GPU-milli unusable by typical tasks) / all GPU-milli",
                                   registry=r)
        self.cycle = Histogram("gpufleet_cycle_duration_seconds", "Snapshot plus schedule() per cycle",
                               buckets=LATENCY_BUCKETS, registry=r)
        self.leader = Gauge("gpufleet_leader", "1 while this replica is the leader", registry=r)
        self.evictions = Counter("gpufleet_evictions", "Eviction calls by result", ["result"], registry=r)
        self.faults = Counter("gpufleet_faults", "Fault episodes seen (device: a GPU unhealthy; node: NotReady)",
                              ["kind"], registry=r)
        self.faults_active = Gauge("gpufleet_faults_active", "Fault episodes open now", ["kind"], registry=r)
        self.fault_evictions = Counter("gpufleet_fault_evictions", "Pods evicted because of a fault, gang mates "
                                       "included (once per pod and episode)", ["kind"], registry=r)
        self.nodeclaims = Counter("gpufleet_nodeclaims_created", "Karpenter NodeClaims created by gpufleet",
                                  ["nodepool"], registry=r)
        self.nodeclaim_errors = Counter("gpufleet_nodeclaim_errors", "NodeClaim creations that failed", ["reason"],
                                        registry=r)
        self.do_not_disrupt = Gauge("gpufleet_do_not_disrupt_nodes",
                                    "GPU nodes gpufleet keeps karpenter.sh/do-not-disrupt on (GPUs busy)", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """/metrics, /healthz (the process is alive), /readyz (`ready()`: informers synced),
    /leaderz (`leading()`: 200 on the replica that schedules, 503 on a standby)."""

    def __init__(self, port: int, metrics: Metrics, ready: Callable[[], bool],
                 leading: Callable[[], bool] = lambda: True, host: str = "0.0.0.0") -> None:
        self._http = ThreadingHTTPServer((host, port), _handler(metrics, ready, leading))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def _handler(metrics: Metrics, ready: Callable[[], bool], leading: Callable[[], bool]
             ) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            route = self.path.split("?", 1)[0]
            if route == "/metrics":
                self._reply(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif route in ("/healthz", "/livez"):
                self._reply(200, b"ok\n")
            elif route == "/readyz":
                ok = ready()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n")
            elif route == "/leaderz":
                ok = leading()
                self._reply(200 if ok else 503, b"leader\n" if ok else b"standby\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (inherited name)
            pass

    return Handler
