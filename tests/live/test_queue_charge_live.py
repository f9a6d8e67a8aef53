"""A bound pod stays charged to the queue it was scheduled in, on the real kube-apiserver with no
admission policy installed: a tenant (the built-in `edit` role in its namespace) relabels its
running pod into another queue that admits its namespace, and the Queues' status, what `kubectl
get queue -o yaml` shows, moves nothing to the new queue; nor after the scheduler restarts. The
scheduler records the queue in the assignment annotation it binds with (docs/security.md,
"Queues and namespaces")."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster, KubeClient
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import add_tenant, bound, create_all, install_gpufleet, scheduler_in_process, scheduler_kubeconfig, \
    wait_for
from .test_queue_namespaces_live import QUEUE_LABEL, pod, queue

GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("queue-charge") / "cluster") as c:
        install_gpufleet(c)
        add_tenant(c, "team-a")
        c.admin.create(queue("team-a", ["team-a"]))
        c.admin.create(queue("shared"))
        create_all(c.admin, gpu_nodes(2, seed=5))
        yield c


def allocated(admin: KubeClient, name: str) -> str | None:
    q = admin.get("queues", name) or {}
    gpus: str | None = ((q.get("status") or {}).get("allocated") or {}).get(GPU)
    return gpus


def bind_one(admin: KubeClient, tenant: KubeClient, name: str, queue_name: str) -> dict[str, Any]:
    """Create a pod of one GPU in `queue_name` and wait for the scheduler to bind it: a cycle ran."""
    tenant.create(pod(name, "team-a", queue_name))
    wait_for(lambda: f"team-a/{name}" in bound(admin.list("pods", "team-a")), 60, f"pod {name} bound")
    got = admin.get("pods", name, "team-a")
    assert got is not None
    return got


def test_a_relabelled_running_pod_stays_charged_to_its_queue(cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.admin
    tenant = cluster.client(cluster.service_account_token("team-a", "default"))
    kubeconfig = scheduler_kubeconfig(cluster, tmp_path / "scheduler.kubeconfig")
    try:
        with scheduler_in_process(kubeconfig):
            running = bind_one(admin, tenant, "running", "team-a")
            assignment = ann.decode_assignment(running["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION])
            assert assignment.queue == "team-a"
            wait_for(lambda: allocated(admin, "team-a") == "1000m", 30, "team-a's status to count the pod")
            # No policy refuses it: the tenant may edit its pods' labels.
            tenant.patch("pods", "running", {"metadata": {"labels": {QUEUE_LABEL: "shared"}}}, "team-a")
            bind_one(admin, tenant, "after-relabel", "shared")  # a cycle after the relabel
            wait_for(lambda: allocated(admin, "shared") == "1000m", 30, "shared's status to count its own pod")
            assert allocated(admin, "team-a") == "1000m"
        with scheduler_in_process(kubeconfig):  # restarted: read from the pods as they are now
            bind_one(admin, tenant, "after-restart", "shared")
            wait_for(lambda: allocated(admin, "shared") == "2000m", 30, "shared's status to count both its pods")
            assert allocated(admin, "team-a") == "1000m"
    finally:
        tenant.close()
