"""What the scheduler reads from the real control plane, offline: `gpufleet snapshot dump` of a
cluster, replayed through `schedule()`; and the typical-task mix the live scheduler hands its
fragmentation scorers, from the pods its informers list.

Pods stay Pending here (no scheduler runs), so what is read is what was created.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.cli.main import main
from gpufleet.framework.plugins.fgd import FragScorePlugin
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.framework.profiles import builtin
from gpufleet.kube import config, snapshot_io, translate
from gpufleet.kube.rest import Rest, path
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.model import annotations as ann
from gpufleet.model import units
from gpufleet.testing import workload
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import gpu_nodes
from gpufleet.testing.workload import pod_manifests

from .cluster_kit import Obj, create_all, install_gpufleet, scheduler_kubeconfig, wait_for

NODES, PODS = 10, 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path, list[Obj]]]:
    home = tmp_path_factory.mktemp("snapshot")
    with Cluster(home / "cluster") as c:
        install_gpufleet(c)
        nodes = gpu_nodes(NODES, seed=4)
        create_all(c.admin, nodes)
        c.admin.create_all(workload.queue_manifests() + workload.priority_class_manifests())
        yield c, scheduler_kubeconfig(c, home / "scheduler.kubeconfig"), nodes


def test_generated_gpu_nodes_are_stored_as_generated_and_kwok_makes_them_ready(
        cluster: tuple[Cluster, Path, list[Obj]]) -> None:
    c, _, nodes = cluster

    def ready(node: Obj) -> bool:
        return any(k["type"] == "Ready" and k["status"] == "True" for k in node["status"].get("conditions") or ())
    wait_for(lambda: all(ready(n) for n in c.admin.list("nodes")), 60, "KWOK to make every node Ready")
    stored = {n["metadata"]["name"]: n for n in c.admin.list("nodes")}
    assert set(stored) == {n["metadata"]["name"] for n in nodes}
    for generated in nodes:
        node = stored[generated["metadata"]["name"]]
        # labels, the inventory annotation and the GPU resources are kept as written (KWOK and
        # kube-controller-manager only add their own)
        assert generated["metadata"]["labels"].items() <= node["metadata"]["labels"].items()
        annotation = ann.INVENTORY_ANNOTATION
        assert node["metadata"]["annotations"][annotation] == generated["metadata"]["annotations"][annotation]
        # the server writes quantities in canonical form ("8000" as "8k"), which gpufleet parses alike
        def gpu(allocatable: Obj) -> dict[str, Decimal]:
            return {k: units.parse_quantity(v, k) for k, v in allocatable.items() if "gpu" in k or "mig" in k}
        assert gpu(generated["status"]["allocatable"]) == gpu(node["status"]["allocatable"]) != {}
        stored_info, generated_info = translate.node_info(node), translate.node_info(generated)
        assert (stored_info.cpu_milli, stored_info.mem_mib, stored_info.max_pods, stored_info.gpus) == \
            (generated_info.cpu_milli, generated_info.mem_mib, generated_info.max_pods, generated_info.gpus)


def test_dump_from_the_api_then_replay(cluster: tuple[Cluster, Path, list[Obj]], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    c, kubeconfig, nodes = cluster
    pods, groups = pod_manifests(nodes, PODS, seed=1, namespace="dumped")
    c.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dumped"}})
    c.wait_for_service_account("dumped")
    c.admin.create_all(groups)
    create_all(c.admin, pods)
    # under the scheduler's ServiceAccount: what it may read is enough for a dump
    assert main(["snapshot", "dump", "--kubeconfig", str(kubeconfig)]) == 0
    dump = snapshot_io.loads(capsys.readouterr().out)
    assert len(dump.nodes) == NODES and dump.running == ()
    assert len(dump.pending) + len(dump.invalid) == PODS and len(dump.pending) >= PODS - 2
    assert {n.name for n in dump.nodes} == {n["metadata"]["name"] for n in nodes}
    assert {q.name for q in dump.queues} == {q["metadata"]["name"] for q in workload.queue_manifests()}
    assert {f"{g.namespace}/{g.name}" for g in dump.pod_groups} == {f"dumped/{g['metadata']['name']}" for g in groups}
    f = tmp_path / "snap.json"
    f.write_text(snapshot_io.dumps(dump))
    assert main(["snapshot", "replay", str(f), "--profile", "gpufleet"]) == 0
    assert f"{NODES} nodes, 0 running, {len(dump.pending)} pending; profile gpufleet:" in capsys.readouterr().out


def _fraction_pod(i: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"frac-{i}", "namespace": "mix"},
            "spec": {"schedulerName": ann.SCHEDULER_NAME, "containers": [{
                "name": "main", "image": "x", "resources": {
                    "requests": {"cpu": f"{1000 * (1 + i % 2)}m"}, "limits": {ann.GPU_MILLI_RESOURCE: 500}}}]}}


@pytest.mark.parametrize("name", ["default", "fgd", "gpufleet", "gpufleet-lookahead"])
def test_a_fragmentation_profile_is_built_with_the_typical_tasks_of_the_pending_pods(
        cluster: tuple[Cluster, Path, list[Obj]], name: str) -> None:
    c, kubeconfig, _ = cluster
    if c.admin.get("namespaces", "mix") is None:
        c.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mix"}})
        c.wait_for_service_account("mix")
        c.admin.create_all(_fraction_pod(i) for i in range(4))
    rest = Rest(config.from_kubeconfig(kubeconfig))
    try:
        service = SchedulerService(rest, builtin(name), ServiceSettings())
        # the pod informer's LIST, under the scheduler's ServiceAccount (no watch, no cycle)
        service.cache.replace_pods(rest.list(path("v1", "pods"))["items"])
        specs = [p.spec for p in service.cache.pending() if p.key.startswith("mix/") and p.spec is not None]
        assert len(specs) == 4
        profile = service._build_profile(specs)
    finally:
        rest.close()
    frag = [p for p, _ in profile.scores if isinstance(p, FragScorePlugin)]
    assert len(frag) == 1
    assert frag[0].scorer.tasks == typical_tasks(specs)
    assert sorted((t.cpu_milli, t.gpu_milli) for t in frag[0].scorer.tasks) == [(1000, 500), (2000, 500)]
