"""The real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager
and KWOK, built from their Go modules (`make kube`), for tests, benchmarks and `gpufleet dev-cluster`.

    with Cluster(tmp_path) as cluster:
        cluster.admin.create_all(gpu_nodes(200, seed=7))
        kubeconfig = cluster.service_account_kubeconfig("gpufleet-system", "gpufleet-scheduler", tmp_path / "k")

What runs, and how (docs/control-plane.md):

- etcd on loopback ports, data in the work directory, `--unsafe-no-fsync` (test data).
- kube-apiserver with TLS from the cluster's own CA, RBAC authorization, a token file for the
  test admin (`system:masters`), kube-controller-manager and KWOK, service-account tokens signed
  with the cluster's key, max-in-flight limits and priority-and-fairness off (as kwokctl runs it
  for scale), and an audit log at the Metadata level of every request made by anyone but the
  control plane's own controllers: what a component under test asked, as whom, and the answer.
- kube-controller-manager with per-controller service accounts, as kubeadm runs it: garbage
  collection, namespaces, service accounts and their tokens, the ResourceClaim controller,
  node lifecycle (a node whose lease stops being renewed goes NotReady and is tainted).
- KWOK as the kubelets of nodes annotated `kwok.x-k8s.io/node: fake`: it renews their leases,
  runs the pods bound to them and finishes pods that carry `gpufleet.io/test-duration`
  (`kwok-stages.yaml`).

Components under test (the scheduler, the agent) are not started here; they connect with a
kubeconfig of their own ServiceAccount (`service_account_kubeconfig`), so RBAC applies to them
as it would in a user's cluster.

`add_stop_listener` hands every cluster that stops, with its complete audit log, to a function:
how a test session looks at all the control planes it started (tests/live/conftest.py records
every request the scheduler and the agent made, to check RBAC against them).
"""

from __future__ import annotations

import atexit
import base64
import json
import ssl
import os
import secrets
import socket
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Callable, Iterator

import httpx2

from gpufleet.testing.cluster.binaries import binary, read_versions
from gpufleet.testing.cluster.client import KubeClient
from gpufleet.testing.cluster.pki import Pki, make_pki
from gpufleet.testing.cluster.process import ComponentFailed, Process

STAGES = Path(__file__).with_name("kwok-stages.yaml")
DURATION_ANNOTATION = "gpufleet.io/test-duration"
"""A pod with this annotation (a Go duration, "30s") succeeds that long after it starts running
(KWOK's stage `pod-complete` in kwok-stages.yaml reads it)."""
START_DELAY_ANNOTATION = "gpufleet.io/test-start-delay"
"""A pod with this annotation (a Go duration) starts running that long after it is bound, as after
an image pull: the window in which a kubelet calls the device plugin's Allocate (stage
`pod-ready-after-start-delay`)."""
ADMIN = "gpufleet-test-admin"
CONTROL_PLANE_USERS = ("system:kube-controller-manager", "system:kube-scheduler", "system:apiserver", "kwok",
                       "karpenter")
"""Identities whose requests the audit log leaves out (with kube-system's service accounts)."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One API request, as kube-apiserver's audit log recorded it."""

    user: str
    verb: str
    """get, list, watch, create, update, patch, delete, deletecollection."""
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    uri: str = ""
    """The request's path and query; what names a request to a non-resource URL (`/apis/...`
    discovery), which has no resource."""
    stage: str = "ResponseComplete"
    """ResponseComplete, or ResponseStarted for a watch whose answer had begun (`iter_audit(stages=...)`)."""

    @property
    def path(self) -> str:
        """namespace/name, or name for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass
class ClusterOptions:
    audit: bool = True
    """Record every request outside the control plane (tests); off for benchmarks."""
    node_lifecycle: bool = True
    """kube-controller-manager's node-lifecycle controller, and KWOK's lease heartbeats (which it needs
    to keep nodes Ready). Off for benchmarks at thousands of nodes: leases cost writes, and without
    them nodes are never marked NotReady."""
    node_monitor_grace_period_s: int = 20
    """How long a node's lease may go unrenewed before it is NotReady (kube-controller-manager's
    default is 50 s; shorter here so fault tests finish)."""
    apiserver_port: int = 0
    """kube-apiserver's port on 127.0.0.1; 0 = a free one."""
    extra_apiserver_args: list[str] = field(default_factory=list)


_RUNNING: weakref.WeakSet[Cluster] = weakref.WeakSet()
"""Clusters started and not yet stopped: stopped when the interpreter exits, so that a test run that
ends on an exception leaves no control plane behind (components run in their own sessions)."""


StopListener = Callable[["Cluster"], None]
_STOP_LISTENERS: list[StopListener] = []


def add_stop_listener(listener: StopListener) -> Callable[[], None]:
    """Call `listener(cluster)` whenever a started Cluster stops: after its processes have
    stopped, so that its audit log is complete, with its work directory still in place. A
    listener must not raise (it would end `stop()` after the processes, not before them).
    Returns the function that removes the listener."""
    _STOP_LISTENERS.append(listener)
    return lambda: _STOP_LISTENERS.remove(listener)


@atexit.register
def _stop_running() -> None:
    for cluster in list(_RUNNING):
        cluster.stop()


class Cluster:
    """A local control plane in `workdir` (certificates, etcd data, logs, kubeconfigs)."""

    def __init__(self, workdir: Path, options: ClusterOptions | None = None) -> None:
        self.workdir = Path(workdir)
        self.options = options or ClusterOptions()
        self.logs = self.workdir / "logs"
        self._tokens = {name: secrets.token_hex(16) for name in (ADMIN, *CONTROL_PLANE_USERS)}
        self._processes: dict[str, Process] = {}
        self._admin: KubeClient | None = None
        self.pki: Pki | None = None
        self.etcd_port = self.apiserver_port = self.kwok_port = 0
        self.versions = read_versions().as_dict()
        self._started = False

    # --- lifecycle

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Cluster:
        binaries = {name: binary(name) for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")}
        _RUNNING.add(self)
        self._started = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.workdir / "pki")
        self._write_auth_files()
        self._retrying("etcd", lambda: self._start_etcd(binaries["etcd"]))
        self._retrying("kube-apiserver", lambda: self._start_apiserver(binaries["kube-apiserver"]))
        self._write_kubeconfigs()
        self._retrying("kube-controller-manager",
                       lambda: self._start_controller_manager(binaries["kube-controller-manager"]))
        self._retrying("kwok", lambda: self._start_kwok(binaries["kwok"]))
        return self

    def _retrying(self, name: str, start: Callable[[], None], attempts: int = 3) -> None:
        """Start a component on free ports; again on other ports if one was taken meanwhile (ports are
        chosen free, then given to the component: another process can take one in between)."""
        for attempt in range(attempts):
            try:
                start()
                return
            except ComponentFailed as exc:
                fixed = name == "kube-apiserver" and self.options.apiserver_port
                if "address already in use" not in str(exc) or fixed or attempt == attempts - 1:
                    raise
                self._processes.pop(name).stop()

    def stop(self) -> None:
        _RUNNING.discard(self)
        for name in ("kwok", "kube-controller-manager", "kube-apiserver", "etcd"):
            process = self._processes.pop(name, None)
            if process is not None:
                process.stop()
        for extra in list(self._processes.values()):
            extra.stop()
        self._processes.clear()
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        started, self._started = self._started, False
        if started:  # once per start, though stop() runs again at exit
            for listener in list(_STOP_LISTENERS):
                listener(self)

    def restart(self, component: str, *, kill: bool = True) -> None:
        """Kill (or stop) one component and start it again with the same flags and data."""
        process = self._processes[component]
        process.kill() if kill else process.stop()
        process.start()
        if component == "kube-apiserver":
            process.wait_until(self._apiserver_ready, 60, "ready")
        elif component == "etcd":
            process.wait_until(self._etcd_ready, 30, "ready")

    def component(self, name: str) -> Process:
        return self._processes[name]

    def add_process(self, name: str, argv: list[str], *, env: dict[str, str] | None = None) -> Process:
        """Run another process with the cluster (stopped with it), its log beside the others."""
        process = Process(name, argv, self.logs / f"{name}.log", env=env).start()
        self._processes[name] = process
        return process

    # --- access

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        assert self.pki is not None, "the cluster is not started"
        return self.pki.ca_cert

    @property
    def admin(self) -> KubeClient:
        """A client with the test admin's identity (system:masters)."""
        if self._admin is None:
            self._admin = KubeClient(self.url, self._tokens[ADMIN], str(self.ca_file))
        return self._admin

    @property
    def admin_token(self) -> str:
        """The test admin's bearer token (system:masters), for clients of one's own."""
        return self._tokens[ADMIN]

    def client(self, token: str) -> KubeClient:
        return KubeClient(self.url, token, str(self.ca_file))

    def write_kubeconfig(self, path: Path, *, token: str | None = None, user: str = "admin",
                         namespace: str = "default") -> Path:
        """A kubeconfig for this cluster: the admin's by default, or a given bearer token's."""
        ca = self.ca_file.read_text()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "gpufleet-test",
            "clusters": [{"name": "gpufleet-test", "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode(ca.encode()).decode()}}],
            "users": [{"name": user, "user": {"token": token or self._tokens[ADMIN]}}],
            "contexts": [{"name": "gpufleet-test", "context": {"cluster": "gpufleet-test", "user": user,
                                                               "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1))
        path.chmod(0o600)
        return path

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 24 * 3600) -> str:
        """A token of that ServiceAccount from the TokenRequest API, as the kubelet mounts one into a pod."""
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": seconds}}
        answer = self.admin.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
        return str(answer["status"]["token"])

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig that authenticates as system:serviceaccount:NAMESPACE:NAME."""
        return self.write_kubeconfig(path, token=self.service_account_token(namespace, name), user=name,
                                     namespace=namespace)

    def wait_for_service_account(self, namespace: str, name: str = "default", timeout_s: float = 30) -> None:
        """kube-controller-manager creates each namespace's `default` ServiceAccount; the ServiceAccount
        admission plugin refuses pods until it exists."""
        deadline = time.monotonic() + timeout_s
        while self.admin.get("serviceaccounts", name, namespace) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ServiceAccount {namespace}/{name} did not appear in {timeout_s:.0f} s")
            time.sleep(0.1)

    # --- the audit log

    def audit(self) -> list[AuditRecord]:
        """Every completed request recorded so far (none with `audit=False`)."""
        return list(self.iter_audit())

    def iter_audit(self, stages: tuple[str, ...] = ("ResponseComplete",)) -> Iterator[AuditRecord]:
        """The requests recorded so far, at the given stages: ResponseComplete by default, one
        record per request; a watch still open has only a ResponseStarted record."""
        path = self.logs / "audit.log"
        if not path.exists():
            return
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if event.get("stage") not in stages:
                    continue
                ref = event.get("objectRef") or {}
                yield AuditRecord(user=(event.get("user") or {}).get("username", ""), verb=event.get("verb", ""),
                                  api_group=ref.get("apiGroup", ""), resource=ref.get("resource", ""),
                                  subresource=ref.get("subresource", ""), namespace=ref.get("namespace", ""),
                                  name=ref.get("name", ""),
                                  code=int((event.get("responseStatus") or {}).get("code", 0)),
                                  uri=event.get("requestURI", ""), stage=event.get("stage", ""))

    # --- the components

    def _write_auth_files(self) -> None:
        d = self.workdir
        users = {ADMIN: "system:masters", "system:kube-controller-manager": "", "system:kube-scheduler": "",
                 "system:apiserver": "", "kwok": "system:masters", "karpenter": "system:masters"}
        lines = [f'{self._tokens[u]},{u},{u},"{group}"' for u, group in users.items()]
        (d / "tokens.csv").write_text("\n".join(lines) + "\n")
        (d / "tokens.csv").chmod(0o600)
        (d / "audit-policy.yaml").write_text(json.dumps({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "None", "users": list(CONTROL_PLANE_USERS)},
                      {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
                      {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version"]},
                      {"level": "Metadata"}]}))

    def _write_kubeconfigs(self) -> None:
        d = self.workdir
        self.write_kubeconfig(d / "kube-controller-manager.kubeconfig",
                              token=self._tokens["system:kube-controller-manager"], user="kube-controller-manager")
        self.write_kubeconfig(d / "kube-scheduler.kubeconfig", token=self._tokens["system:kube-scheduler"],
                              user="kube-scheduler")
        self.write_kubeconfig(d / "kwok.kubeconfig", token=self._tokens["kwok"], user="kwok")
        self.write_kubeconfig(d / "karpenter.kubeconfig", token=self._tokens["karpenter"], user="karpenter")
        self.write_kubeconfig(d / "admin.kubeconfig")

    def _start_etcd(self, path: Path) -> None:
        self.etcd_port, peer = _free_ports(2)
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        argv = [str(path), "--name", "gpufleet-test", "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"gpufleet-test={peer_url}", "--unsafe-no-fsync",
                "--quota-backend-bytes", str(8 * 1024**3), "--log-level", "warn"]
        process = self._add("etcd", argv)
        process.wait_until(self._etcd_ready, 30, "ready")

    def _etcd_ready(self) -> bool:
        r = httpx2.get(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2, trust_env=False)
        return r.status_code == 200 and json.loads(r.text).get("health") == "true"

    def _start_apiserver(self, path: Path) -> None:
        assert self.pki is not None
        d, pki = self.workdir, self.pki
        self.apiserver_port = self.options.apiserver_port or _free_ports(1)[0]
        argv = [str(path), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
                f"--client-ca-file={pki.ca_cert}", f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC", "--anonymous-auth=false",
                f"--service-account-issuer={self.url}", f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
                "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
                "--enable-priority-and-fairness=false", "--profiling=false", "--v=0",
                *self.options.extra_apiserver_args]
        if self.options.audit:
            argv += [f"--audit-policy-file={d / 'audit-policy.yaml'}", f"--audit-log-path={self.logs / 'audit.log'}",
                     "--audit-log-format=json", "--audit-log-maxsize=0"]
        process = self._add("kube-apiserver", argv)
        process.wait_until(self._apiserver_ready, 90, "ready")

    def _apiserver_ready(self) -> bool:
        r = httpx2.get(f"{self.url}/readyz", headers={"Authorization": f"Bearer {self._tokens[ADMIN]}"},
                       verify=ssl.create_default_context(cafile=str(self.ca_file)), timeout=2, trust_env=False)
        return r.status_code == 200

    def _start_controller_manager(self, path: Path) -> None:
        assert self.pki is not None
        kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        controllers = "*" if self.options.node_lifecycle else "*,-node-lifecycle-controller"
        argv = [str(path), f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
                f"--secure-port={_free_ports(1)[0]}", "--leader-elect=false",
                "--use-service-account-credentials=true", f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}", f"--controllers={controllers}",
                f"--node-monitor-grace-period={self.options.node_monitor_grace_period_s}s",
                "--node-monitor-period=2s", "--kube-api-qps=200", "--kube-api-burst=400", "--v=0"]
        process = self._add("kube-controller-manager", argv)
        # The service-account controller creates `default` in each namespace: its arrival shows that
        # the controllers run with their credentials.
        process.wait_until(lambda: self.admin.get("serviceaccounts", "default", "default") is not None, 60,
                           "running its controllers (no ServiceAccount default/default)")

    def _start_kwok(self, path: Path) -> None:
        self.kwok_port = _free_ports(1)[0]
        argv = [str(path), f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}", f"--config={STAGES}",
                "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address=127.0.0.1:{self.kwok_port}", "--cidr=10.128.0.0/9", "--node-ip=10.127.0.1"]
        if self.options.node_lifecycle:
            argv.append("--node-lease-duration-seconds=40")
        process = self._add("kwok", argv)
        process.wait_until(lambda: httpx2.get(f"http://127.0.0.1:{self.kwok_port}/healthz", timeout=2,
                                              trust_env=False).status_code == 200, 30, "healthy")

    def _add(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log", env=_clean_env()).start()
        self._processes[name] = process
        return process


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _clean_env() -> dict[str, str]:
    """The components reach only loopback: no proxy variables."""
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}

