"""`KubeNodeApi` (the node agent's API access) against the real control plane, as the
`gpufleet-agent` ServiceAccount of deploy/agent/rbac.yaml: what it reads, what it writes and
leaves alone, a real 409 when another writer changes the node between its read and its
write, real 401 and 403 replies; and, through `FaultProxy` in front of kube-apiserver, the
replies a real server gives only when it is in trouble (500, 503, 429 with Retry-After, a
reply that never comes), which the retrier must ride out.

The nodes are KWOK's, so KWOK (their kubelet) and kube-controller-manager write them too, as
in a real cluster. The retrier's backoff runs on virtual time; requests are real.
"""

from __future__ import annotations

import json
import logging
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import lightkube
import pytest
from lightkube.resources.core_v1 import Node

from gpufleet.agent.assignments import AssignmentBook
from gpufleet.agent.kube import NodeCondition, NodePatch
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.kube import config
from gpufleet.kube.errors import KubeError, PermanentError, TemporaryError
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.model import Taint, TaintEffect
from gpufleet.model import annotations as ann
from gpufleet.testing.clock import VirtualTime
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.cluster.faultproxy import Delay, FaultProxy, Reply, Rule
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION

from .cluster_kit import AGENT_SA, NAMESPACE, agent_kubeconfig, install_gpufleet, service_account_user, wait_for

AGENT_USER = service_account_user(AGENT_SA)
LOGGER = "gpufleet.kube.node_api"
POLICY = RetryPolicy(jitter=0.0)
"""The default policy without jitter, so tests can assert the exact backoff."""
TIMEOUT_S = 2.0
"""The client's request timeout: short enough for a held-back reply to time out soon, long
enough for a real reply on a busy machine."""
PREFIX = "unhealthy.gpufleet.io/"
FOREIGN_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
PODS = r"^/api/v1/pods$"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("node-api") / "cluster") as c:
        install_gpufleet(c)
        yield c


@pytest.fixture(scope="module")
def kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_kubeconfig(cluster, tmp_path_factory.mktemp("agent-sa") / "kubeconfig")


@pytest.fixture
def vtime() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = config.connect(config.from_kubeconfig(kubeconfig), timeout_s=TIMEOUT_S)
    yield c
    c.close()


@pytest.fixture
def proxied(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[FaultProxy, lightkube.Client]]:
    """A FaultProxy in front of kube-apiserver, and the agent's client that goes through it."""
    with FaultProxy.for_cluster(cluster, tmp_path / "proxy") as proxy:
        path = proxy.kubeconfig(tmp_path / "kubeconfig", cluster.service_account_token(NAMESPACE, AGENT_SA))
        c = config.connect(config.from_kubeconfig(path), timeout_s=TIMEOUT_S)
        try:
            yield proxy, c
        finally:
            c.close()


def make_api(client: lightkube.Client, node: str, vtime: VirtualTime, policy: RetryPolicy = POLICY, *,
             rng: random.Random | None = None, now: datetime | None = None) -> KubeNodeApi:
    retrier = Retrier(policy, logging.getLogger(LOGGER), sleep=vtime.sleep, clock=vtime.clock,
                      **({"rng": rng} if rng else {}))
    if now is None:
        return KubeNodeApi(client, node, retrier)
    times = iter([now])
    return KubeNodeApi(client, node, retrier, now=lambda: next(times))


def add_node(c: Cluster, name: str, *, labels: dict[str, str] | None = None, taints: list[Obj] | None = None,
             capacity: dict[str, str] | None = None, kwok: bool = True) -> Obj:
    """A KWOK node, returned once KWOK made it Ready and kube-controller-manager lifted the
    not-ready taint that kube-apiserver's admission puts on every new node. Without `kwok`, a
    node whose kubelet never starts the pods bound to it (they stay Pending, as during Allocate)."""
    c.admin.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                                 "annotations": {KWOK_ANNOTATION: "fake"} if kwok else {}},
                    "spec": {"taints": taints or []},
                    "status": {"capacity": capacity or {"cpu": "64", "pods": "110"}}})
    if not kwok:
        return _node(c, name)

    def settled() -> bool:
        node = c.admin.get("nodes", name) or {}
        return (_condition(node, "Ready") or {}).get("status") == "True" and \
            ((node.get("spec") or {}).get("taints") or []) == (taints or [])
    wait_for(settled, 60, f"node {name} Ready without the not-ready taint")
    return _node(c, name)


def _node(c: Cluster, name: str) -> Obj:
    node = c.admin.get("nodes", name)
    assert node is not None, f"node {name} is gone"
    return node


def _condition(node: Obj, kind: str = "GpuUnhealthy") -> Obj | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


def _pod(namespace: str, name: str, node: str, scheduler: str, annotations: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"nodeName": node, "schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]}}


def _patch(*, labels: dict[str, str | None] | None = None, status: str = "False", taints: tuple[Taint, ...] = (),
           capacity: dict[str, int | None] | None = None) -> NodePatch:
    condition = NodeCondition("GpuUnhealthy", status, "GpuFault" if status == "True" else "GpusHealthy", "details")
    return NodePatch(labels or {}, {"gpufleet.io/gpu-inventory": "[]"}, (condition,), PREFIX, taints, capacity or {})


def _requests(c: Cluster, node: str, user: str = AGENT_USER) -> list[tuple[str, str, int]]:
    """(verb, resource[/subresource], code) of each request `user` made about `node`, in order."""
    return [(r.verb, r.resource + (f"/{r.subresource}" if r.subresource else ""), r.code)
            for r in c.iter_audit() if r.user == user and r.resource == "nodes" and r.name == node]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# --- reads and writes ------------------------------------------------------------------------

def test_assignments_are_trusted_only_on_pods_gpufleet_bound_to_this_node(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    add_node(cluster, "trust-node", kwok=False)
    add_node(cluster, "trust-other", kwok=False)

    def assignment(node: str) -> dict[str, str]:
        return {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(ann.GpuAssignment(node, ("GPU-a",), 250))}
    cluster.admin.create_all([
        _pod("default", "placed-by-gpufleet", "trust-node", "gpufleet", assignment("trust-node")),
        _pod("default", "hand-written", "trust-node", "default-scheduler", assignment("trust-node")),
        _pod("default", "for-another-node", "trust-node", "gpufleet", assignment("trust-other")),
        _pod("default", "bound-elsewhere", "trust-other", "gpufleet", assignment("trust-other"))])
    book = AssignmentBook(AgentNodeApi(make_api(client, "trust-node", vtime)), "trust-node")
    assert [c.pod.name for c in book.candidates()] == ["placed-by-gpufleet"]


def test_node_labels_are_read(cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    add_node(cluster, "labels-node", labels={"nvidia.com/device-plugin.config": "mps"})
    assert make_api(client, "labels-node", vtime).node_labels() == {
        "kubernetes.io/hostname": "labels-node", "nvidia.com/device-plugin.config": "mps"}


def test_a_patch_writes_the_agents_part_and_keeps_everything_else(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    name = "patch-node"
    before = add_node(cluster, name, labels={"nvidia.com/gpu.count": "4", "nvidia.com/gpu.stale": "x"},
                      taints=[FOREIGN_TAINT, {"key": PREFIX + "GPU-old", "value": "xid-79", "effect": "NoSchedule"}])
    bad = Taint(PREFIX + "GPU-a", "xid-48", TaintEffect.PREFER_NO_SCHEDULE)
    make_api(client, name, vtime).patch_node(_patch(labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.stale": None},
                                                    status="True", taints=(bad,),
                                                    capacity={"gpufleet.io/gpu-memory": 81920}))
    node = _node(cluster, name)
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": name, "nvidia.com/gpu.count": "8"}
    # kube-controller-manager's TTL controller annotates every node too
    assert {k: v for k, v in node["metadata"]["annotations"].items() if k != "node.alpha.kubernetes.io/ttl"} == \
        {KWOK_ANNOTATION: "fake", "gpufleet.io/gpu-inventory": "[]"}
    assert node["spec"]["taints"] == [FOREIGN_TAINT, {"key": PREFIX + "GPU-a", "value": "xid-48",
                                                      "effect": "PreferNoSchedule"}]
    kubelet = {c["type"]: c for c in before["status"]["conditions"]}
    after = {c["type"]: c for c in node["status"]["conditions"]}
    assert {t: c["status"] for t, c in after.items() if t != "GpuUnhealthy"} == \
        {t: c["status"] for t, c in kubelet.items()} and after["Ready"]["status"] == "True"
    assert (after["GpuUnhealthy"]["status"], after["GpuUnhealthy"]["reason"]) == ("True", "GpuFault")
    assert node["status"]["capacity"] == {**before["status"]["capacity"], "gpufleet.io/gpu-memory": "81920"}
    # the server records the agent as the manager of what it wrote (FIELD_MANAGER)
    managers = {(m["manager"], m.get("subresource", "")) for m in node["metadata"]["managedFields"]}
    assert {("gpufleet-agent", ""), ("gpufleet-agent", "status")} <= managers
    assert [code for _, _, code in _requests(cluster, name)] == [200, 200, 200]


def test_a_recovered_device_loses_its_taint_and_capacity_can_be_removed(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    name = "recover-node"
    add_node(cluster, name, taints=[FOREIGN_TAINT, {"key": PREFIX + "GPU-a", "value": "xid-48", "effect": "NoSchedule"}],
             capacity={"cpu": "64", "gpufleet.io/gpu-memory": "81920"})
    make_api(client, name, vtime).patch_node(_patch(capacity={"gpufleet.io/gpu-memory": None}))
    node = _node(cluster, name)
    assert node["spec"]["taints"] == [FOREIGN_TAINT]
    assert "gpufleet.io/gpu-memory" not in node["status"]["capacity"] and node["status"]["capacity"]["cpu"] == "64"


def test_a_conditions_transition_time_moves_only_when_its_status_changes(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    name = "transition-node"
    add_node(cluster, name)

    def write(status: str, hour: int) -> Obj:
        make_api(client, name, vtime, now=datetime(2026, 1, 1, hour, tzinfo=timezone.utc)).patch_node(
            _patch(status=status))
        condition = _condition(_node(cluster, name))
        assert condition is not None
        return condition
    write("False", 1)
    again = write("False", 2)
    assert (again["lastTransitionTime"], again["lastHeartbeatTime"]) == ("2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z")
    assert write("True", 3)["lastTransitionTime"] == "2026-01-01T03:00:00Z"


def _race(cluster: Cluster, client: lightkube.Client, monkeypatch: pytest.MonkeyPatch, change: Obj) -> None:
    """Right after the agent's next read of a node, another writer (the admin) merge-patches it."""
    read = client.get
    pending = [change]

    def get_then_race(*args: Any, **kwargs: Any) -> Any:
        obj = read(*args, **kwargs)
        if pending and args and args[0] is Node:
            cluster.admin.patch("nodes", args[1], pending.pop())
        return obj
    monkeypatch.setattr(client, "get", get_then_race)


def test_a_write_conflict_reads_the_node_again_and_keeps_a_taint_added_meanwhile(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "conflict-node"
    add_node(cluster, name, taints=[FOREIGN_TAINT])
    # Between the agent's read and its write another controller taints the node: the agent's
    # write carries the resourceVersion it read, kube-apiserver answers 409, and the agent
    # reads again and redoes both bodies.
    _race(cluster, client, monkeypatch, {"spec": {"taints": [FOREIGN_TAINT, {"key": "added-meanwhile",
                                                                            "effect": "NoExecute"}]}})
    make_api(client, name, vtime).patch_node(_patch(taints=(Taint(PREFIX + "GPU-a", "xid-48"),)))
    assert [t["key"] for t in _node(cluster, name)["spec"]["taints"]] == ["dedicated", "added-meanwhile",
                                                                          PREFIX + "GPU-a"]
    assert _requests(cluster, name) == [("get", "nodes", 200), ("patch", "nodes", 409), ("get", "nodes", 200),
                                        ("patch", "nodes", 200), ("patch", "nodes/status", 200)]
    assert vtime.sleeps == [0.25]


def test_unchanged_taints_are_not_sent_so_a_concurrent_write_is_no_conflict(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "no-conflict-node"
    add_node(cluster, name, taints=[FOREIGN_TAINT])
    # Without taints to write, the merge patch carries no resourceVersion: another writer's
    # change between the read and the write is merged with it, not refused.
    _race(cluster, client, monkeypatch, {"metadata": {"labels": {"added-meanwhile": "yes"}}})
    make_api(client, name, vtime).patch_node(_patch(labels={"nvidia.com/gpu.count": "8"}))
    node = _node(cluster, name)
    assert node["metadata"]["labels"]["added-meanwhile"] == "yes" and node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert node["spec"]["taints"] == [FOREIGN_TAINT]
    assert _requests(cluster, name) == [("get", "nodes", 200), ("patch", "nodes", 200), ("patch", "nodes/status", 200)]
    assert vtime.sleeps == []


# --- what the real server refuses --------------------------------------------------------------

def _account_without_pod_reads(c: Cluster, path: Path) -> Path:
    """The agent's ClusterRole less its one pod rule, on a ServiceAccount of its own."""
    name = "agent-without-pods"
    role = c.admin.get("clusterroles", "gpufleet-agent")
    assert role is not None
    rules = [r for r in role["rules"] if "pods" not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1
    c.admin.create_all([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]}])
    return c.service_account_kubeconfig(NAMESPACE, name, path)


def test_a_403_is_permanent_not_retried_and_says_which_permission_is_missing(
        cluster: Cluster, vtime: VirtualTime, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _account_without_pod_reads(cluster, tmp_path / "kubeconfig")
    user = service_account_user("agent-without-pods")
    with config.connect(config.from_kubeconfig(path), timeout_s=TIMEOUT_S) as client:
        api = make_api(client, "rbac-node", vtime)
        with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(PermanentError) as caught:
            api.pods_on_node()
    denied = f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" at the cluster scope'
    assert str(caught.value) == ("list pods on node rbac-node: 403 Forbidden: " + denied +
                                 " (the agent's service account needs list on pods, get and patch on nodes, "
                                 "patch on nodes/status and create on events.k8s.io events (deploy/agent/rbac.yaml))")
    assert caught.value.kind == "HTTP 403" and vtime.sleeps == [] and len(_warnings(caplog)) == 1
    lists = [r.code for r in cluster.iter_audit() if r.user == user and r.resource == "pods"]
    assert lists == [403], "sent once"


@pytest.mark.parametrize("token", [None, "not-a-token-the-server-knows"], ids=["no credentials", "an unknown token"])
def test_a_401_is_permanent_and_points_at_the_credentials(
        cluster: Cluster, vtime: VirtualTime, tmp_path: Path, token: str | None) -> None:
    path = cluster.write_kubeconfig(tmp_path / "kubeconfig", token=token or "unused")
    if token is None:  # a context without a user: kubectl and gpufleet send no credentials at all
        kubeconfig = json.loads(path.read_text())
        kubeconfig["users"] = []
        del kubeconfig["contexts"][0]["context"]["user"]
        path.write_text(json.dumps(kubeconfig))
    with config.connect(config.from_kubeconfig(path), timeout_s=TIMEOUT_S) as client:
        with pytest.raises(PermanentError) as caught:
            make_api(client, "any-node", vtime).node_labels()
    assert str(caught.value) == ("get node any-node: 401 Unauthorized: Unauthorized "
                                 "(check the kubeconfig's credentials or the token)")
    assert vtime.sleeps == []


def test_a_node_that_does_not_exist_is_a_404(client: lightkube.Client, vtime: VirtualTime) -> None:
    with pytest.raises(PermanentError, match='^get node no-such-node: 404 NotFound: nodes "no-such-node" not found$'):
        make_api(client, "no-such-node", vtime).node_labels()
    assert vtime.sleeps == []


def test_a_label_the_server_finds_invalid_is_a_422_not_retried(
        cluster: Cluster, client: lightkube.Client, vtime: VirtualTime) -> None:
    name = "invalid-node"
    add_node(cluster, name)
    with pytest.raises(PermanentError) as caught:
        make_api(client, name, vtime).patch_node(_patch(labels={"nvidia.com/gpu.product": "NVIDIA H100 80GB"}))
    assert caught.value.kind == "HTTP 422" and "metadata.labels: Invalid value: \"NVIDIA H100 80GB\"" in str(caught.value)
    assert _requests(cluster, name) == [("get", "nodes", 200), ("patch", "nodes", 422)] and vtime.sleeps == []


# --- faults a real server gives only in trouble, injected by FaultProxy ------------------------

STATUSES = [(409, TemporaryError), (410, TemporaryError), (429, TemporaryError), (500, TemporaryError),
            (503, TemporaryError), (400, PermanentError), (404, PermanentError)]


@pytest.mark.parametrize("code, kind", STATUSES, ids=[f"{c} is {k.__name__}" for c, k in STATUSES])
def test_a_status_code_becomes_an_error_whose_type_says_whether_to_retry(
        proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime, code: int, kind: type[KubeError]) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(code)))
    with pytest.raises(KubeError) as caught:
        make_api(client, "fault-node", vtime, RetryPolicy(attempts=1)).pods_on_node()
    assert type(caught.value) is kind and caught.value.kind == f"HTTP {code}"
    assert str(caught.value).startswith(f"list pods on node fault-node: {code} ")
    assert isinstance(caught.value.__cause__, lightkube.ApiError), "the library's exception is chained"


def test_a_500_then_success_is_retried_and_logged_once(
        cluster: Cluster, proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime,
        caplog: pytest.LogCaptureFixture) -> None:
    proxy, client = proxied
    add_node(cluster, "retry-node")
    cluster.admin.create(_pod("default", "retried", "retry-node", "gpufleet"))
    proxy.inject(Rule("GET", PODS, Reply(500)))
    api = make_api(client, "retry-node", vtime)
    with caplog.at_level(logging.INFO, LOGGER):
        assert [p.name for p in api.pods_on_node()] == ["retried"]
        assert proxy.injected_count(Reply(500)) == 1 and vtime.sleeps == [0.25]
        assert "works again" not in caplog.text, "a success right after a failure does not end the episode"
        vtime.now += POLICY.episode_quiet_s
        assert [p.name for p in api.pods_on_node()] == ["retried"]
    assert _warnings(caplog) == ["list pods on node retry-node: 500 InternalError: InternalError: injected by "
                                 "faultproxy; retrying with backoff"]
    assert caplog.records[-1].getMessage() == "list pods on node retry-node: works again"


def test_an_outage_is_logged_once_not_once_per_pod(
        proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(503), times=12))
    api = make_api(client, "outage-node", vtime)
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(3):  # three pods' Allocate calls during the outage
            with pytest.raises(TemporaryError):
                api.pods_on_node()
    assert proxy.injected_count(Reply(503)) == 12, "reads are not cooled down: each call really tries"
    assert len(_warnings(caplog)) == 1


def test_a_429_waits_as_long_as_the_server_asks(
        proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(429, retry_after_s=2)))
    assert make_api(client, "throttled-node", vtime).pods_on_node() == []
    assert vtime.sleeps == [2.0]


def test_retries_are_bounded_in_attempts(proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(500), times=10))
    with pytest.raises(TemporaryError):
        make_api(client, "bounded-node", vtime).pods_on_node()
    assert proxy.injected_count(Reply(500)) == POLICY.attempts == 4 and vtime.sleeps == [0.25, 0.5, 1.0]


def test_retries_are_bounded_in_time(proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(500), times=10))
    with pytest.raises(TemporaryError):
        make_api(client, "budget-node", vtime, RetryPolicy(budget_s=0.7, jitter=0.0)).pods_on_node()
    assert vtime.sleeps == [0.25], "a second wait of 0.5 s would start a try 0.75 s after the first"


def test_backoff_is_jittered_so_that_nodes_do_not_retry_in_step(
        proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Reply(500), times=10))
    with pytest.raises(TemporaryError):
        make_api(client, "jitter-node", vtime, RetryPolicy(jitter=0.2), rng=random.Random(7)).pods_on_node()
    nominal = [0.25, 0.5, 1.0]
    assert vtime.sleeps != nominal
    assert all(0.8 * n <= s <= 1.2 * n for s, n in zip(vtime.sleeps, nominal, strict=True))


def test_a_timeout_is_retried(proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime,
                              caplog: pytest.LogCaptureFixture) -> None:
    proxy, client = proxied
    proxy.inject(Rule("GET", PODS, Delay(2 * TIMEOUT_S)))
    with caplog.at_level(logging.WARNING, LOGGER):
        assert make_api(client, "slow-node", vtime).pods_on_node() == []
    assert _warnings(caplog) == ["list pods on node slow-node: ReadTimeout: The read operation timed out; "
                                 "retrying with backoff"]


def test_a_failed_node_write_is_not_sent_again_until_its_cool_down_has_passed(
        cluster: Cluster, proxied: tuple[FaultProxy, lightkube.Client], vtime: VirtualTime,
        caplog: pytest.LogCaptureFixture) -> None:
    proxy, client = proxied
    name = "cooldown-node"
    add_node(cluster, name)
    proxy.inject(Rule("GET", rf"^/api/v1/nodes/{name}$", Reply(500), times=8))
    api = make_api(client, name, vtime)
    patch = NodePatch(labels={"a": "b"})
    with caplog.at_level(logging.WARNING, LOGGER):
        with pytest.raises(TemporaryError):
            api.patch_node(patch)
        assert proxy.injected_count(Reply(500)) == 4
        with pytest.raises(TemporaryError, match=r"\(not sent again for 4.0 s\)$"):
            api.patch_node(patch)  # the agent asks again 0.25 s later
        assert proxy.injected_count(Reply(500)) == 4, "nothing was sent during the cool-down"
        vtime.now += 4.0
        with pytest.raises(TemporaryError):
            api.patch_node(patch)
        vtime.now += 4.0
        with pytest.raises(TemporaryError, match=r"not sent again for 8.0 s"):
            api.patch_node(patch)  # the cool-down doubled
        vtime.now += 4.0
        api.patch_node(patch)
    assert _node(cluster, name)["metadata"]["labels"]["a"] == "b"
    assert len(_warnings(caplog)) == 1
    assert _requests(cluster, name) == [("get", "nodes", 200), ("patch", "nodes", 200)], \
        "the server saw only the write that got through"
