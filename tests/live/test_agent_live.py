"""The node agent on the real control plane, as the `gpufleet-agent` ServiceAccount of
`deploy/agent/rbac.yaml`: its node writes (labels, the inventory annotation, the GpuUnhealthy
condition, its taints, extended-resource capacity) and its pod reads, in process and as the
`gpufleet agent run` process.

The nodes are KWOK's: KWOK plays their kubelet (Ready condition, lease), and
kube-controller-manager's node-lifecycle controller and kube-apiserver's admission plugins act
on them as on any node, so the agent's patches meet the writes of the other owners of a node.
Every request the agent makes is checked against the audit log: all allowed by RBAC.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.agent import configsource, fake, mig_layout, report
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.cli.main import main
from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier, RetryPolicy
from gpufleet.model import annotations as ann
from gpufleet.testing.clock import VirtualTime
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION

from .cluster_kit import (AGENT_SA, NAMESPACE, Obj, agent_kubeconfig, clean_env, install_gpufleet,
                          service_account_user, wait_for)

AGENT_USER = service_account_user(AGENT_SA)
FOREIGN_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
FRACTIONS = "gpufleet: {fractions: true, metricsPort: 0}\n"
"""A config that also writes node capacity (gpufleet.io/gpu-memory) through nodes/status."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("agent") / "cluster") as c:
        install_gpufleet(c)
        yield c


@pytest.fixture(scope="module")
def kubeconfig(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_kubeconfig(cluster, tmp_path_factory.mktemp("agent-sa") / "kubeconfig")


def add_node(c: Cluster, name: str, *, taints: list[Obj] | None = None) -> Obj:
    """A node KWOK plays the kubelet of, without GPU labels: what a GPU node looks like before its
    agent first runs. Returned once it is Ready and the node-lifecycle controller has lifted the
    not-ready taint that kube-apiserver's TaintNodesByCondition admission puts on every new node."""
    c.admin.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                                 "annotations": {KWOK_ANNOTATION: "fake"}},
                    "spec": {"taints": taints or []}})

    def settled() -> bool:
        node = c.admin.get("nodes", name) or {}
        return _ready(node) == "True" and ((node.get("spec") or {}).get("taints") or []) == (taints or [])
    wait_for(settled, 60, f"node {name} Ready without the not-ready taint")
    node = c.admin.get("nodes", name)
    assert node is not None
    return node


def _ready(node: Obj) -> str:
    return next((c["status"] for c in (node.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), "")


def _condition(node: Obj, kind: str = "GpuUnhealthy") -> Obj:
    return next(c for c in node["status"]["conditions"] if c["type"] == kind)


def _node(c: Cluster, name: str) -> Obj:
    node = c.admin.get("nodes", name)
    assert node is not None, f"node {name} is gone"
    return node


@contextmanager
def node_api(kubeconfig: Path, node: str, vtime: VirtualTime | None = None) -> Iterator[AgentNodeApi]:
    """The agent's API access as `gpufleet agent run` wires it, with the retrier on `vtime` if given."""
    client = config.connect(config.from_kubeconfig(kubeconfig), timeout_s=5.0)
    retrier = None
    if vtime is not None:
        retrier = Retrier(RetryPolicy(jitter=0.0), logging.getLogger("gpufleet.kube.node_api"), sleep=vtime.sleep,
                          clock=vtime.clock)
    try:
        yield AgentNodeApi(KubeNodeApi(client, node, retrier))
    finally:
        client.close()


def agent_requests(c: Cluster, node: str) -> list[tuple[str, str, str, int]]:
    """(verb, resource[/subresource], name, code) of each request the agent made about `node`."""
    return [(r.verb, r.resource + (f"/{r.subresource}" if r.subresource else ""), r.name, r.code)
            for r in c.iter_audit() if r.user == AGENT_USER and r.name == node]


def test_the_agent_labels_its_node_and_reports_an_xid_as_condition_and_taint(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path, tmp_path: Path) -> None:
    name = "xid-node"
    kubelet_conditions = add_node(cluster, name, taints=[FOREIGN_TAINT])["status"]["conditions"]
    (tmp_path / "config.yaml").write_text(FRACTIONS)
    backend = fake.load_fixture("h100-sxm-8")
    with node_api(kubeconfig, name) as api:
        agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml", None, api.node_labels),
                      AgentOptions(name, sock_dir, metrics_port=0, health_poll_s=0.05))
        agent.start()
        try:
            node = _node(cluster, name)  # start() writes the node before it returns
            gpus = agent.inventory.gpus
            labels = node["metadata"]["labels"]
            assert labels["nvidia.com/gpu.product"] == gpus[0].product == "NVIDIA-H100-80GB-HBM3"
            assert labels["nvidia.com/gpu.count"] == str(len(gpus)) == "8"
            assert labels["kubernetes.io/hostname"] == name
            inventory = ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
            assert [g.uuid for g in inventory] == [g.uuid for g in gpus] and all(g.healthy for g in inventory)
            assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"  # merged, not replaced
            assert node["status"]["capacity"][ann.GPU_MEMORY_RESOURCE] == str(sum(g.mem_mib for g in gpus))
            assert _condition(node)["status"] == "False" and node["spec"]["taints"] == [FOREIGN_TAINT]

            bad = gpus[0].uuid
            backend.inject_xid(bad, 79)  # fallen off the bus
            wait_for(lambda: _condition(_node(cluster, name))["status"] == "True", 15, "the GpuUnhealthy condition")
            node = _node(cluster, name)
            assert bad in _condition(node)["message"] and "xid-79" in _condition(node)["message"]
            assert node["spec"]["taints"] == [FOREIGN_TAINT, {"key": f"unhealthy.gpufleet.io/{bad}", "value": "xid-79",
                                                              "effect": "PreferNoSchedule"}]
            # the kubelet's conditions (KWOK's) are all still there, as they were, beside the agent's two
            ours = (report.CONDITION_TYPE, report.MPS_CONDITION_TYPE)
            kept = {c["type"]: c["status"] for c in node["status"]["conditions"] if c["type"] not in ours}
            assert kept == {c["type"]: c["status"] for c in kubelet_conditions} and kept["Ready"] == "True"
            mps = {c["type"]: c for c in node["status"]["conditions"]}[report.MPS_CONDITION_TYPE]
            assert (mps["status"], mps["reason"]) == ("False", "MpsNotManaged")  # no sharing.mps in FRACTIONS
            unhealthy = [g.uuid for g in ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])
                         if not g.healthy]
            assert unhealthy == [bad]
        finally:
            agent.stop()
    requests = agent_requests(cluster, name)
    assert {(verb, resource) for verb, resource, _, _ in requests} == {
        ("get", "nodes"), ("patch", "nodes"), ("patch", "nodes/status")}
    assert [r for r in requests if r[3] >= 400] == [], "RBAC allowed every request"


def test_the_running_agent_publishes_its_dra_pool_and_taints_a_failed_gpu_in_a_new_generation(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path, tmp_path: Path) -> None:
    name = "dra-agent-node"
    add_node(cluster, name)
    (tmp_path / "config.yaml").write_text("gpufleet: {metricsPort: 0, dra: {publish: true}}\n")
    backend = fake.load_fixture("h100-sxm-8")

    def pool() -> list[Obj]:
        return [o for o in cluster.admin.list("resourceslices") if o["spec"]["nodeName"] == name]

    with node_api(kubeconfig, name) as api:
        agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml", None, api.node_labels),
                      AgentOptions(name, sock_dir, metrics_port=0, health_poll_s=0.05))
        agent.start()
        try:
            (published,) = pool()  # start() publishes before it returns
            assert published["spec"]["driver"] == "gpu.gpufleet.io" and published["spec"]["pool"]["generation"] == 1
            assert [d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]] == \
                [g.uuid for g in agent.inventory.gpus]
            bad = agent.inventory.gpus[3].uuid
            backend.inject_xid(bad, 79)
            wait_for(lambda: pool()[0]["spec"]["pool"]["generation"] == 2, 15, "the fault in a new generation")
            (tainted,) = pool()
            assert [d["name"] for d in tainted["spec"]["devices"] if d.get("taints")] == ["gpu-3"]
        finally:
            agent.stop()


def test_the_agent_applies_the_mig_layout_annotated_on_its_node_and_reports_the_outcome(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path, tmp_path: Path) -> None:
    """The layout is written by the admin here, standing in for the scheduler, which does not write it yet."""
    name = "mig-layout-node"
    add_node(cluster, name)
    (tmp_path / "config.yaml").write_text("flags: {migStrategy: mixed}\ngpufleet: {metricsPort: 0}\n")
    backend = fake.load_fixture("a100-mig")
    target = backend.devices()[1].uuid  # seven 1g.5gb
    with node_api(kubeconfig, name) as api:
        agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml", None, api.node_labels),
                      AgentOptions(name, sock_dir, metrics_port=0, config_poll_s=0.1))
        agent.start()
        try:
            def annotations() -> dict[str, str]:
                return dict(_node(cluster, name)["metadata"]["annotations"])

            layout = json.dumps({"generation": 2, "gpus": {target: ["3g.20gb@0", "3g.20gb@4"]}})
            cluster.admin.patch("nodes", name, {"metadata": {"annotations": {mig_layout.LAYOUT_ANNOTATION: layout}}})
            wait_for(lambda: mig_layout.STATE_ANNOTATION in annotations(), 15, "the layout's state on the node")
            assert json.loads(annotations()[mig_layout.STATE_ANNOTATION]) == {"generation": 2, "state": "success"}
            gpus = {g.uuid: g for g in ann.decode_inventory(annotations()[ann.INVENTORY_ANNOTATION])}
            assert gpus[target].mig == ("3g.20gb", "3g.20gb")

            bad = json.dumps({"generation": 3, "gpus": {target: ["4g.20gb@4"]}})
            cluster.admin.patch("nodes", name, {"metadata": {"annotations": {mig_layout.LAYOUT_ANNOTATION: bad}}})
            wait_for(lambda: '"generation":3' in annotations()[mig_layout.STATE_ANNOTATION], 15, "generation 3's state")
            state = json.loads(annotations()[mig_layout.STATE_ANNOTATION])
            assert state["state"] == "failed" and "4g.20gb may start at memory slice 0, not 4" in state["message"]
            assert {g.uuid: g for g in ann.decode_inventory(annotations()[ann.INVENTORY_ANNOTATION])}[target].mig == \
                ("3g.20gb", "3g.20gb")
        finally:
            agent.stop()
    assert [r for r in agent_requests(cluster, name) if r[3] >= 400] == [], "RBAC allowed every request"


def test_the_agent_reads_the_pods_bound_to_its_node_in_every_namespace(cluster: Cluster, kubeconfig: Path) -> None:
    add_node(cluster, "pods-node")
    add_node(cluster, "pods-elsewhere")
    cluster.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    cluster.wait_for_service_account("team-a")
    # what the scheduler's Binding leaves on the pod
    assignment = ann.encode_assignment(ann.GpuAssignment("pods-node", ("GPU-0",), 1000))
    for namespace, pod, node in (("default", "p1", "pods-node"), ("team-a", "p2", "pods-node"),
                                 ("default", "p3", "pods-elsewhere")):
        cluster.admin.create({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": pod, "namespace": namespace,
                                           "annotations": {ann.ASSIGNMENT_ANNOTATION: assignment}},
                              "spec": {"nodeName": node, "schedulerName": "gpufleet",
                                       "containers": [{"name": "c", "image": "x"}]}})
    with node_api(kubeconfig, "pods-node") as api:
        wait_for(lambda: {p.phase for p in api.pods_on_node()} == {"Running"}, 30, "KWOK running both pods")
        pods = sorted(api.pods_on_node(), key=lambda p: p.name)
    assert [(p.namespace, p.name, p.node_name, p.scheduler_name) for p in pods] == [
        ("default", "p1", "pods-node", "gpufleet"), ("team-a", "p2", "pods-node", "gpufleet")]
    assert all(p.annotations[ann.ASSIGNMENT_ANNOTATION] == assignment and p.uid and p.created for p in pods)
    reads = [r for r in cluster.iter_audit() if r.user == AGENT_USER and r.resource == "pods"]
    assert reads and {(r.verb, r.namespace, r.code) for r in reads} == {("list", "", 200)}


def test_a_node_write_failing_during_an_outage_is_logged_once_and_written_when_the_server_is_back(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    name = "outage-node"
    add_node(cluster, name)
    (tmp_path / "config.yaml").write_text("")
    keys = tmp_path / "keys"  # as deploy/ runs it: with assignment keys (without, the agent warns once at start)
    keys.mkdir()
    (keys / "k1").write_text("k" * 64)
    backend = fake.load_fixture("h100-sxm-8")
    vtime = VirtualTime()
    apiserver = cluster.component("kube-apiserver")
    with node_api(kubeconfig, name, vtime) as api, caplog.at_level(logging.INFO):
        agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "config.yaml"),
                      AgentOptions(name, sock_dir, metrics_port=0, health_poll_s=0.05, assignment_keys=keys))
        apiserver.stop()
        try:
            try:
                agent.start()  # writes the node once (and fails); the writer then asks again every 0.25 s
                assert vtime.sleeps == [0.25, 0.5, 1.0], "four tries in one call: three backoffs"
                time.sleep(1.0)  # four more asks of the writer
                assert vtime.sleeps == [0.25, 0.5, 1.0], "the cool-down held every later write back"
                assert warnings(caplog) == ["gpufleet.kube.node_api", "gpufleet.agent.runtime"]
                first = next(r for r in caplog.records if r.levelno >= logging.WARNING).getMessage()
                assert first.startswith("patch node outage-node: ConnectError"), first
            finally:
                cluster.restart("kube-apiserver")  # started again, and ready
            vtime.now += 60  # the cool-down is over
            wait_for(lambda: "nvidia.com/gpu.count" in _node(cluster, name)["metadata"]["labels"], 15,
                     "the node written once the server is back")
        finally:
            agent.stop()
    assert warnings(caplog) == ["gpufleet.kube.node_api", "gpufleet.agent.runtime"], "the outage was logged once"
    assert "patch node outage-node: works again" in [r.getMessage() for r in caplog.records]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.name for r in caplog.records if r.levelno >= logging.WARNING]


def _run_agent(kubeconfig: Path, sock_dir: Path, node: str, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "gpufleet.cli.main", "agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir",
           str(sock_dir), "--node-name", node, "--metrics-port", "0", "--kubeconfig", str(kubeconfig), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())


def test_agent_run_with_a_kubeconfig_writes_the_node_and_stops_on_sigterm(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path) -> None:
    name = "process-node"
    add_node(cluster, name)
    proc = _run_agent(kubeconfig, sock_dir, name)
    try:
        # labels and the GpuUnhealthy condition are two writes (metadata, then status)
        wait_for(lambda: ("nvidia.com/gpu.count" in _node(cluster, name)["metadata"]["labels"] and any(
            c["type"] == "GpuUnhealthy" for c in _node(cluster, name)["status"].get("conditions", [])))
                 or proc.poll() is not None, 30, "the node's labels and GpuUnhealthy condition")
        node = _node(cluster, name)
        assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
        assert len(ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])) == 8
        assert _condition(node)["status"] == "False"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert f"serving nvidia.com/gpu for node {name}" in err
    assert [r for r in agent_requests(cluster, name) if r[3] >= 400] == []


def _unbound_account(c: Cluster, path: Path) -> Path:
    """A ServiceAccount without deploy/'s RBAC (the agent's DaemonSet with a wrong serviceAccountName)."""
    if c.admin.get("serviceaccounts", "no-rbac", NAMESPACE) is None:
        c.admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "no-rbac", "namespace": NAMESPACE}})
    return c.service_account_kubeconfig(NAMESPACE, "no-rbac", path)


@pytest.mark.parametrize("account, argv, message", [
    ("no-rbac", [], 'get node mistakes-node: 403 Forbidden: nodes "mistakes-node" is forbidden: User '
                    f'"{service_account_user("no-rbac")}" cannot get resource "nodes" in API group "" at the cluster '
                    "scope (the agent's service account needs"),
    ("agent", ["--node-name", "n9"], 'get node n9: 404 NotFound: nodes "n9" not found'),
    ("agent", ["--state-file", "node.json"], "--kubeconfig reads and writes the node through the API; "
                                              "--state-file is for running without it"),
], ids=["missing RBAC", "a node name the cluster does not know", "an offline option with a kubeconfig"])
def test_run_mistakes_with_a_kubeconfig_are_one_line_errors(
        cluster: Cluster, kubeconfig: Path, sock_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        account: str, argv: list[str], message: str) -> None:
    if cluster.admin.get("nodes", "mistakes-node") is None:
        add_node(cluster, "mistakes-node")
    used = _unbound_account(cluster, tmp_path / "kubeconfig") if account == "no-rbac" else kubeconfig
    code = main(["agent", "run", "--fake", "h100-sxm-8", "--kubelet-dir", str(sock_dir), "--node-name",
                 "mistakes-node", "--metrics-port", "0", "--kubeconfig", str(used), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not list(sock_dir.iterdir()), "nothing was served"
    assert "nvidia.com/gpu.count" not in _node(cluster, "mistakes-node")["metadata"]["labels"], "nor written"

