"""YAML scenarios: what each key builds, each kind of mistake located by file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest

import gpufleet.sim
from gpufleet.model import GPU_PRODUCT_LABEL, GpuKind, ModelError, Operator, TaintEffect, TolerationOperator
from gpufleet.sim.traces import scenario
from gpufleet.sim.workload import Workload

WriteFile = Callable[[str, str], Path]

NODES = """\
nodes:
  - {name: n, cpu: "8", memory: 32Gi}
"""


def load(write_file: WriteFile, text: str) -> Workload:
    return scenario.load(write_file("s.yaml", textwrap.dedent(text)))


def job_yaml(body: str) -> str:
    """A scenario with one plain node and one job whose keys are `body` (indented under the job)."""
    return NODES + "jobs:\n  - name: j\n" + textwrap.indent(textwrap.dedent(body), "    ")


def test_node_group_expands_to_named_gpu_nodes(write_file: WriteFile) -> None:
    w = load(write_file, """
        nodes:
          - name: a100
            count: 2
            cpu: 500m
            memory: 1Ti
            maxPods: 64
            labels: {rack: "1"}
            taints: [{key: gpu, value: "yes", effect: NoExecute}, {key: spot}]
            gpus: {model: NVIDIA-A100-SXM4-80GB, count: 4, memory: 80Gi, nvlinkDomains: 2, numaNodes: 2}
        """)
    assert [n.name for n in w.nodes] == ["a100-0", "a100-1"]
    node = w.nodes[1]
    assert (node.cpu_milli, node.mem_mib, node.max_pods) == (500, 1024 * 1024, 64)
    assert dict(node.labels) == {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB", "rack": "1"}
    assert [(t.key, t.value, t.effect) for t in node.taints] == [("gpu", "yes", TaintEffect.NO_EXECUTE),
                                                                ("spot", "", TaintEffect.NO_SCHEDULE)]
    assert [(g.uuid, g.mem_mib, g.nvlink_domain, g.numa_node) for g in node.gpus] == [
        ("GPU-a100-1-0", 81920, "nvl0", 0), ("GPU-a100-1-1", 81920, "nvl0", 0),
        ("GPU-a100-1-2", 81920, "nvl1", 1), ("GPU-a100-1-3", 81920, "nvl1", 1)]
    assert w.name == "s" and w.jobs == ()


def test_mig_layouts_apply_to_all_gpus_or_one_index(write_file: WriteFile) -> None:
    (node,) = load(write_file, """
        nodes:
          - name: h
            cpu: "8"
            memory: 64Gi
            gpus:
              model: NVIDIA-H100-80GB-HBM3
              count: 2
              memory: 80Gi
              mig: {all: [3g.40gb, 3g.40gb], 1: [7g.80gb]}
        """).nodes
    assert [g.mig_slices for g in node.gpus] == [("3g.40gb", "3g.40gb"), ("7g.80gb",)]
    assert node.gpus[0].nvlink_domain is None


@pytest.mark.parametrize("resources, cpu, mem, kind, count, milli, gpu_mem, profile", [
    pytest.param("requests: {cpu: 500m, memory: 4Gi}", 500, 4096, GpuKind.NONE, 0, 0, 0, None,
                 id="cpu and memory quantities parse to milli-cores and MiB"),
    pytest.param("limits: {cpu: 0.5, memory: 1G, nvidia.com/gpu: 2}", 500, 954, GpuKind.WHOLE, 2, 1000, 0, None,
                 id="nvidia.com/gpu asks for whole GPUs and limits stand in for requests"),
    pytest.param("requests: {cpu: '2'}\nlimits: {cpu: '4', gpufleet.io/gpu-milli: 300, gpufleet.io/gpu-memory: 2048}",
                 2000, 0, GpuKind.FRACTION, 1, 300, 2048, None,
                 id="gpu-milli asks for a fraction capped by gpu-memory in MiB and requests win over limits"),
    pytest.param("limits: {nvidia.com/mig-1g.10gb: 2}", 0, 0, GpuKind.MIG, 2, 0, 0, "1g.10gb",
                 id="a mixed-strategy MIG resource asks for MIG slices"),
    pytest.param("requests: {nvidia.com/gpu: 1}\nlimits: {nvidia.com/gpu: 1}", 0, 0, GpuKind.WHOLE, 1, 1000, 0, None,
                 id="equal requests and limits of a GPU resource are accepted"),
])
def test_resources_map_to_pod_requests(write_file: WriteFile, resources: str, cpu: int, mem: int, kind: GpuKind,
                                       count: int, milli: int, gpu_mem: int, profile: str | None) -> None:
    (job,) = load(write_file, job_yaml("resources:\n" + textwrap.indent(resources, "  "))).jobs
    (pod,) = job.pods
    assert (pod.cpu_milli, pod.mem_mib) == (cpu, mem)
    assert (pod.gpu.kind, pod.gpu.count, pod.gpu.milli, pod.gpu.mem_mib, pod.gpu.mig_profile) == (
        kind, count, milli, gpu_mem, profile)


def test_placement_constraints_and_identity(write_file: WriteFile) -> None:
    (job,) = load(write_file, job_yaml("""
        namespace: ml
        queue: team-a
        priority: -5
        preemptible: false
        arrival: 12.5
        duration: 60
        nodeSelector: {rack: 2}
        tolerations: [{key: gpu, operator: Exists}, {operator: Exists}]
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [A, B]}]
                - matchExpressions:
                    - {key: nvidia.com/gpu.product, operator: In, values: [C]}
                    - {key: cores, operator: Gt, values: [8]}
        """)).jobs
    (pod,) = job.pods
    assert (pod.uid, pod.namespace, pod.queue, pod.priority, pod.preemptible) == ("ml/j", "ml", "team-a", -5, False)
    assert (job.arrival_s, job.duration_s, pod.created_s, job.source) == (12.5, 60.0, 12.5, "s.yaml:4")
    assert dict(pod.node_selector) == {"rack": "2"}
    assert [(t.key, t.operator) for t in pod.tolerations] == [("gpu", TolerationOperator.EXISTS),
                                                             ("", TolerationOperator.EXISTS)]
    assert [[(r.key, r.operator, r.values) for r in t.requirements] for t in pod.affinity] == [
        [(GPU_PRODUCT_LABEL, Operator.IN, ("A", "B"))],
        [(GPU_PRODUCT_LABEL, Operator.IN, ("C",)), ("cores", Operator.GT, ("8",))]]
    assert pod.gpu_models == {"A", "B", "C"}


def test_affinity_leaving_a_term_without_a_model_allows_any_model(write_file: WriteFile) -> None:
    (job,) = load(write_file, job_yaml("""
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [A]}]
                - matchExpressions: [{key: rack, operator: Exists}]
        """)).jobs
    assert job.pods[0].gpu_models == frozenset()


@pytest.mark.parametrize("gang, jobs, pods_per_job, min_member", [
    pytest.param("gang: true", 1, 3, 3, id="a gang of all replicas is one job with a PodGroup"),
    pytest.param("gang: {minMember: 2}", 1, 3, 2, id="minMember sets how many replicas must start together"),
    pytest.param("gang: false", 3, 1, None, id="replicas without a gang are independent jobs"),
])
def test_replicas_and_gangs(write_file: WriteFile, gang: str, jobs: int, pods_per_job: int,
                            min_member: int | None) -> None:
    w = load(write_file, job_yaml(f"replicas: 3\n{gang}\n"))
    assert [len(j.pods) for j in w.jobs] == [pods_per_job] * jobs
    assert [p.name for j in w.jobs for p in j.pods] == ["j-0", "j-1", "j-2"]
    if min_member is None:
        assert all(j.group is None and j.pods[0].pod_group is None for j in w.jobs)
    else:
        (job,) = w.jobs
        assert job.group is not None and job.group.min_member == min_member
        assert {p.pod_group for p in job.pods} == {"default/j"}


def test_jobs_are_ordered_by_arrival_and_null_duration_never_ends(write_file: WriteFile) -> None:
    w = load(write_file, NODES + """\
jobs:
  - {name: late, arrival: 9}
  - {name: early, arrival: 1, duration: null}
  - {name: also-late, arrival: 9}
""")
    assert [(j.pods[0].name, j.duration_s) for j in w.jobs] == [("early", None), ("late", None), ("also-late", None)]


BAD = [
    ("nodes: []\nextra: 1\n", 2, "extra", "unknown key", "an unknown top-level key"),
    ("jobs: []\n", 1, "(document)", "missing required key 'nodes'", "a scenario without nodes"),
    ("nodes: []\n", 1, "nodes", "at least one node", "an empty node list"),
    ("nodes:\n  - {name: n, cpus: 8, memory: 1Gi}\n", 2, "nodes[0].cpus", "unknown key", "a misspelt node key"),
    ("nodes:\n  - {name: n, memory: 1Gi}\n", 2, "nodes[0]", "missing required key 'cpu'", "a node without cpu"),
    ("nodes:\n  - {name: n, cpu: 1.5m, memory: 1Gi}\n", 2, "nodes[0].cpu", "whole number", "a fractional milli-core"),
    ("nodes:\n  - {name: n, cpu: 1, memory: lots}\n", 2, "nodes[0].memory", "not a quantity", "a memory word"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    gpus: {model: T4, count: 0, memory: 16Gi}\n", 5,
     "nodes[0].gpus.count", "at least 1", "a GPU count of zero"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    gpus:\n      model: NVIDIA-H100-80GB-HBM3\n"
     "      count: 1\n      memory: 80Gi\n      mig: {all: [7g.80gb, 1g.10gb]}\n", 2, "nodes[0]",
     "MIG layout", "a MIG layout larger than the GPU"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    gpus:\n      model: NVIDIA-H100-80GB-HBM3\n"
     "      count: 1\n      memory: 80Gi\n      mig: {3: [7g.80gb]}\n", 9, "nodes[0].gpus.mig.3",
     "GPU index 0..0", "a MIG layout for a GPU that does not exist"),
    ("nodes:\n  - {name: n, count: 2, cpu: 1, memory: 1Gi}\n  - {name: n-1, cpu: 1, memory: 1Gi}\n", 3,
     "nodes[1]", "duplicate node name 'n-1'", "a node name a group already took"),
    ("nodes:\n  - {name: n, cpu: 1, cpu: 2, memory: 1Gi}\n", 2, "nodes[0].cpu", "duplicate key", "a duplicated key"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    taints: [{key: k, effect: Sometimes}]\n", 5,
     "nodes[0].taints[0].effect", "unknown value 'Sometimes'", "an unknown taint effect"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    labels: {nvidia.com/gpu.product: A}\n"
     "    gpus: {model: B, count: 1, memory: 1Gi}\n", 5, "nodes[0].labels", "must match", "a product label that "
     "contradicts the GPU model"),
    ("nodes:\n  - {name: n, count: 10000000000, cpu: 1, memory: 1Gi}\n", 2, "nodes[0].count",
     "must be at most 100,000, got 10,000,000,000", "a node group too large to build"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    gpus: {model: T4, count: 640, memory: 16Gi}\n", 5,
     "nodes[0].gpus.count", "at most 64", "more GPUs than any node has"),
    ("nodes:\n  - name: n\n    cpu: 1\n    memory: 1Gi\n    gpus: {model: T4, count: 4, memory: 16Gi, numaNodes: 8}\n",
     5, "nodes[0].gpus.numaNodes", "at most 4", "more NUMA nodes than GPUs"),
    ("nodes: [\n", 2, "", "invalid YAML", "a YAML syntax error"),
    ("", 1, "", "no YAML document", "an empty file"),
]
BAD_JOBS = [
    ("resources: {limits: {nvidia.com/gpus: 1}}", 5, "jobs[0].resources.limits.nvidia.com/gpus",
     "unknown resource", "an unknown resource name"),
    ("resources: {limits: {nvidia.com/gpu: 1, gpufleet.io/gpu-milli: 500}}", 5,
     "jobs[0].resources.limits.gpufleet.io/gpu-milli", "one kind of GPU", "two kinds of GPU request"),
    ("resources: {limits: {nvidia.com/gpu: 1, gpufleet.io/gpu-memory: 1024}}", 5,
     "jobs[0].resources.limits.gpufleet.io/gpu-memory", "only to a", "a GPU-memory cap on whole GPUs"),
    ("resources: {limits: {gpufleet.io/gpu-milli: 500, gpufleet.io/gpu-memory: 4Gi}}", 5,
     "jobs[0].resources.limits.gpufleet.io/gpu-memory", "counts MiB", "a GPU-memory cap written in bytes"),
    ("resources: {limits: {gpufleet.io/gpu-milli: 1000}}", 5, "jobs[0].resources.limits.gpufleet.io/gpu-milli",
     "use nvidia.com/gpu", "a fraction of a whole GPU"),
    ("resources: {limits: {nvidia.com/gpu: 1.5}}", 5, "jobs[0].resources.limits.nvidia.com/gpu",
     "whole number", "half a GPU"),
    ("resources:\n  requests: {nvidia.com/gpu: 1}\n  limits: {nvidia.com/gpu: 2}", 6,
     "jobs[0].resources.requests.nvidia.com/gpu", "must be equal", "GPU requests that differ from limits"),
    ("replicas: 2\ngang: {minMember: 3}", 6, "jobs[0].gang.minMember", "exceeds replicas", "minMember over replicas"),
    ("arrival: -1", 5, "jobs[0].arrival", "non-negative", "a negative arrival"),
    ("duration: 0", 5, "jobs[0].duration", "positive", "a zero duration"),
    ("duration: soon", 5, "jobs[0].duration", "seconds", "a duration that is not a number"),
    ("priority: high", 5, "jobs[0].priority", "whole number", "a priority that is not a number"),
    ("priority: 3000000000", 5, "jobs[0].priority", "at most 2,147,483,647", "a priority beyond int32"),
    ("replicas: 100000000", 5, "jobs[0].replicas", "at most 100,000", "more replicas than can be built"),
    ("tolerations: [{operator: Maybe}]", 5, "jobs[0].tolerations[0].operator", "unknown value", "a bad operator"),
    ("affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
     "[{matchExpressions: [{key: k, operator: In}]}]}}}", 5,
     "jobs[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0]", "needs at least one value", "an In requirement without values"),
    ("resources: {limits: {nvidia.com/mig-1g.10gb: 1}}\naffinity: {nodeAffinity: "
     "{requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
     "[{key: nvidia.com/gpu.product, operator: In, values: [Tesla-T4]}]}]}}}", 4, "jobs[0].name",
     "no allowed GPU model", "a MIG slice on a model without MIG"),
    ("replicas: 2\n- oops", 6, "", "invalid YAML", "a list item inside a mapping"),
]


@pytest.mark.parametrize("text, line, key, problem",
                         [pytest.param(t, n, k, p, id=f"{i} is an error naming line and key") for t, n, k, p, i in BAD]
                         + [pytest.param(job_yaml(t), n, k, p, id=f"{i} is an error naming line and key")
                            for t, n, k, p, i in BAD_JOBS])
def test_mistakes_name_file_line_and_key(write_file: WriteFile, text: str, line: int, key: str,
                                         problem: str) -> None:
    path = write_file("s.yaml", text)
    with pytest.raises(ModelError) as caught:
        scenario.load(path)
    assert str(caught.value).startswith(f"{path}:{line}: {key}".rstrip()), str(caught.value)
    assert problem in str(caught.value)


def test_duplicate_job_names_are_an_error(write_file: WriteFile) -> None:
    path = write_file("s.yaml", NODES + "jobs:\n  - {name: a, replicas: 2}\n  - {name: a-1}\n")
    with pytest.raises(ModelError, match=r"s.yaml:5: jobs\[1\]: duplicate pod name 'default/a-1'"):
        scenario.load(path)


EXAMPLES = sorted((Path(gpufleet.sim.__file__).parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[f"the shipped example {p.name} loads" for p in EXAMPLES])
def test_shipped_examples_load(path: Path) -> None:
    w = scenario.load(path)
    assert w.nodes and w.jobs and w.description
    assert w.name == path.stem


def test_examples_are_shipped() -> None:
    assert {p.name for p in EXAMPLES} == {"mixed-sharing.yaml", "gangs-and-queues.yaml", "fragmentation.yaml"}


@pytest.mark.parametrize("text, claims", [("", False), ("requestsAs: extendedResources\n", False),
                                          ("requestsAs: claims\n", True)],
                         ids=["without requestsAs GPUs are extended resources", "extendedResources is the default",
                              "claims makes the workload ask through DRA claims"])
def test_requests_as_says_whether_gpus_are_asked_through_claims(write_file: WriteFile, text: str,
                                                                 claims: bool) -> None:
    w = load(write_file, text + job_yaml("resources: {limits: {nvidia.com/gpu: 1}}"))
    assert w.claims is claims
    assert w.jobs[0].pods[0].gpu.count == 1  # the pods keep what they ask; the replay makes the claims


def test_an_unknown_requests_as_names_file_line_and_key(write_file: WriteFile) -> None:
    path = write_file("s.yaml", "requestsAs: claim\n" + NODES)
    with pytest.raises(ModelError, match=r"s.yaml:1: requestsAs: expected one of extendedResources, claims, "
                                         r"got 'claim'"):
        scenario.load(path)


def test_a_gang_carries_kai_schedulers_topology_annotations(write_file: WriteFile) -> None:
    w = load(write_file, job_yaml("""\
        replicas: 2
        gang:
          annotations:
            kai.scheduler/topology-required-placement: topology.gpufleet.io/rack
            kai.scheduler/topology-preferred-placement: kubernetes.io/hostname
        """))
    (job,) = w.jobs
    assert job.group is not None and job.group.min_member == 2
    assert (job.group.required_topology, job.group.preferred_topology) == ("topology.gpufleet.io/rack",
                                                                           "kubernetes.io/hostname")


def test_an_unknown_gang_annotation_is_an_error_naming_it(write_file: WriteFile) -> None:
    with pytest.raises(ModelError, match="kai.scheduler/topology-required"):
        load(write_file, job_yaml("replicas: 2\ngang: {annotations: {kai.scheduler/topology-required: rack}}\n"))
