"""charts/gpufleet with the real helm (built by `make kube`): it lints, and with its defaults it
renders the objects of deploy/ (`kubectl kustomize`), apart from Helm's own labels, plus one
object deploy/ leaves to the operator, the Secret of assignment keys; its values change what they
say and nothing else.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.testing.cluster.binaries import helm, read_versions
from tests.deploy import manifests
from tests.deploy.manifests import DEPLOY, NAMESPACE, ROOT, Obj

CHART = ROOT / "charts" / "gpufleet"
KUBE = read_versions().kubernetes
"""Render for the Kubernetes version the live tests run (hack/kube/versions.env)."""
HELM_ONLY_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")
KEYS_SECRET = f"Secret/{NAMESPACE}/gpufleet-assignment-keys"
"""The one object the chart makes that deploy/ does not ship (a key in a public repository is no key)."""
KEYS_DIR = "/var/run/secrets/gpufleet/assignment-keys"


def _helm(*args: str) -> str:
    done = subprocess.run([str(helm()), *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr or done.stdout
    return done.stdout


def render(*sets: str, namespace: str = NAMESPACE) -> list[Obj]:
    args = ["template", "gpufleet", str(CHART), "--namespace", namespace, "--include-crds", "--kube-version", KUBE]
    for s in sets:
        args += ["--set", s]
    return [doc for doc in yaml.safe_load_all(_helm(*args)) if doc]


def _without_helm_labels(obj: Obj) -> Obj:
    def strip(meta: dict[str, Any]) -> None:
        labels = meta.get("labels") or {}
        for k in HELM_ONLY_LABELS:
            labels.pop(k, None)
    strip(obj["metadata"])
    template = obj.get("spec", {}).get("template")
    if isinstance(template, dict) and "metadata" in template:
        strip(template["metadata"])
    return obj


def _by_key(objs: list[Obj]) -> dict[str, Obj]:
    return {manifests.key(o): o for o in objs}


def _find(objs: list[Obj], kind: str, name: str) -> Obj:
    return manifests.find(objs, kind, name)


def _container(obj: Obj) -> dict[str, Any]:
    c: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return c


def test_helm_lint_passes_strict() -> None:
    out = _helm("lint", "--strict", "--kube-version", KUBE, str(CHART))
    assert "0 chart(s) failed" in out


def test_with_its_defaults_the_chart_renders_the_objects_of_deploy_and_the_keys_secret() -> None:
    chart = _by_key([_without_helm_labels(o) for o in render("namespace.create=true")])
    base = _by_key(manifests.render_base() + manifests.admission_policy())
    assert sorted(set(chart) - set(base)) == [KEYS_SECRET]  # that one extra object, and only it
    assert sorted(set(base) - set(chart)) == []
    for k, obj in base.items():
        assert chart[k] == obj, k


def test_without_assignment_keys_create_the_chart_renders_exactly_the_objects_of_deploy() -> None:
    chart = _by_key([_without_helm_labels(o) for o in render("namespace.create=true", "assignmentKeys.create=false",
                                                             "admissionPolicy.enabled=false")])
    base = _by_key(manifests.render_base())
    assert sorted(chart) == sorted(base)
    for k, obj in base.items():
        assert chart[k] == obj, k  # the mounts and flags stay: the operator provides the Secret


def _keys_secret(objs: list[Obj]) -> Obj:
    return _find(objs, "Secret", "gpufleet-assignment-keys")


def test_the_keys_secret_holds_one_random_64_character_key_kept_on_uninstall() -> None:
    first, second = _keys_secret(render()), _keys_secret(render())
    assert first["type"] == "Opaque" and "stringData" not in first
    assert first["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert first["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpufleet"
    keys = []
    for secret in (first, second):
        assert list(secret["data"]) == ["k1"]  # one key, so no `active` file is needed
        key = base64.b64decode(secret["data"]["k1"], validate=True).decode()
        assert re.fullmatch(r"[A-Za-z0-9]{64}", key), key
        keys.append(key)
    assert keys[0] != keys[1], "the same key in two renders is not random"
    assert len(set(keys[0])) > 16  # not a constant padded out
    assert manifests.validate_builtin(first)


def test_the_keys_secret_is_made_in_the_release_namespace_and_only_when_asked() -> None:
    assert _keys_secret(render(namespace="gpu-team"))["metadata"]["namespace"] == "gpu-team"
    assert not [o for o in render("assignmentKeys.create=false") if o["kind"] == "Secret"]
    assert _keys_secret(render("agent.enabled=false"))  # the scheduler signs whether or not our agent runs


def test_the_keys_secret_keeps_the_clusters_data_on_upgrade() -> None:
    """lookup returns the live Secret on install/upgrade and nothing under `helm template`: the
    template must copy the live data (keys added for a rotation included) and only make a key
    when there is none. helm cannot look up without a cluster, so this reads the template (the
    live test of an upgrade is tests/live/test_helm_live.py)."""
    text = (CHART / "templates" / "assignment-keys-secret.yaml").read_text()
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}", "", text, flags=re.S)  # the comment
    assert re.search(r'lookup "v1" "Secret" \.Release\.Namespace \$name', text)
    assert "toYaml $existing.data" in text and "randAlphaNum 64 | b64enc" in text
    assert text.index("toYaml $existing.data") < text.index("randAlphaNum")  # the live data wins


@pytest.mark.parametrize("create", ["true", "false"])
def test_the_chart_mounts_the_keys_and_passes_the_flag_in_both(create: str) -> None:
    objs = render(f"assignmentKeys.create={create}")
    for kind, name, mode in (("Deployment", "gpufleet-scheduler", 0o440), ("DaemonSet", "gpufleet-agent", 0o400)):
        workload = _find(objs, kind, name)
        c = _container(workload)
        assert c["command"][c["command"].index("--assignment-keys") + 1] == KEYS_DIR
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == KEYS_DIR]
        assert mount["readOnly"] is True
        (volume,) = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"] == {"secretName": "gpufleet-assignment-keys", "defaultMode": mode}
    assert _find(objs, "Deployment", "gpufleet-scheduler")["spec"]["template"]["spec"]["securityContext"][
        "fsGroup"] == 65532


def test_helm_adds_its_labels_but_keeps_every_selector_as_deploy_has_it() -> None:
    for obj in render():
        labels = obj["metadata"]["labels"]
        if obj["kind"] != "CustomResourceDefinition":  # crds/ is installed as written, not templated
            assert labels["app.kubernetes.io/managed-by"] == "Helm" and labels["app.kubernetes.io/part-of"] == "gpufleet"
    base = _by_key(manifests.render_base())
    for obj in render():
        selector = obj.get("spec", {}).get("selector")
        if selector is not None:
            assert selector == base[manifests.key(obj)]["spec"]["selector"], manifests.key(obj)


def test_the_shipped_profile_and_agent_config_are_deploys_files() -> None:
    assert (CHART / "files" / "profile.yaml").read_text() == (DEPLOY / "scheduler" / "profile.yaml").read_text()
    assert (CHART / "files" / "agent-config.yaml").read_text() == (DEPLOY / "agent" / "config.yaml").read_text()


def test_every_rendered_object_validates_against_the_kubernetes_schemas() -> None:
    for obj in render("namespace.create=true", "karpenter.enabled=true"):
        assert manifests.validate_builtin(obj) == manifests.KUBE_VERSION.rsplit(".", 1)[0]  # raises when invalid


def test_the_release_namespace_is_used_everywhere_and_the_namespace_is_made_only_when_asked() -> None:
    objs = render(namespace="gpu-team")
    assert not [o for o in objs if o["kind"] == "Namespace"]
    namespaced = [o for o in objs if "namespace" in o["metadata"]]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"gpu-team"}
    args = _container(_find(objs, "Deployment", "gpufleet-scheduler"))["command"]
    assert args[args.index("--lease-namespace") + 1] == "gpu-team"
    for binding in (o for o in objs if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert {s["namespace"] for s in binding["subjects"]} == {"gpu-team"}
    (ns,) = [o for o in render("namespace.create=true", namespace="gpu-team") if o["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "gpu-team"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_values_set_image_replicas_resources_and_karpenter() -> None:
    objs = render("image.repository=registry.example/gpufleet", "image.tag=dev", "scheduler.replicas=3",
                  "scheduler.resources.limits.memory=4Gi", "karpenter.enabled=true")
    scheduler = _find(objs, "Deployment", "gpufleet-scheduler")
    assert scheduler["spec"]["replicas"] == 3
    c = _container(scheduler)
    assert c["image"] == "registry.example/gpufleet:dev" and c["resources"]["limits"]["memory"] == "4Gi"
    assert "--karpenter" in c["command"]
    assert _container(_find(objs, "DaemonSet", "gpufleet-agent"))["image"] == "registry.example/gpufleet:dev"
    default = render()
    assert "--karpenter" not in _container(_find(default, "Deployment", "gpufleet-scheduler"))["command"]
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert _container(_find(default, "Deployment", "gpufleet-scheduler"))["image"].endswith(f":{version}")


def test_the_dashboard_is_off_unless_asked_and_then_on_loopback_only() -> None:
    default = _container(_find(render(), "Deployment", "gpufleet-scheduler"))
    assert not any(a.startswith("--dashboard") for a in default["command"])
    c = _container(_find(render("dashboard.enabled=true", "dashboard.port=9000"), "Deployment", "gpufleet-scheduler"))
    i = c["command"].index("--dashboard-port")
    assert c["command"][i + 1] == "9000" and "--dashboard-address" not in c["command"]  # the CLI's 127.0.0.1
    assert {"name": "dashboard", "containerPort": 9000, "protocol": "TCP"} in c["ports"]
    service = _find(render("dashboard.enabled=true"), "Service", "gpufleet-scheduler-metrics")
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]  # not exposed beyond the pod


def test_the_agent_can_be_left_out_or_pinned_to_nodes_and_a_runtime() -> None:
    without = render("agent.enabled=false")
    assert not [o for o in without if "agent" in o["metadata"]["name"]]
    assert _find(without, "Deployment", "gpufleet-scheduler")
    spec = _find(render("agent.runtimeClassName=nvidia", "agent.nodeSelector.cloud\\.google\\.com/gke-accelerator=nvidia-h100-80gb"),
                 "DaemonSet", "gpufleet-agent")["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert spec["affinity"] == _find(render(), "DaemonSet", "gpufleet-agent")["spec"]["template"]["spec"]["affinity"]
    default = _find(render(), "DaemonSet", "gpufleet-agent")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in default and "nodeSelector" not in default


def test_the_admission_policies_are_on_unless_asked_and_then_all_their_objects_go() -> None:
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

    def policies(*sets: str) -> list[str]:
        return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in render(*sets) if o["kind"] in kinds)
    both = [f"{k}/{n}" for k in kinds
            for n in ("gpufleet-agent-own-node", "gpufleet-no-prebound-gpu-pods", "gpufleet-non-preemptible-pods",
                      "gpufleet-queue-namespaces")]
    assert policies() == sorted(both)
    assert not [o for o in render() if o["kind"] in kinds and "namespace" in o["metadata"]], "cluster-scoped"
    assert policies("admissionPolicy.enabled=false") == []
    assert policies("agent.enabled=false") == sorted(p for p in both if "agent" not in p)  # no agent to hold


def test_the_agent_policy_names_the_agent_of_the_release_namespace() -> None:
    policy = _find(render(namespace="gpu-system"), "ValidatingAdmissionPolicy", "gpufleet-agent-own-node")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:gpu-system:gpufleet-agent'")


def test_mig_repartition_is_off_by_default_and_a_value_turns_it_on() -> None:
    def command(*sets: str) -> list[str]:
        return list(_container(_find(render(*sets), "Deployment", "gpufleet-scheduler"))["command"])
    assert "--mig-repartition" not in command()
    assert "--mig-repartition" in command("scheduler.migRepartition=true")



def test_defragmentation_is_off_by_default_and_values_set_it_and_its_budget() -> None:
    def command(*sets: str) -> list[str]:
        return list(_container(_find(render(*sets), "Deployment", "gpufleet-scheduler"))["command"])
    assert "--defrag" not in command()
    on = command("scheduler.defrag.enabled=true", "scheduler.defrag.budgetGpuHoursPerHour=0.5")
    assert on[on.index("--defrag"):on.index("--defrag") + 3] == ["--defrag", "--defrag-budget", "0.5"]


def test_karpenter_rules_go_only_when_neither_flag_nor_rbac_asks_for_them() -> None:
    def groups(objs: list[Obj]) -> set[str]:
        role = _find(objs, "ClusterRole", "gpufleet-scheduler")
        return {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert "karpenter.sh" in groups(render())
    assert "karpenter.sh" not in groups(render("karpenter.rbac=false"))
    assert "karpenter.sh" in groups(render("karpenter.rbac=false", "karpenter.enabled=true"))


def test_the_agent_mounts_the_mps_root_its_config_names(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"agent": {"config": "version: v1\nflags: {mpsRoot: /var/run/gpu-mps/}\n"
                                                          "sharing: {mps: {resources: [{name: nvidia.com/gpu, "
                                                          "replicas: 4}]}}\n"}}))
    objs = [doc for doc in yaml.safe_load_all(_helm("template", "gpufleet", str(CHART), "-n", NAMESPACE,
                                                    "-f", str(values))) if doc]
    agent = _find(objs, "DaemonSet", "gpufleet-agent")
    mounts = {m["name"]: m["mountPath"] for m in _container(agent)["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in agent["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert (mounts["mps-root"], paths["mps-root"]) == ("/var/run/gpu-mps", "/var/run/gpu-mps")
    assert (mounts["mps-shm"], paths["mps-shm"]) == ("/dev/shm", "/var/run/gpu-mps/shm")
    config = _find(objs, "ConfigMap", "gpufleet-agent-config")["data"]["default.yaml"]
    assert "mpsRoot: /var/run/gpu-mps/" in config


def test_the_agent_mounts_the_dra_directories_only_when_its_config_publishes(tmp_path: Path) -> None:
    def host_paths(config: str | None) -> set[str]:
        values = tmp_path / "values.yaml"
        values.write_text(yaml.safe_dump({"agent": {"config": config}} if config else {}))
        objs = [doc for doc in yaml.safe_load_all(_helm("template", "gpufleet", str(CHART), "-n", NAMESPACE,
                                                        "-f", str(values))) if doc]
        agent = _find(objs, "DaemonSet", "gpufleet-agent")
        mounts = {m["name"]: m["mountPath"] for m in _container(agent)["volumeMounts"]}
        paths = {v["name"]: v["hostPath"]["path"] for v in agent["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
        assert all(mounts[name] == path for name, path in paths.items() if name.startswith(("kubelet-plugins", "cdi")))
        return set(paths.values())
    dra = {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"}
    assert not dra & host_paths(None)
    assert not dra & host_paths("version: v1\ngpufleet: {dra: {publish: false}}\n")
    assert dra <= host_paths("version: v1\ngpufleet: {dra: {publish: true, mig: dynamic}}\n")


@pytest.mark.parametrize(("bad", "says"), [
    ("scheduler.replicas=two", "/scheduler/replicas"),
    ("scheduler.replica=2", "replica"),
    ("karpenter.enabled=maybe", "/karpenter/enabled"),
    ("dashboard.port=70000", "/dashboard/port"),
    ("agent.enabled=no", "/agent/enabled"),
    ("assignmentKeys.create=yes", "/assignmentKeys/create"),
    ("assignmentKeys.key=abc", "key"),
    ("agent.config=flags: [unclosed", "agent.config is not a YAML mapping"),
])
def test_bad_values_fail_the_render_and_name_the_value(bad: str, says: str) -> None:
    done = subprocess.run([str(helm()), "template", "gpufleet", str(CHART), "-n", NAMESPACE, "--set", bad],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and says in done.stderr, done.stderr
