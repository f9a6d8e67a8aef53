"""End-to-end harness: the local API server, the scheduler as a separate process, and waiting.

The scheduler runs as `python -m gpufleet.cli.scheduler_cmd scheduler ...` (the `gpufleet
scheduler` command without loading the other subcommands) with its log in a file; its
HTTP port (`--http-port 0`) is read from its first log line. Pods are created through the
API (HTTP POSTs from a small thread pool), not behind the server's back.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import httpx2
import yaml

from gpufleet.testing.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "src/gpufleet/framework/profiles/default.yaml"


def install_crds(srv: ApiServer) -> None:
    for f in sorted(glob.glob(str(ROOT / "deploy/crds/*.yaml"))):
        srv.create(yaml.safe_load(Path(f).read_text()))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra)
    return env


class Scheduler:
    """One scheduler process."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str, name: str = "sched") -> None:
        self.log_path, self.name = log, name
        self._offset = log.stat().st_size if log.exists() else 0
        """Where this process's lines start in a log shared with an earlier process."""
        self._log = log.open("ab")
        cmd = [sys.executable, "-m", "gpufleet.cli.scheduler_cmd", "scheduler", "--kubeconfig", str(kubeconfig),
               "--config", str(PROFILE), "--http-port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=clean_env(POD_NAME=name))
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            def found() -> bool:
                m = re.search(r"http :(\d+)", self.log()[self._offset:])
                if m:
                    self._port = int(m.group(1))
                return m is not None or self.proc.poll() is not None
            wait_for(found, 30, "the scheduler's first log line")
            assert self._port is not None, self.log()
        return self._port

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, route: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{route}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError:
            return 0, ""

    def metric(self, name: str) -> float:
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def leading(self) -> bool:
        return self.get("/leaderz")[0] == 200

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout_s: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.close()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> float:
    """Poll `cond` until true; the seconds it took. Fails the test on timeout."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - start


def create_via_api(srv: ApiServer, objs: Iterable[Mapping[str, Any]], threads: int = 8) -> list[float]:
    """POST each object; returns the time each create returned (monotonic), in order."""
    objs = list(objs)
    client = httpx2.Client(base_url=srv.url, timeout=30, trust_env=False,
                           limits=httpx2.Limits(max_connections=threads, max_keepalive_connections=threads))

    def post(obj: Mapping[str, Any]) -> float:
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        r = client.post(f"/api/v1/namespaces/{ns}/pods", content=json.dumps(obj).encode(),
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 201, r.text
        return time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(post, objs))
    finally:
        client.close()


def gpufleet_pods(srv: ApiServer) -> list[dict[str, Any]]:
    return [p for p in srv.list("pods") if (p.get("spec") or {}).get("schedulerName") == "gpufleet"]


def bound(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
            for p in pods if (p.get("spec") or {}).get("nodeName")}


def successful_bindings(srv: ApiServer) -> dict[str, int]:
    """Pod path -> how many Binding POSTs for it succeeded."""
    counts: dict[str, int] = {}
    for r in srv.requests:
        if r.method == "POST" and r.path.endswith("/binding") and 200 <= r.status < 300:
            counts[r.path] = counts.get(r.path, 0) + 1
    return counts
