"""CPU per request of the live scheduler's HTTP client against the real kube-apiserver: replies read
with `http.client` (until 2026-11-28) and with httptools (`gpufleet.kube.http1`), same run.

One fresh control plane (`gpufleet.testing.cluster`); one thread sends `--requests` GETs of a small
object (the default Namespace, a reply of about 400 bytes like a Binding's) on one keep-alive
connection with each client in turn, `--rounds` times, and prints each one's CPU time (this
thread's) and wall time per request. The server's CPU is not counted: what is measured is what a
request costs the process that sends it (the scheduler's binder threads share one GIL).

    .venv/bin/python bench/client_cpu.py [--requests 3000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import platform
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gpufleet.kube import http1  # noqa: E402
from gpufleet.testing.cluster import Cluster, ClusterOptions  # noqa: E402

TARGET = "/api/v1/namespaces/default"


def with_http_client(conn: http.client.HTTPSConnection, headers: dict[str, str]) -> Callable[[], int]:
    def get() -> int:
        conn.request("GET", TARGET, headers=headers)
        reply = conn.getresponse()
        reply.read()
        return reply.status
    return get


def with_httptools(conn: http.client.HTTPSConnection, host: str, headers: dict[str, str]) -> Callable[[], int]:
    def get() -> int:
        if conn.sock is None:
            conn.connect()
        reply, keep = http1.exchange(conn.sock, http1.request_bytes("GET", TARGET, host, headers, None))
        if not keep:
            conn.close()
        return reply.status
    return get


def measure(get: Callable[[], int], n: int) -> dict[str, float]:
    if get() != 200:
        raise SystemExit(f"GET {TARGET}: not 200")
    cpu, wall = time.thread_time(), time.monotonic()
    for _ in range(n):
        get()
    return {"cpu_ms_per_request": round(1000 * (time.thread_time() - cpu) / n, 3),
            "wall_ms_per_request": round(1000 * (time.monotonic() - wall) / n, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.requests < 1 or args.rounds < 1:
        parser.error("--requests and --rounds: at least 1")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster(Path(d) / "c", ClusterOptions(audit=False, node_lifecycle=False))
        cluster.start()
        try:
            url = urlsplit(cluster.url)
            host, port = url.hostname or "127.0.0.1", url.port or 443
            context = ssl.create_default_context(cafile=str(cluster.ca_file))
            headers = {"Accept": "application/json", "User-Agent": "gpufleet",
                       "Authorization": f"Bearer {cluster.admin_token}"}
            clients = {
                "http.client": with_http_client(http.client.HTTPSConnection(host, port, context=context), headers),
                "httptools": with_httptools(http.client.HTTPSConnection(host, port, context=context),
                                            f"{host}:{port}", headers),
            }
            for n in range(1, args.rounds + 1):
                for name, get in clients.items():
                    runs.append({"round": n, "client": name, **measure(get, args.requests)})
                    r = runs[-1]
                    print(f"round {n} {name:12}: {r['cpu_ms_per_request']:.3f} ms CPU, "
                          f"{r['wall_ms_per_request']:.3f} ms wall per request", flush=True)
        finally:
            cluster.stop()
    if args.json:
        print(json.dumps({"machine": f"{platform.machine()} Python {platform.python_version()}",
                          "requests": args.requests, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
