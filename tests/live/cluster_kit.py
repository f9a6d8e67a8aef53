"""The real control plane in tests: a cluster per test, gpufleet's manifests installed from
`deploy/`, the scheduler as a process under its own ServiceAccount, and what the audit log says.

The scheduler and the agent never run as admin here: they get the kubeconfig of the
ServiceAccount that `deploy/` creates for them, so kube-apiserver enforces `deploy/`'s RBAC
on every request they make.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import yaml

from gpufleet.framework.profile import load_profiles
from gpufleet.kube import config
from gpufleet.kube.rest import Rest
from gpufleet.kube.retry import RetryPolicy
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.testing.cluster import Cluster, KubeClient
from gpufleet.testing.cluster.client import ApiError

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "src/gpufleet/framework/profiles/default.yaml"
NAMESPACE = "gpufleet-system"
SCHEDULER_SA = "gpufleet-scheduler"
AGENT_SA = "gpufleet-agent"
Obj = dict[str, Any]


def manifests(*relative: str) -> list[Obj]:
    docs: list[Obj] = []
    for rel in relative:
        docs.extend(d for d in yaml.safe_load_all((ROOT / rel).read_text()) if d)
    return docs


def install_gpufleet(cluster: Cluster) -> None:
    """deploy/'s namespace, CRDs, ServiceAccounts and RBAC (not the Deployment and DaemonSet: the
    tests run the scheduler and agent themselves, under those ServiceAccounts)."""
    admin = cluster.admin
    for obj in manifests("deploy/namespace.yaml", "deploy/crds/podgroups.scheduling.x-k8s.io.yaml",
                         "deploy/crds/queues.gpufleet.io.yaml", "deploy/scheduler/rbac.yaml", "deploy/agent/rbac.yaml"):
        admin.create(obj)
    for crd in ("podgroups.scheduling.x-k8s.io", "queues.gpufleet.io"):
        wait_for(lambda: crd_established(admin, crd), 30, f"CRD {crd} established")
    admin.discover()


def crd_established(admin: KubeClient, name: str) -> bool:
    crd = admin.get("customresourcedefinitions", name) or {}
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])  # null until the controller looks


def scheduler_kubeconfig(cluster: Cluster, path: Path) -> Path:
    return cluster.service_account_kubeconfig(NAMESPACE, SCHEDULER_SA, path)


def agent_kubeconfig(cluster: Cluster, path: Path) -> Path:
    return cluster.service_account_kubeconfig(NAMESPACE, AGENT_SA, path)


def service_account_user(name: str, namespace: str = NAMESPACE) -> str:
    """The user name kube-apiserver (and its audit log) gives a ServiceAccount's requests."""
    return f"system:serviceaccount:{namespace}:{name}"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra)
    return env


class Scheduler:
    """One `gpufleet scheduler` process, its log in a file; its HTTP port read from its first log line."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str, name: str = "sched",
                 profile: Path = PROFILE) -> None:
        self.log_path, self.name = log, name
        self._offset = log.stat().st_size if log.exists() else 0
        self._log = log.open("ab")
        cmd = [sys.executable, "-m", "gpufleet.cli.scheduler_cmd", "scheduler", "--kubeconfig", str(kubeconfig),
               "--config", str(profile), "--http-port", "0", *args]
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
        if self.proc.poll() is not None:
            raise AssertionError(f"the scheduler exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
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


@contextmanager
def scheduler_in_process(kubeconfig: Path, **settings: Any) -> Iterator[SchedulerService]:
    """The live scheduler in this process (a thread), with `kubeconfig`'s identity and test-friendly
    timings (`settings` override `ServiceSettings`); its metrics readable on the service."""
    rest = Rest(config.from_kubeconfig(kubeconfig), timeout_s=5.0)
    profile = load_profiles(PROFILE.read_text(), str(PROFILE))[0]
    defaults: dict[str, Any] = {"qps": 0, "resync_s": 0.5, "metrics_interval_s": 0.2,
                                "retry": RetryPolicy(attempts=3, first_delay_s=0.05, budget_s=1.0)}
    service = SchedulerService(rest, profile, ServiceSettings(**{**defaults, **settings}))
    thread = threading.Thread(target=service.run, name="scheduler-under-test", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(10)
        service.shutdown()
        rest.close()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> float:
    """Poll `cond` until true; the seconds it took. Fails the test on timeout."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return time.monotonic() - start


def create_all(client: KubeClient, objs: Iterable[Mapping[str, Any]], threads: int = 8) -> list[float]:
    """POST each object from a few threads; the time each create returned (monotonic), in order."""
    def post(obj: Mapping[str, Any]) -> float:
        client.create(obj)
        return time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(post, list(objs)))


def gpufleet_pods(client: KubeClient) -> list[Obj]:
    return [p for p in client.list("pods") if (p.get("spec") or {}).get("schedulerName") == "gpufleet"]


def bound(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
            for p in pods if (p.get("spec") or {}).get("nodeName")}


def successful_bindings(cluster: Cluster) -> dict[str, int]:
    """namespace/pod -> how many Bindings for it the API server accepted (from its audit log)."""
    counts: dict[str, int] = {}
    for r in cluster.iter_audit():
        if r.resource == "pods" and r.subresource == "binding" and r.verb == "create" and 200 <= r.code < 300:
            counts[r.path] = counts.get(r.path, 0) + 1
    return counts


def add_tenant(cluster: Cluster, namespace: str) -> None:
    """A namespace whose `default` ServiceAccount has the built-in `edit` ClusterRole in it: what a
    team usually gets (`cluster.service_account_token(namespace, "default")` is its identity)."""
    cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.wait_for_service_account(namespace)
    cluster.admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                          "metadata": {"name": "tenant-edit", "namespace": namespace},
                          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                          "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})


def refused_dry_run(client: KubeClient, obj: Mapping[str, Any]) -> bool:
    """Whether the API server refuses to create `obj` (a dry run: nothing is stored)."""
    try:
        client.create(obj, dry_run=True)
    except ApiError:
        return True
    return False


def try_create(client: KubeClient, obj: Mapping[str, Any]) -> ApiError | None:
    """Create `obj`; the API server's refusal, if it refused."""
    try:
        client.create(obj)
    except ApiError as exc:
        return exc
    return None


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]
