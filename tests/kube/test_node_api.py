"""KubeNodeApi against the fake API server: what it reads, and what it writes and leaves alone."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import lightkube

from gpufleet.agent.assignments import AssignmentBook
from gpufleet.agent.kube import NodeCondition, NodePatch
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier
from gpufleet.model import Taint, TaintEffect
from gpufleet.model import annotations as ann

from .apiserver import FakeApiServer
from .conftest import NODE, POLICY, VirtualTime

PREFIX = "unhealthy.gpufleet.io/"
FOREIGN_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}


def _assignment(node: str = NODE) -> dict[str, str]:
    return {ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(ann.GpuAssignment(node, ("GPU-a",), 250))}


def test_pods_on_node_lists_this_nodes_pods_in_every_namespace(server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_pod("team-a", "train", NODE, "gpufleet", {"note": "x"}, phase="Running")
    server.add_pod("team-b", "infer", NODE)
    server.add_pod("team-a", "elsewhere", "n2", "gpufleet")
    pods = {p.name: p for p in api.pods_on_node()}
    assert set(pods) == {"train", "infer"}
    train = pods["train"]
    assert (train.namespace, train.uid, train.node_name, train.scheduler_name, train.phase, train.created) == \
        ("team-a", "uid-team-a-train", NODE, "gpufleet", "Running", "2025-01-01T00:00:00Z")
    assert dict(train.annotations) == {"note": "x"}
    assert server.requests[-1].query["fieldSelector"] == [f"spec.nodeName={NODE}"]


def test_assignments_are_trusted_only_on_pods_gpufleet_bound_to_this_node(
        server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_pod("ns", "placed-by-gpufleet", NODE, "gpufleet", _assignment())
    server.add_pod("ns", "hand-written", NODE, "default-scheduler", _assignment())
    server.add_pod("ns", "for-another-node", NODE, "gpufleet", _assignment("n2"))
    server.add_pod("ns", "bound-elsewhere", "n2", "gpufleet", _assignment("n2"))
    book = AssignmentBook(AgentNodeApi(api), NODE)
    assert [c.pod.name for c in book.candidates()] == ["placed-by-gpufleet"]


def test_node_labels_are_read(server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_node(NODE, labels={"nvidia.com/device-plugin.config": "mps"})
    assert api.node_labels() == {"nvidia.com/device-plugin.config": "mps"}


def _patch(*, labels: dict[str, str | None] | None = None, status: str = "False",
           taints: tuple[Taint, ...] = (), capacity: dict[str, int | None] | None = None) -> NodePatch:
    condition = NodeCondition("GpuUnhealthy", status, "GpuFault" if status == "True" else "GpusHealthy", "details")
    return NodePatch(labels or {}, {"gpufleet.io/gpu-inventory": "[]"}, (condition,), PREFIX, taints,
                     capacity or {})


def test_a_patch_writes_the_agents_part_and_keeps_everything_else(server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_node(NODE, labels={"kubernetes.io/hostname": NODE, "nvidia.com/gpu.count": "4"},
                    taints=[FOREIGN_TAINT, {"key": PREFIX + "GPU-old", "value": "xid-79", "effect": "NoSchedule"}],
                    conditions=[READY])
    bad = Taint(PREFIX + "GPU-a", "xid-48", TaintEffect.PREFER_NO_SCHEDULE)
    api.patch_node(_patch(labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.stale": None}, status="True",
                          taints=(bad,), capacity={"gpufleet.io/gpu-memory": 81920}))
    node = server.node(NODE)
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.count": "8"}
    assert node["metadata"]["annotations"] == {"gpufleet.io/gpu-inventory": "[]"}
    assert node["spec"]["taints"] == [FOREIGN_TAINT, {"key": PREFIX + "GPU-a", "value": "xid-48",
                                                      "effect": "PreferNoSchedule"}]
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert conditions["Ready"] == READY
    assert conditions["GpuUnhealthy"]["status"] == "True" and conditions["GpuUnhealthy"]["reason"] == "GpuFault"
    assert node["status"]["capacity"] == {"cpu": "64", "gpufleet.io/gpu-memory": "81920"}


def test_a_recovered_device_loses_its_taint_and_capacity_can_be_removed(
        server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_node(NODE, taints=[FOREIGN_TAINT, {"key": PREFIX + "GPU-a", "value": "xid-48", "effect": "NoSchedule"}])
    api.patch_node(_patch(capacity={"gpufleet.io/gpu-memory": None}))
    node = server.node(NODE)
    assert node["spec"]["taints"] == [FOREIGN_TAINT]
    assert node["status"]["capacity"] == {"cpu": "64"}


def test_unchanged_taints_are_not_sent(server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_node(NODE, taints=[FOREIGN_TAINT])
    api.patch_node(_patch())
    patch = next(r for r in server.requests if r.method == "PATCH" and r.path == f"/api/v1/nodes/{NODE}")
    assert "spec" not in patch.body and "resourceVersion" not in patch.body["metadata"]


def test_a_conditions_transition_time_moves_only_when_its_status_changes(
        server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime) -> None:
    times = iter(datetime(2026, 1, 1, hour, tzinfo=timezone.utc) for hour in (1, 2, 3))
    retrier = Retrier(POLICY, logging.getLogger(__name__), sleep=vtime.sleep, clock=vtime.clock)
    api = KubeNodeApi(client, NODE, retrier, now=lambda: next(times))

    def condition() -> dict[str, str]:
        return next(c for c in server.node(NODE)["status"]["conditions"] if c["type"] == "GpuUnhealthy")

    api.patch_node(_patch(status="False"))
    api.patch_node(_patch(status="False"))
    assert (condition()["lastTransitionTime"], condition()["lastHeartbeatTime"]) == \
        ("2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z")
    api.patch_node(_patch(status="True"))
    assert condition()["lastTransitionTime"] == "2026-01-01T03:00:00Z"


def test_a_write_conflict_reads_the_node_again_and_keeps_a_taint_added_meanwhile(
        server: FakeApiServer, api: KubeNodeApi) -> None:
    server.add_node(NODE, taints=[FOREIGN_TAINT])

    def another_controller_taints_the_node(s: FakeApiServer) -> None:
        s.nodes[NODE]["spec"]["taints"].append({"key": "added-meanwhile", "effect": "NoExecute"})
        s.bump(NODE)

    # between the agent's read and its write: the write carries a stale resourceVersion, gets 409, and is redone
    server.meanwhile(another_controller_taints_the_node, method="PATCH", path=f"/api/v1/nodes/{NODE}")
    api.patch_node(_patch(taints=(Taint(PREFIX + "GPU-a", "xid-48"),)))
    keys = [t["key"] for t in server.node(NODE)["spec"]["taints"]]
    assert keys == ["dedicated", "added-meanwhile", PREFIX + "GPU-a"]
    assert server.count("GET", f"/api/v1/nodes/{NODE}") == server.count("PATCH", f"/api/v1/nodes/{NODE}") == 2
