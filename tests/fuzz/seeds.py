"""Valid inputs for each fuzz target: what the Hypothesis strategies mutate and atheris starts from.

Trace rows come from the real traces when `GPUFLEET_TRACE_DIR` names them (their first rows,
read at run time: the project commits no trace file), else from a few rows written here in
the same format. YAML seeds are the files gpufleet ships (profiles, scenarios, the agent's
config), so a change to them changes what is fuzzed.
"""

from __future__ import annotations

import json
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

OPENB_NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,64000,262144,2,P100
node-1,96000,786432,8,V100M32
node-2,32000,131072,0,
"""
OPENB_PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-0,12000,16384,1,1000,,LS,Running,0,12537496,0
pod-1,6000,12288,1,460,V100M16|V100M32,BE,Succeeded,427061,12902960,427061
pod-2,4000,8192,0,0,,Burstable,Pending,500,,
pod-3,8000,16384,2,1000,T4,Guaranteed,Failed,600,700,650
"""
OPENB_MULTIGPU = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
pod-0,12000,16384,8,1000
pod-1,6000,12288,1,460
"""
PHILLY_TRACE = ("ResNet-18 (batch size 16)\tpython3 main.py\t--num_steps\t1\t1000\t0.000000\t1\n"
                "ResNet-18 (batch size 16)\tpython3 main.py\t--num_steps\t1\t50000\t12.500000\t4\n"
                "LM (batch size 5)\tpython3 train.py\t-n\t0\t700\t30.000000\t1\n")
PHILLY_THROUGHPUTS = {"v100": {"('ResNet-18 (batch size 16)', 1)": {"null": 10.0},
                               "('ResNet-18 (batch size 16)', 4)": {"null": 35.0}}}
PHILLY_SPEC = {"philly": ["500:0:0", "16:8:8"]}


def _trace_dir() -> Path | None:
    from gpufleet.sim.traces import TraceDirError, trace_dir
    try:
        return trace_dir()
    except TraceDirError:
        return None


def _head(path: Path, lines: int) -> bytes:
    with path.open("rb") as f:
        return b"".join(islice(f, lines))


def openb() -> list[bytes]:
    found = [OPENB_NODES.encode(), OPENB_PODS.encode(), OPENB_MULTIGPU.encode()]
    root = _trace_dir()
    if root is not None:
        folder = root / "alibaba-gpu-v2023-openb"
        found += [_head(p, 40) for p in sorted(folder.glob("openb_*.csv"))[:4]]
    return found


def philly_trace() -> list[bytes]:
    found = [PHILLY_TRACE.encode()]
    root = _trace_dir()
    if root is not None:
        found += [_head(p, 20) for p in sorted((root / "gavel-philly-derived" / "msr-seed0").glob("*.trace"))[:3]]
    return found


def philly_json() -> list[bytes]:
    found = [json.dumps(PHILLY_THROUGHPUTS).encode(), json.dumps(PHILLY_SPEC).encode()]
    root = _trace_dir()
    if root is not None:
        found += [p.read_bytes() for p in sorted((root / "gavel-philly-derived").glob("cluster_specs*.json"))]
    return found


def _package_yaml(package: str) -> list[bytes]:
    folder = resources.files(package)
    return [p.read_bytes() for p in sorted(folder.iterdir(), key=lambda p: p.name) if p.name.endswith(".yaml")]


def scenarios() -> list[bytes]:
    return _package_yaml("gpufleet.sim.scenarios")


def profiles() -> list[bytes]:
    return _package_yaml("gpufleet.framework.profiles") + [(ROOT / "deploy/scheduler/profile.yaml").read_bytes()]


AGENT_CONFIGS = [
    """version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: index
gpufleet:
  fractions: true
  health: {ignoredXids: [13, 31], recoverableXids: [48], quietPeriodS: 60, taintEffect: NoSchedule}
  metricsPort: 0
  mps: {manageDaemon: false}
""",
    """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - {name: nvidia.com/gpu, replicas: 4}
""",
    """version: v1
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 10
""",
]


def agent_configs() -> list[bytes]:
    return [(ROOT / "deploy/agent/config.yaml").read_bytes()] + [c.encode() for c in AGENT_CONFIGS]


def api_objects_data() -> list[dict[str, Any]]:
    """A pending and a bound pod, a node with and one without the agent's inventory, a Queue, a PodGroup."""
    from gpufleet.model import annotations as ann
    inventory = ann.encode_inventory((
        ann.InventoryGpu("GPU-0", "NVIDIA-A100-SXM4-40GB", 40960, 0, 0, "d0", True, ("3g.20gb", "1g.5gb"),
                         ("MIG-0a", "MIG-0b")),
        ann.InventoryGpu("GPU-1", "NVIDIA-A100-SXM4-40GB", 40960, 1, 0, "d0"),
    ))
    node = {"kind": "Node", "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                                         "annotations": {ann.INVENTORY_ANNOTATION: inventory}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "2"}}}
    plain_node = {"kind": "Node", "metadata": {"name": "gpu-2", "labels": {"nvidia.com/gpu.product": "Tesla-T4",
                                                                          "nvidia.com/gpu.memory": "15360"}},
                  "spec": {"unschedulable": True},
                  "status": {"capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}}
    container = {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "4Gi"},
                                            "limits": {"nvidia.com/gpu": "1"}}}
    pending = {"kind": "Pod", "metadata": {
        "name": "train-0", "namespace": "team-a", "uid": "u-1", "creationTimestamp": "2026-11-26T10:00:00Z",
        "labels": {"gpufleet.io/queue": "team-a", "scheduling.x-k8s.io/pod-group": "train"},
        "annotations": {"gpufleet.io/preemptible": "false"}},
        "spec": {"schedulerName": "gpufleet", "priority": 100, "containers": [container],
                 "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
                 "nodeSelector": {"pool": "a"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                     {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                            "values": ["NVIDIA-A100-SXM4-40GB"]}]}]}}}}}
    assignment = ann.encode_assignment(ann.GpuAssignment("gpu-1", ("GPU-1",), 1000, 0, ()))
    bound = {"kind": "Pod", "metadata": {"name": "infer", "namespace": "team-b",
                                         "annotations": {ann.ASSIGNMENT_ANNOTATION: assignment}},
             "spec": {"nodeName": "gpu-1", "containers": [
                 {"name": "c", "resources": {"limits": {"gpufleet.io/gpu-milli": "250", "gpufleet.io/gpu-memory": "4096"}}}]},
             "status": {"startTime": "2026-11-26T10:05:00Z"}, "node": node}
    mig = {"kind": "Pod", "metadata": {"name": "mig", "namespace": "team-b", "annotations": {
        ann.ASSIGNMENT_ANNOTATION: ann.encode_assignment(ann.GpuAssignment("gpu-1", mig=(ann.MigSliceRef("GPU-0", 1),)))}},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.5gb": 1}}}]},
        "node": node}
    queue = {"kind": "Queue", "metadata": {"name": "team-a"}, "spec": {
        "parent": "org", "weight": 2, "borrow": False, "guaranteed": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 4},
        "limit": {"nvidia.com/gpu": "8"}, "gpuModels": [{"model": "H100", "guaranteed": 2, "limit": "4"}]}}
    group = {"kind": "PodGroup", "metadata": {"name": "train", "namespace": "team-a"},
             "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}}
    return [pending, bound, mig, node, plain_node, queue, group]


def api_objects() -> list[bytes]:
    return [json.dumps(o).encode() for o in api_objects_data()]


def annotation_texts() -> list[bytes]:
    from gpufleet.model import annotations as ann
    from gpufleet.model import assignment_auth as auth
    ring = auth.KeyRing({"k1": b"k" * 32}, "k1")
    objects = api_objects_data()
    found = [objects[3]["metadata"]["annotations"][ann.INVENTORY_ANNOTATION].encode()]
    for pod in objects[1:3]:
        text = pod["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION]
        found.append(f"{text}\x00{auth.sign(ring, 'uid', 'ns/pod', 'node-1', text)}".encode())
    return found


def kubelet() -> list[bytes]:
    """Requests for the first few plans: byte 0 picks plan (>> 1) and call (& 1), as `check_kubelet_bytes` reads it."""
    from gpufleet.agent.v1beta1 import api_pb2
    from tests.fuzz.targets import agent_plans
    found = []
    for i, (plan, _, _) in enumerate(agent_plans()[:8]):
        ids = list(plan.by_id)[:4]
        preferred = api_pb2.PreferredAllocationRequest()
        preferred.container_requests.add(available_deviceIDs=ids, must_include_deviceIDs=ids[:1], allocation_size=2)
        allocate = api_pb2.AllocateRequest()
        allocate.container_requests.add(devices_ids=ids[:2])
        found += [bytes([i << 1 | 1]) + preferred.SerializeToString(), bytes([i << 1]) + allocate.SerializeToString()]
    return found


def dashboard() -> list[bytes]:
    return [f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            for path in ("/", "/api/fleet", "/api/fleet?frame=1", "/api/fleet?frame=x&frame=2", "/api/frames",
                         "/healthz", "/app.js", "/api/stream", "/nope")] + [b"HEAD / HTTP/1.0\r\n\r\n",
                                                                            b"POST /api/fleet HTTP/1.1\r\n\r\n"]


def yaml_documents(texts: list[bytes]) -> list[Any]:
    """The seeds as Python data, for the strategies that mutate a value and dump the document again."""
    return [yaml.safe_load(t) for t in texts]
