"""Queues, preemption and namespaces on the real kube-apiserver: a Queue's `spec.namespaces` holds
pods to the queues of their namespace, and only namespaces a cluster admin labelled may opt their
pods out of preemption (docs/security.md, "Queues and namespaces").

The admission policy deploy/admission/queue-namespaces.yaml refuses a tenant's pod that names
another team's queue, at creation or by relabelling, and a change of a bound pod's queue label;
the scheduler leaves such a pod pending with reason QueueNotAllowed, which covers what the policy
does not see: a queue restricted after its pods were created, and pods without the label in a
restricted `default` queue. Tenants are ServiceAccounts with the built-in `edit` role in their
namespace.

deploy/admission/non-preemptible-pods.yaml refuses the annotation gpufleet.io/preemptible: "false"
on a pod of a namespace without the label gpufleet.io/allow-non-preemptible=true, at creation and
when added later; a pod that had it already may still be changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.testing.cluster import ApiError, Cluster, KubeClient
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import add_tenant, bound, create_all, install_gpufleet, manifests, refused_dry_run, \
    scheduler_in_process, scheduler_kubeconfig, try_create, wait_for

POLICY = "gpufleet-queue-namespaces"
QUEUE_LABEL = "gpufleet.io/queue"
PREEMPTIBLE = "gpufleet.io/preemptible"
ALLOW = "gpufleet.io/allow-non-preemptible"
Obj = dict[str, Any]


def queue(name: str, namespaces: list[str] | None = None) -> Obj:
    spec: Obj = {"namespaces": namespaces} if namespaces is not None else {}
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod(name: str, namespace: str, queue_name: str | None = None, gpus: int = 1) -> Obj:
    labels = {QUEUE_LABEL: queue_name} if queue_name else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"schedulerName": "gpufleet", "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def non_preemptible(obj: Obj, value: str = "false") -> Obj:
    obj["metadata"]["annotations"] = {PREEMPTIBLE: value}
    return obj


def relabel(client: KubeClient, namespace: str, name: str, queue_name: str) -> ApiError | None:
    try:
        client.patch("pods", name, {"metadata": {"labels": {QUEUE_LABEL: queue_name}}}, namespace)
    except ApiError as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("queues") / "cluster") as c:
        install_gpufleet(c)
        for ns in ("team-a", "team-b"):
            add_tenant(c, ns)
        c.admin.create(queue("team-a", ["team-a"]))
        c.admin.create(queue("shared"))
        create_all(c.admin, gpu_nodes(2, seed=5))
        for obj in manifests("deploy/admission/queue-namespaces.yaml", "deploy/admission/non-preemptible-pods.yaml"):
            c.admin.create(obj)
        probes = [pod("probe", "team-b", "team-a"), non_preemptible(pod("probe", "team-b"))]
        # kube-apiserver loads a new policy (and its params) from its informers, a moment after the create
        wait_for(lambda: all(refused_dry_run(c.admin, p) for p in probes), 30, "the policies to be in force")
        yield c


@pytest.fixture(scope="module")
def tenants(cluster: Cluster) -> Iterator[dict[str, KubeClient]]:
    clients = {ns: cluster.client(cluster.service_account_token(ns, "default")) for ns in ("team-a", "team-b")}
    yield clients
    for c in clients.values():
        c.close()


def test_a_tenant_cannot_create_a_pod_in_another_teams_queue(cluster: Cluster, tenants: dict[str, KubeClient]) -> None:
    refused = try_create(tenants["team-b"], pod("steal", "team-b", "team-a"))
    assert refused is not None and refused.status == 403, refused
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in refused.message
    assert ("pod steal names queue team-a, which does not admit pods of namespace team-b (its spec.namespaces: "
            "team-a)") in refused.message
    assert cluster.admin.get("pods", "steal", "team-b") is None


def test_pods_of_the_queues_namespace_of_open_queues_and_without_a_label_are_admitted(
        tenants: dict[str, KubeClient]) -> None:
    assert try_create(tenants["team-a"], pod("own", "team-a", "team-a")) is None
    assert try_create(tenants["team-b"], pod("open", "team-b", "shared")) is None
    assert try_create(tenants["team-b"], pod("plain", "team-b")) is None


def test_a_pending_pod_cannot_be_relabelled_into_another_teams_queue(tenants: dict[str, KubeClient]) -> None:
    tenants["team-b"].create(pod("move", "team-b", "shared"))
    refused = relabel(tenants["team-b"], "team-b", "move", "team-a")
    assert refused is not None and refused.status == 403 and "does not admit pods of namespace team-b" in refused.message
    tenants["team-a"].create(pod("mine", "team-a", "shared"))
    assert relabel(tenants["team-a"], "team-a", "mine", "team-a") is None  # into its own team's queue: fine


def test_a_bound_pods_queue_label_stays(cluster: Cluster, tenants: dict[str, KubeClient]) -> None:
    """What a bound pod holds is charged to the queue it was scheduled in; moving it would free that
    queue's quota while the GPUs stay taken."""
    tenants["team-a"].create(pod("running", "team-a", "team-a"))
    node = cluster.admin.list("nodes")[0]["metadata"]["name"]
    cluster.admin.call("POST", "/api/v1/namespaces/team-a/pods/running/binding",
                       {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "running", "namespace": "team-a"},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    refused = relabel(tenants["team-a"], "team-a", "running", "shared")
    assert refused is not None and refused.status == 403
    assert "pod running is bound to a node: its queue label stays team-a" in refused.message
    pod_now = cluster.admin.get("pods", "running", "team-a")
    assert pod_now is not None and pod_now["metadata"]["labels"][QUEUE_LABEL] == "team-a"


def test_the_scheduler_leaves_pods_their_queue_does_not_admit_pending_with_the_reason(
        cluster: Cluster, tenants: dict[str, KubeClient], tmp_path: Path) -> None:
    """What the policy cannot see: a queue restricted after its pods were created, and a restricted
    `default` queue (the policy checks labelled pods only). The pods of admitted namespaces bind."""
    admin = cluster.admin
    tenants["team-b"].create(pod("early", "team-b", "later"))  # `later` is not defined yet: admitted
    tenants["team-b"].create(pod("unlabelled", "team-b"))
    tenants["team-a"].create(pod("later-ok", "team-a", "later"))
    admin.create(queue("later", ["team-a"]))
    admin.create(queue("default", ["team-a"]))
    try:
        with scheduler_in_process(scheduler_kubeconfig(cluster, tmp_path / "scheduler.kubeconfig")) as service:
            def condition(ns: str, name: str) -> dict[str, Any]:
                p = admin.get("pods", name, ns) or {}
                return next((c for c in (p.get("status") or {}).get("conditions") or ()
                             if c["type"] == "PodScheduled"), {})
            wait_for(lambda: condition("team-b", "early").get("reason") == "QueueNotAllowed"
                     and condition("team-b", "unlabelled").get("reason") == "QueueNotAllowed", 60,
                     "team-b's pods reported QueueNotAllowed")
            wait_for(lambda: "team-a/later-ok" in bound(admin.list("pods", "team-a")), 60, "team-a's pod bound")
            assert condition("team-b", "early")["message"].startswith(
                "queue later does not admit pods of namespace team-b; its spec.namespaces: team-a.")
            assert condition("team-b", "unlabelled")["message"].startswith(
                "queue default does not admit pods of namespace team-b")
            assert not {"team-b/early", "team-b/unlabelled"} & set(bound(admin.list("pods", "team-b")))
            events = [e for e in admin.list("events", "team-b") if e.get("reason") == "FailedScheduling"
                      and (e.get("regarding") or e.get("involvedObject") or {}).get("name") == "early"]
            assert events, "no FailedScheduling event for the refused pod"

            def pending(queue_name: str) -> float | None:
                return service.metrics.registry.get_sample_value(
                    "gpufleet_pending_pods", {"queue": queue_name, "reason": "QueueNotAllowed"})
            unlabelled = [p for p in admin.list("pods", "team-b") if QUEUE_LABEL not in (p["metadata"].get("labels") or {})]
            wait_for(lambda: pending("later") == 1 and pending("default") == len(unlabelled), 10,
                     "the pending gauge's reason")
    finally:
        admin.delete("queues", "default")


# -- opting out of preemption ---------------------------------------------------------------------

def test_a_tenant_cannot_opt_its_pods_out_of_preemption_unless_its_namespace_may(
        cluster: Cluster, tenants: dict[str, KubeClient]) -> None:
    for value in ("false", "False"):  # as the scheduler reads it
        refused = try_create(tenants["team-b"], non_preemptible(pod(f"keep-{value.lower()}", "team-b"), value))
        assert refused is not None and refused.status == 403, refused
        assert "ValidatingAdmissionPolicy 'gpufleet-non-preemptible-pods'" in refused.message
        assert (f'pod keep-false is annotated {PREEMPTIBLE}: "false", which namespace team-b may not use') \
            in refused.message
    assert try_create(tenants["team-b"], non_preemptible(pod("preemptible", "team-b"), "true")) is None
    cluster.admin.patch("namespaces", "team-a", {"metadata": {"labels": {ALLOW: "true"}}})
    try:
        wait_for(lambda: try_create(tenants["team-a"], non_preemptible(pod("serving", "team-a"))) is None, 10,
                 "the labelled namespace's pod admitted")
    finally:
        cluster.admin.patch("namespaces", "team-a", {"metadata": {"labels": {ALLOW: None}}})
    # its label gone, team-a's pod that opted out may still be changed (a controller's write), but a
    # new one may not opt out
    wait_for(lambda: try_create(tenants["team-a"], non_preemptible(pod("serving-2", "team-a"))) is not None, 10,
             "the policy to see the label gone")
    cluster.admin.patch("pods", "serving", {"metadata": {"labels": {"touched": "yes"}}}, "team-a")


def test_the_annotation_cannot_be_added_to_a_pod_later(tenants: dict[str, KubeClient]) -> None:
    tenants["team-b"].create(pod("later", "team-b"))
    with pytest.raises(ApiError) as refused:
        tenants["team-b"].patch("pods", "later", {"metadata": {"annotations": {PREEMPTIBLE: "false"}}}, "team-b")
    assert refused.value.status == 403 and "gpufleet-non-preemptible-pods" in refused.value.message
