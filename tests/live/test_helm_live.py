"""The real helm installs charts/gpufleet on the real control plane, and `gpufleet scheduler`, run
under the chart's ServiceAccount and RBAC, binds a first GPU pod; an upgrade changes a value in
place, and an uninstall removes what the chart made (its CRDs stay, as Helm leaves crds/). The
assignment-signing Secret the chart makes is what the scheduler signs with, survives the upgrade
unchanged and stays after the uninstall (`helm.sh/resource-policy: keep`). The admission policy
against pods created bound to a node with GPUs is accepted by kube-apiserver and goes with the
release.

There is no kube-scheduler and no image: the chart's own pods stay Pending, as in
test_kubectl_live.py; the scheduler runs here as a process with the chart's ServiceAccount token.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path


from gpufleet.model.assignment_auth import SIGNATURE_ANNOTATION, load_keyring, verify
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.cluster.binaries import helm
from gpufleet.testing.gpu_nodes import gpu_nodes

from .cluster_kit import NAMESPACE, ROOT, Scheduler, clean_env, crd_established, scheduler_kubeconfig, wait_for

CHART = ROOT / "charts" / "gpufleet"
POLICY = "gpufleet-no-prebound-gpu-pods"


def _helm(kubeconfig: Path, home: Path, *args: str) -> str:
    env = clean_env(HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
                    HELM_DATA_HOME=str(home / "data"))
    done = subprocess.run([str(helm()), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def test_helm_install_then_the_scheduler_binds_a_gpu_pod_upgrade_and_uninstall(tmp_path: Path) -> None:
    with Cluster(tmp_path / "cluster") as c:
        c.admin.create_all(gpu_nodes(2, seed=3))
        kubeconfig = c.write_kubeconfig(tmp_path / "admin.kubeconfig")
        _helm(kubeconfig, tmp_path, "install", "gpufleet", str(CHART), "--namespace", NAMESPACE,
              "--create-namespace")
        status = json.loads(_helm(kubeconfig, tmp_path, "status", "gpufleet", "-n", NAMESPACE, "-o", "json"))
        assert status["info"]["status"] == "deployed"
        for crd in ("podgroups.scheduling.x-k8s.io", "queues.gpufleet.io"):
            wait_for(lambda: crd_established(c.admin, crd), 30, f"CRD {crd} established")
        deployment = c.admin.get("deployments", "gpufleet-scheduler", NAMESPACE)
        assert deployment is not None and deployment["spec"]["replicas"] == 2
        assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        c.wait_for_service_account(NAMESPACE, "gpufleet-scheduler")
        secret = c.admin.get("secrets", "gpufleet-assignment-keys", NAMESPACE)
        assert secret is not None and set(secret["data"]) == {"k1"}
        assert c.admin.get("validatingadmissionpolicies", POLICY) is not None  # the API server took it
        assert c.admin.get("validatingadmissionpolicybindings", POLICY) is not None
        keys = tmp_path / "assignment-keys"  # the Secret as its volume would show it
        keys.mkdir()
        (keys / "k1").write_bytes(base64.b64decode(secret["data"]["k1"]))

        with Scheduler(scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig"), tmp_path / "scheduler.log",
                       "--qps", "0", "--assignment-keys", str(keys)) as s:
            wait_for(s.ready, 60, "the scheduler")
            c.admin.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "first", "namespace": "default"},
                            "spec": {"schedulerName": "gpufleet", "containers": [
                                {"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
            wait_for(lambda: ((c.admin.get("pods", "first", "default") or {}).get("spec") or {}).get("nodeName"),
                     60, "the first GPU pod bound")
            assert s.terminate() == 0
        pod = c.admin.get("pods", "first", "default")
        assert pod is not None and pod["spec"]["nodeName"].startswith("gpu-node-")
        assert "gpufleet.io/gpu-assignment" in pod["metadata"]["annotations"]
        m = pod["metadata"]
        assert verify(load_keyring(keys), m["annotations"][SIGNATURE_ANNOTATION], m["uid"], f"default/{m['name']}",
                      pod["spec"]["nodeName"], m["annotations"]["gpufleet.io/gpu-assignment"]) is None

        _helm(kubeconfig, tmp_path, "upgrade", "gpufleet", str(CHART), "-n", NAMESPACE, "--set",
              "scheduler.replicas=1")
        upgraded = c.admin.get("deployments", "gpufleet-scheduler", NAMESPACE)
        assert upgraded is not None and upgraded["spec"]["replicas"] == 1
        assert c.admin.get("secrets", "gpufleet-assignment-keys", NAMESPACE)["data"] == secret["data"]  # kept

        _helm(kubeconfig, tmp_path, "uninstall", "gpufleet", "-n", NAMESPACE)
        wait_for(lambda: c.admin.get("deployments", "gpufleet-scheduler", NAMESPACE) is None, 30,
                 "the Deployment removed")
        assert c.admin.get("clusterroles", "gpufleet-scheduler") is None
        assert c.admin.get("validatingadmissionpolicies", POLICY) is None
        assert c.admin.get("customresourcedefinitions", "queues.gpufleet.io") is not None  # crds/ stays
        assert c.admin.get("secrets", "gpufleet-assignment-keys", NAMESPACE)["data"] == secret["data"]  # kept too
