"""Demand-driven MIG end to end on the real control plane: a pod asks for a MIG profile no GPU has
carved; gpufleet's scheduler (`--mig-repartition`, under deploy/'s scheduler RBAC) writes a new
layout on the node; the node agent (under deploy/'s agent RBAC, on the fake backend: a stand-in
for NVML written from its API, docs/hardware.md says what ran on a real GPU) destroys idle
instances and carves the profile; the scheduler binds the pod to the new instance. A pod already
running on an instance keeps it through the change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.agent import configsource, fake, mig_layout
from gpufleet.agent.runtime import Agent, AgentOptions
from gpufleet.cli.agent_api import AgentNodeApi
from gpufleet.kube import config
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import KWOK_ANNOTATION

from .cluster_kit import (Obj, agent_kubeconfig, install_gpufleet, scheduler_in_process, scheduler_kubeconfig,
                          wait_for)

NODE = "mig-node"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("mig") / "cluster") as c:
        install_gpufleet(c)
        yield c


def mig_pod(name: str, profile: str) -> Obj:
    resources = {ann.mig_resource(profile): "1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "gpufleet", "containers": [{"name": "c", "image": "cuda",
                                                                  "resources": {"requests": resources,
                                                                                "limits": resources}}]}}


def node_of(c: Cluster, name: str) -> str | None:
    pod = c.admin.get("pods", name, "default") or {}
    return (pod.get("spec") or {}).get("nodeName")


def assigned(c: Cluster, name: str) -> tuple[str, str]:
    """(profile, MIG UUID) of the instance the pod's assignment names, in the node's inventory now."""
    pod = c.admin.get("pods", name, "default")
    assert pod is not None
    a = ann.decode_assignment(pod["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION])
    (ref,) = a.mig
    node = c.admin.get("nodes", NODE)
    assert node is not None and ref.uuid is not None  # assignments name the instance, not only its index
    gpu = {g.uuid: g for g in ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])}[ref.gpu]
    return gpu.mig[gpu.mig_devices.index(ref.uuid)], ref.uuid


def test_a_pod_waiting_for_a_profile_gets_it_carved_from_idle_instances_and_binds(
        cluster: Cluster, sock_dir: Path, tmp_path: Path) -> None:
    cluster.admin.create({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE},
                                       "annotations": {KWOK_ANNOTATION: "fake"}}})
    cluster.admin.patch("nodes", NODE, {"status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                                                   "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}},
                        subresource="status")
    (tmp_path / "agent.yaml").write_text("flags: {migStrategy: mixed}\ngpufleet: {metricsPort: 0}\n")
    backend = fake.load_fixture("a100-mig")  # 3g+2g+1g+1g, 7 x 1g.5gb, 7g.40gb, and a GPU with MIG off
    client = config.connect(config.from_kubeconfig(agent_kubeconfig(cluster, tmp_path / "agent")), timeout_s=5.0)
    api = AgentNodeApi(KubeNodeApi(client, NODE))
    agent = Agent(lambda: backend, api, configsource.ConfigSource(tmp_path / "agent.yaml", None, api.node_labels),
                  AgentOptions(NODE, sock_dir, metrics_port=0, config_poll_s=0.2))
    agent.start()
    try:
        with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "scheduler"), mig_repartition=True) as s:
            assert s.mig is not None
            s.mig.interval_s = 0.5
            # the 7g.40gb and the 3g.20gb (beside 2g.10gb@0, 1g.5gb@2, 1g.5gb@3) are taken first
            for name, profile in (("whole", "7g.40gb"), ("mid", "3g.20gb")):
                cluster.admin.create(mig_pod(name, profile))
                wait_for(lambda: node_of(cluster, name) == NODE, 30, f"the {profile} pod bound to a carved instance")
            held = assigned(cluster, "mid")
            cluster.admin.create(mig_pod("big", "4g.20gb"))  # no GPU has a 4g.20gb carved
            wait_for(lambda: node_of(cluster, "big") == NODE, 60, "the 4g.20gb pod bound after the layout change")
            assert assigned(cluster, "big")[0] == "4g.20gb"
            assert assigned(cluster, "mid") == held  # the busy 3g.20gb kept: its MIG UUID is still on the GPU
            node = cluster.admin.get("nodes", NODE)
            assert node is not None
            state = json.loads(node["metadata"]["annotations"][mig_layout.STATE_ANNOTATION])
            layout = json.loads(node["metadata"]["annotations"][mig_layout.LAYOUT_ANNOTATION])
            assert state == {"generation": layout["generation"], "state": "success"}
            assert s.mig.writes >= 1
    finally:
        agent.stop()
        client.close()
