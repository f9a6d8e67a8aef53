"""`kubectl kustomize deploy/` renders, and every object validates against the Kubernetes schemas."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy import manifests
from tests.deploy.manifests import Obj

EXPECTED = {
    "Namespace/gpufleet-system",
    "CustomResourceDefinition/podgroups.scheduling.x-k8s.io",
    "CustomResourceDefinition/queues.gpufleet.io",
    "ServiceAccount/gpufleet-system/gpufleet-scheduler",
    "ServiceAccount/gpufleet-system/gpufleet-agent",
    "ClusterRole/gpufleet-scheduler",
    "ClusterRoleBinding/gpufleet-scheduler",
    "Role/gpufleet-system/gpufleet-scheduler-leader-election",
    "RoleBinding/gpufleet-system/gpufleet-scheduler-leader-election",
    "ClusterRole/gpufleet-agent",
    "ClusterRoleBinding/gpufleet-agent",
    "ConfigMap/gpufleet-system/gpufleet-scheduler-config",
    "ConfigMap/gpufleet-system/gpufleet-agent-config",
    "Deployment/gpufleet-system/gpufleet-scheduler",
    "PodDisruptionBudget/gpufleet-system/gpufleet-scheduler",
    "Service/gpufleet-system/gpufleet-scheduler-metrics",
    "DaemonSet/gpufleet-system/gpufleet-agent",
}
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


def test_the_base_renders_exactly_the_expected_objects(rendered: list[Obj]) -> None:
    assert sorted(manifests.key(o) for o in rendered) == sorted(EXPECTED)


def test_namespaced_objects_live_in_gpufleet_system_and_carry_the_part_of_label(rendered: list[Obj]) -> None:
    for obj in rendered:
        meta = obj["metadata"]
        assert (meta.get("namespace") is None) == (obj["kind"] in CLUSTER_SCOPED), manifests.key(obj)
        if obj["kind"] not in CLUSTER_SCOPED:
            assert meta["namespace"] == manifests.NAMESPACE, manifests.key(obj)
        assert meta["labels"]["app.kubernetes.io/part-of"] == "gpufleet", manifests.key(obj)


def test_every_rendered_object_validates_against_the_kubernetes_schemas(rendered: list[Obj]) -> None:
    failures = []
    for obj in rendered:
        try:
            version = manifests.validate_builtin(obj)
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{manifests.key(obj)}: {'.'.join(map(str, exc.path))}: {exc.message}")
            continue
        assert version == "1.34", f"{manifests.key(obj)} validated against {version}"
    assert not failures, "\n".join(failures)


def test_the_admission_policy_validates_is_cluster_scoped_and_bound() -> None:
    objs = manifests.admission_policy()
    names = ("gpufleet-agent-own-node", "gpufleet-no-prebound-gpu-pods", "gpufleet-non-preemptible-pods",
             "gpufleet-queue-namespaces")
    assert sorted(manifests.key(o) for o in objs) == [f"{kind}/{name}" for kind in (
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding") for name in names]
    for obj in objs:
        assert manifests.validate_builtin(obj) == "1.34", manifests.key(obj)
        assert "namespace" not in obj["metadata"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpufleet"
    for binding in (o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"):
        params = {"paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"}} \
            if binding["metadata"]["name"] == "gpufleet-queue-namespaces" else {}  # every Queue, none: allow
        assert binding["spec"] == {"policyName": binding["metadata"]["name"], "validationActions": ["Deny"], **params}


@pytest.mark.parametrize(("kind", "mutate"), [
    pytest.param("Deployment", lambda o: o["spec"].update(replica=2), id="a misspelt field fails (strict schemas)"),
    pytest.param("DaemonSet", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(ports="9402"),
                 id="a wrongly typed field fails"),
    pytest.param("CustomResourceDefinition", lambda o: o["spec"].update(scope=None), id="a CRD without scope fails"),
])
def test_the_validator_is_not_vacuous(rendered: list[Obj], kind: str, mutate: object) -> None:
    obj = copy.deepcopy(next(o for o in rendered if o["kind"] == kind))
    assert callable(mutate)
    mutate(obj)
    with pytest.raises(kubernetes_validate.ValidationError):
        manifests.validate_builtin(obj)


def test_samples_are_not_part_of_the_base(rendered: list[Obj], samples: dict[str, list[Obj]]) -> None:
    base = {manifests.key(o) for o in rendered}
    assert not base & {manifests.key(o) for objs in samples.values() for o in objs}
    kustomization = yaml.safe_load((manifests.DEPLOY / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if r.startswith("samples")]


def test_the_overlay_example_in_install_md_renders(tmp_path: Path, rendered: list[Obj]) -> None:
    text = (manifests.ROOT / "docs/install.md").read_text()
    (example,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "../deploy" in b]
    overlay = tmp_path / "my-cluster"
    overlay.mkdir()
    base = os.path.relpath(manifests.DEPLOY, overlay)  # kustomize refuses absolute paths
    (overlay / "kustomization.yaml").write_text(example.replace("../deploy", base))
    objs = manifests.render_base(overlay)
    assert sorted(manifests.key(o) for o in objs) == sorted(EXPECTED)
    agent = manifests.find(objs, "DaemonSet", "gpufleet-agent")["spec"]["template"]["spec"]
    assert agent["runtimeClassName"] == "nvidia"
    images = {c["image"] for o in objs if o["kind"] in ("Deployment", "DaemonSet")
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.example.com/gpufleet:0.1.0"}
    manifests.validate_builtin(manifests.find(objs, "DaemonSet", "gpufleet-agent"))
