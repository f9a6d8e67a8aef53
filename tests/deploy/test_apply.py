"""The base and the samples go in with the real kubectl against gpufleet's local API test server.

The server is test infrastructure (src/gpufleet/testing/apiserver), not Kubernetes: it
checks what kubectl sends against the CRD schemas and with strict field validation, but
enforces no RBAC or Pod Security. This is a smoke test of the manifests through the real
client; the scheduler's end-to-end tests live with the server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.deploy import manifests

server = pytest.importorskip("gpufleet.testing.apiserver.server", reason="the local API test server is not there yet")


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not manifests.KUBECTL.exists():
        pytest.skip(f"kubectl not found at {manifests.KUBECTL}")
    with server.ApiServer() as api:
        yield Path(api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config"))


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(manifests.KUBECTL), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_apply_k_deploy_then_the_samples(kubeconfig: Path) -> None:
    base = kubectl(kubeconfig, "apply", "-k", str(manifests.DEPLOY))
    assert base.returncode == 0, base.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/queues.gpufleet.io created" in base.stdout
    samples = kubectl(kubeconfig, "apply", "-f", str(manifests.SAMPLES))
    assert samples.returncode == 0, samples.stderr
    queues = kubectl(kubeconfig, "get", "gq").stdout.splitlines()
    assert queues[0].split() == ["NAME", "PARENT", "WEIGHT", "BORROW", "PENDING", "AGE"]
    assert queues[2].split()[:4] == ["research-nlp", "research", "1", "true"]
    assert kubectl(kubeconfig, "get", "pg", "trainer", "-o", "jsonpath={.spec.minMember}").stdout == "4"


@pytest.mark.parametrize(("doc", "mentions"), [
    pytest.param("kind: Queue\nmetadata: {name: bad}\nspec: {weight: 0}", "spec.weight", id="queue weight 0"),
    pytest.param("kind: Queue\nmetadata: {name: bad}\nspec: {guaranteed: {cpu: '-1'}}", "spec.guaranteed.cpu",
                 id="queue negative quantity"),
    pytest.param("kind: Queue\nmetadata: {name: bad}\nspec: {limit: {nvidia.com/gpus: 1}}", "nvidia.com/gpus",
                 id="queue unknown resource key"),
    pytest.param("kind: PodGroup\nmetadata: {name: bad, namespace: default}\nspec: {minMember: 0}", "spec.minMember",
                 id="podgroup minMember 0"),
])
def test_kubectl_apply_of_a_malformed_resource_fails(kubeconfig: Path, doc: str, mentions: str) -> None:
    assert kubectl(kubeconfig, "apply", "-k", str(manifests.DEPLOY)).returncode == 0
    group = "gpufleet.io" if "Queue" in doc else "scheduling.x-k8s.io"
    result = kubectl(kubeconfig, "apply", "-f", "-", stdin=f"apiVersion: {group}/v1alpha1\n{doc}\n")
    assert result.returncode != 0
    assert mentions in result.stderr
