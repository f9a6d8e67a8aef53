"""Karpenter's KWOK provider (`karpenter-kwok`, sigs.k8s.io/karpenter v1.15) on a `Cluster`, with GPU
instance types: the real Karpenter provisioning and consolidating nodes that KWOK then plays.

    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        with Karpenter(c, [nodepool("h100", [P5_48XLARGE])]) as karpenter:
            ...  # unschedulable pods get nodes; karpenter.log() is its log

What it sets up:

- the CRDs (NodePool, NodeClaim, NodeOverlay, KWOKNodeClass, CapacityBuffer) that `make kube`
  (hack/kube/build.sh) copies from the Karpenter module into `<cache>/crds/karpenter/`, beside `bin/`;
- an instance-types file (`--instance-types-file-path`) with the GPU types of `gpu_nodes.SHAPES`:
  `nvidia.com/gpu` in their resources (Karpenter copies it into each node's allocatable), and
  the GPU feature-discovery labels (`nvidia.com/gpu.product`, `.count`, `.memory`, `.present`) as
  requirements of every offering, which Karpenter puts on the nodes it launches, as AWS's
  provider does with `karpenter.k8s.aws/instance-gpu-*`. gpufleet reads a node without the agent's
  inventory annotation from those (`translate.node_gpus`), so nothing plays the agent here;
- a KWOKNodeClass and the NodePools given (`nodepool`: a single-type pool carries gpufleet's
  `gpufleet.io/node-shape` annotation, so gpufleet can plan NodeClaims from it);
- `karpenter-kwok` as a process of the cluster, with the cluster's `karpenter.kubeconfig` (an
  identity in system:masters: Karpenter is not under test), leader election off, its metrics
  and health ports free ones; ready once it has marked every NodePool Ready.

Nodes Karpenter creates carry `kwok.x-k8s.io/node: fake`, so the cluster's KWOK runs them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping, Sequence

import yaml

from gpufleet.testing.cluster.binaries import MissingBinaries, bin_dir, binary
from gpufleet.testing.cluster.cluster import Cluster, _clean_env, _free_ports
from gpufleet.testing.cluster.process import Process
from gpufleet.testing.gpu_nodes import SHAPES, ZONES, Shape

Obj = dict[str, Any]

NAME = "karpenter"
"""The process's name in the cluster (`cluster.component(NAME)`, logs/karpenter.log)."""
NODE_CLASS = "default"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SHAPE_ANNOTATION = "gpufleet.io/node-shape"
CRDS = ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh")
KUBE_RESERVED_CPU_MILLI = 100
KUBE_RESERVED_MEM_MIB = 10
"""What the KWOK provider keeps back of every instance type (its allocatable is capacity less this)."""


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One GPU instance type offered on demand in one zone."""

    name: str
    product: str
    gpus: int
    gpu_mem_mib: int
    cpu: int
    mem_gib: int
    price_per_hour: float
    zone: str = ZONES[0]

    @classmethod
    def of(cls, shape: Shape, price_per_hour: float) -> InstanceType:
        return cls(shape.name, shape.product, shape.gpus, shape.mem_mib, shape.cpu, shape.mem_gib, price_per_hour)

    @property
    def gfd_labels(self) -> dict[str, str]:
        """The labels NVIDIA's GPU feature discovery puts on such a node."""
        return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": self.product,
                "nvidia.com/gpu.count": str(self.gpus), "nvidia.com/gpu.memory": str(self.gpu_mem_mib)}

    @property
    def allocatable_cpu(self) -> str:
        return f"{self.cpu * 1000 - KUBE_RESERVED_CPU_MILLI}m"

    @property
    def allocatable_memory(self) -> str:
        return f"{self.mem_gib * 1024 - KUBE_RESERVED_MEM_MIB}Mi"

    def as_json(self) -> Obj:
        """The entry of the KWOK provider's instance-types file (`InstanceTypeOptions`)."""
        requirements = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [self.zone]}]
        requirements += [{"key": k, "operator": "In", "values": [v]} for k, v in self.gfd_labels.items()]
        return {"name": self.name, "architecture": "amd64", "operatingSystems": ["linux"],
                "offerings": [{"Price": self.price_per_hour, "Available": True, "Requirements": requirements}],
                "resources": {"cpu": str(self.cpu), "memory": f"{self.mem_gib}Gi", "pods": "110",
                              "ephemeral-storage": "1000Gi", "nvidia.com/gpu": str(self.gpus)}}

    def shape(self) -> dict[str, Any]:
        """gpufleet's `gpufleet.io/node-shape` for a NodePool of this type (what one node gives)."""
        return {"instanceType": self.name, "gpuProduct": self.product, "gpus": self.gpus,
                "gpuMemoryMiB": self.gpu_mem_mib, "cpu": self.allocatable_cpu, "memory": self.allocatable_memory,
                "pricePerHour": self.price_per_hour}


def _shape(name: str) -> Shape:
    return next(s for s in SHAPES if s.name == name)


P5_48XLARGE = InstanceType.of(_shape("p5.48xlarge"), 98.32)
"""8 x H100 80GB."""
G5_XLARGE = InstanceType.of(_shape("g5.xlarge"), 1.006)
"""1 x A10."""
G4DN_XLARGE = InstanceType.of(_shape("g4dn.xlarge"), 0.526)
"""1 x T4."""
INSTANCE_TYPES = (P5_48XLARGE, G5_XLARGE, G4DN_XLARGE)


# -- objects ----------------------------------------------------------------------------------

def crds_dir() -> Path:
    """Where `make kube` put Karpenter's CRDs: `crds/karpenter/` beside the binaries' directory."""
    where = bin_dir().parent / "crds" / "karpenter"
    if not (where / "karpenter.sh_nodeclaims.yaml").is_file():
        raise MissingBinaries(f"Karpenter's CRDs are not there: expected {where}. Run `make kube` "
                              "(hack/kube/build.sh copies them from the sigs.k8s.io/karpenter module)")
    return where


def crds() -> list[Obj]:
    return [yaml.safe_load(p.read_text()) for p in sorted(crds_dir().glob("*.yaml"))]


def node_class(name: str = NODE_CLASS, *, registration_delay_s: int = 0) -> Obj:
    spec = {"nodeRegistrationDelay": f"{registration_delay_s}s"} if registration_delay_s else {}
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name},
            "spec": spec}


def nodepool(name: str, types: Sequence[InstanceType], *, limits: Mapping[str, Any] | None = None,
             consolidate_after: str = "10s", consolidation_policy: str = "WhenEmptyOrUnderutilized",
             taints: Iterable[Mapping[str, str]] = (), labels: Mapping[str, str] | None = None,
             shape: bool = True) -> Obj:
    """A NodePool of `types`. One type: with gpufleet's shape annotation and the type's GFD labels on its
    template (`shape=False` leaves both off); several: a pool only Karpenter sizes."""
    template_labels = dict(labels or {})
    pool: Obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                 "spec": {"template": {"metadata": {"labels": template_labels},
                                       "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                                                 "name": NODE_CLASS},
                                                "requirements": [
                                                    {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                                     "values": [t.name for t in types]},
                                                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                                                     "values": ["on-demand"]}],
                                                "taints": [dict(t) for t in taints],
                                                "expireAfter": "Never"}},
                          "disruption": {"consolidationPolicy": consolidation_policy,
                                         "consolidateAfter": consolidate_after, "budgets": [{"nodes": "100%"}]}}}
    if len(types) == 1 and shape:
        template_labels.update(types[0].gfd_labels)
        pool["metadata"]["annotations"] = {SHAPE_ANNOTATION: json.dumps(types[0].shape())}
    if limits:
        pool["spec"]["limits"] = dict(limits)
    return pool


def write_instance_types(path: Path, types: Iterable[InstanceType] = INSTANCE_TYPES) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([t.as_json() for t in types], indent=1))
    return path


def install_crds(cluster: Cluster, timeout_s: float = 60) -> None:
    admin = cluster.admin
    for crd in crds():
        if admin.get("customresourcedefinitions", crd["metadata"]["name"]) is None:
            admin.create(crd)
    _wait(lambda: all(_established(cluster, name) for name in CRDS), timeout_s, "Karpenter's CRDs established")
    admin.discover()


def _established(cluster: Cluster, name: str) -> bool:
    crd = cluster.admin.get("customresourcedefinitions", name) or {}
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or ())


def ready(obj: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


# -- the process ------------------------------------------------------------------------------

class Karpenter:
    """Karpenter's KWOK provider on `cluster`: CRDs, instance types, a KWOKNodeClass, `pools`, the process."""

    def __init__(self, cluster: Cluster, pools: Sequence[Obj], *, types: Sequence[InstanceType] = INSTANCE_TYPES,
                 registration_delay_s: int = 0, log_level: str = "debug", batch_idle_s: float = 1.0) -> None:
        self.cluster, self.pools, self.types = cluster, list(pools), list(types)
        self.registration_delay_s, self.log_level, self.batch_idle_s = registration_delay_s, log_level, batch_idle_s
        self.process: Process | None = None
        self.health_port = 0

    def __enter__(self) -> Karpenter:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout_s: float = 90) -> Karpenter:
        c = self.cluster
        install_crds(c)
        c.admin.create(node_class(registration_delay_s=self.registration_delay_s))
        for pool in self.pools:
            c.admin.create(pool)
        types = write_instance_types(c.workdir / "karpenter-instance-types.json", self.types)
        metrics_port, self.health_port = _free_ports(2)
        env = {**_clean_env(), "KUBECONFIG": str(c.workdir / "karpenter.kubeconfig"),
               "DISABLE_LEADER_ELECTION": "true", "INSTANCE_TYPES_FILE_PATH": str(types),
               "METRICS_PORT": str(metrics_port), "HEALTH_PROBE_PORT": str(self.health_port),
               "LOG_LEVEL": self.log_level, "BATCH_IDLE_DURATION": f"{self.batch_idle_s}s",
               "CPU_REQUESTS": "1000", "DISABLE_CLUSTER_STATE_OBSERVABILITY": "false"}
        self.process = c.add_process(NAME, [str(binary("karpenter-kwok"))], env=env)
        # /readyz answers once the manager runs; a NodePool Karpenter marked Ready shows its controllers work.
        names = [p["metadata"]["name"] for p in self.pools]
        self.process.wait_until(lambda: all(ready(c.admin.get("nodepools", n) or {}) for n in names), timeout_s,
                                f"ready (NodePools {', '.join(names)} Ready)")
        return self

    def stop(self) -> None:
        """Stop Karpenter before the cluster (it would otherwise retry against a stopped API server)."""
        if self.process is not None:
            self.process.stop()

    def log(self) -> str:
        return (self.cluster.logs / f"{NAME}.log").read_text(errors="replace")

    def nodeclaims(self) -> list[Obj]:
        return self.cluster.admin.list("nodeclaims")

    def nodes(self) -> list[Obj]:
        """The nodes Karpenter launched (those of a NodePool)."""
        return [n for n in self.cluster.admin.list("nodes")
                if NODEPOOL_LABEL in ((n.get("metadata") or {}).get("labels") or {})]


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)
