"""RBAC is exactly what each component calls: every (apiGroup, resource, verb) below, nothing more.

The lists are written out here, separately from deploy/, so that widening a rule (a new verb,
a wildcard, another resource) fails this test until the list is changed on purpose. That they
are what the components call is measured: tests/live/test_rbac_recorded_live.py records every
request of the live tests and finds each of these used and nothing else; docs/security.md
lists them with their reasons (tests/deploy/test_security_doc.py keeps it equal to these sets).
"""

from __future__ import annotations

import pytest

from tests.deploy import manifests
from tests.deploy.manifests import Obj

CLUSTER = "cluster"
SCHEDULER: set[tuple[str, str, str, str]] = {
    # (scope, apiGroup, resource, verb)
    *((CLUSTER, "", "pods", v) for v in ("list", "watch")),  # pod informer
    (CLUSTER, "", "pods", "get"),                   # after a Binding whose reply was lost: is the pod bound?
    (CLUSTER, "", "pods", "patch"),                 # gpufleet.io/gpu-assignment annotation before binding
    (CLUSTER, "", "pods/binding", "create"),
    (CLUSTER, "", "pods/status", "patch"),          # PodScheduled=False reason Unschedulable
    (CLUSTER, "", "pods/eviction", "create"),       # preemption through the Eviction API (PDBs)
    (CLUSTER, "events.k8s.io", "events", "create"),  # Scheduled, FailedScheduling, preemptions, GPU faults
    *((CLUSTER, "", "nodes", v) for v in ("list", "watch")),
    (CLUSTER, "", "nodes", "patch"),                # --karpenter: karpenter.sh/do-not-disrupt on busy GPU nodes
    *((CLUSTER, "scheduling.x-k8s.io", "podgroups", v) for v in ("list", "watch")),
    (CLUSTER, "scheduling.x-k8s.io", "podgroups/status", "patch"),
    *((CLUSTER, "gpufleet.io", "queues", v) for v in ("list", "watch")),
    (CLUSTER, "gpufleet.io", "queues/status", "patch"),
    *((CLUSTER, "karpenter.sh", "nodepools", v) for v in ("list", "watch")),  # --karpenter: templates
    *((CLUSTER, "karpenter.sh", "nodeclaims", v) for v in ("list", "watch", "create")),  # in flight; created
    *((manifests.NAMESPACE, "coordination.k8s.io", "leases", v) for v in ("get", "create", "update")),
    # DRA (src/gpufleet/kube/dra_cache.py, claims.py): the informers; a claim read again after a 409 and
    # before an undo; the finalizer; allocation and reservedFor; and the synthetic resourceclaims/binding
    # kube-apiserver checks (from 1.36) for changes to allocation or reservedFor. Updates only, no patch.
    *((CLUSTER, "resource.k8s.io", r, v) for r in ("deviceclasses", "resourceslices") for v in ("list", "watch")),
    *((CLUSTER, "resource.k8s.io", "resourceclaims", v) for v in ("get", "list", "watch", "update")),
    (CLUSTER, "resource.k8s.io", "resourceclaims/status", "update"),
    *((CLUSTER, "policy", "poddisruptionbudgets", v) for v in ("list", "watch")),  # --defrag
    (CLUSTER, "resource.k8s.io", "resourceclaims/binding", "update"),
}
AGENT: set[tuple[str, str, str, str]] = {
    # src/gpufleet/kube/node_api.py: GET/PATCH nodes/N, PATCH nodes/N/status, GET pods?fieldSelector=spec.nodeName=N,
    # POST events
    (CLUSTER, "", "nodes", "get"),
    (CLUSTER, "", "nodes", "patch"),
    (CLUSTER, "", "nodes/status", "patch"),
    (CLUSTER, "", "pods", "list"),
    (CLUSTER, "events.k8s.io", "events", "create"),  # AssignmentRejected on a pod with a forged assignment
    # GET resourceslices?fieldSelector=spec.nodeName=N,spec.driver=D, then POST, PUT, DELETE of the node's pool
    *((CLUSTER, "resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")),
    (CLUSTER, "resource.k8s.io", "resourceclaims", "get"),  # NodePrepareResources: the claim as it is now
}


def granted(objs: list[Obj], service_account: str) -> set[tuple[str, str, str, str]]:
    """Every (scope, apiGroup, resource, verb) the bindings in `objs` give the service account."""
    out = set()
    for binding in (o for o in objs if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        subjects = binding.get("subjects", [])
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account
                   and s["namespace"] == manifests.NAMESPACE for s in subjects):
            continue
        ref = binding["roleRef"]
        role = manifests.find(objs, ref["kind"], ref["name"])
        scope = CLUSTER if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((scope, group, resource, verb))
    return out


@pytest.mark.parametrize(("account", "expected"), [
    pytest.param("gpufleet-scheduler", SCHEDULER, id="scheduler"),
    pytest.param("gpufleet-agent", AGENT, id="agent"),
])
def test_each_service_account_gets_exactly_what_it_calls(rendered: list[Obj], account: str,
                                                        expected: set[tuple[str, str, str, str]]) -> None:
    got = granted(rendered, account)
    assert not {g for g in got if "*" in g}, "no wildcards"
    assert sorted(got - expected) == [], "granted but not needed"
    assert sorted(expected - got) == [], "needed but not granted"


def test_every_role_is_bound_and_the_workloads_use_their_service_accounts(rendered: list[Obj]) -> None:
    roles = {(o["kind"], o["metadata"]["name"]) for o in rendered if o["kind"] in ("ClusterRole", "Role")}
    bound = {(o["roleRef"]["kind"], o["roleRef"]["name"]) for o in rendered
             if o["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    assert roles == bound
    deployment = manifests.find(rendered, "Deployment", "gpufleet-scheduler")
    daemonset = manifests.find(rendered, "DaemonSet", "gpufleet-agent")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "gpufleet-scheduler"
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "gpufleet-agent"
