"""Pods as the scheduler sees them: requests in base units plus placement constraints.

Every constructor validates its input and raises `ModelError` naming the pod and field,
so a bad request is caught where it enters (trace reader, API translation, builder),
never deep inside the scheduling cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Mapping, NewType

from gpufleet.model import mig
from gpufleet.model.errors import ModelError
from gpufleet.model.node import TaintEffect

PodUid = NewType("PodUid", str)

GPU_MILLI = 1000
"""One whole GPU in GPU-milli."""


class GpuKind(str, Enum):
    NONE = "none"
    WHOLE = "whole"
    FRACTION = "fraction"
    MIG = "mig"


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of GPUs: nothing, N whole GPUs, a fraction of one, or MIG slices.

    `milli` is the per-GPU share: 1000 for whole GPUs, 1..999 for a fraction.
    `mem_mib` is an optional GPU-memory request for a fraction (0 = not requested).
    """

    kind: GpuKind = GpuKind.NONE
    count: int = 0
    milli: int = 0
    mem_mib: int = 0
    mig_profile: str | None = None

    @property
    def total_milli(self) -> int:
        return self.count * self.milli if self.kind in (GpuKind.WHOLE, GpuKind.FRACTION) else 0


NO_GPU = GpuRequest()


def whole_gpus(n: int, where: str = "pod") -> GpuRequest:
    _positive_int(n, f"{where}: nvidia.com/gpu")
    return GpuRequest(GpuKind.WHOLE, count=n, milli=GPU_MILLI)


def gpu_fraction(milli: int, mem_mib: int = 0, *, gpus: int = 1, where: str = "pod") -> GpuRequest:
    """A share of one GPU. `gpus` exists only to reject "a fraction of several GPUs" clearly."""
    field_name = f"{where}: gpufleet.io/gpu-milli"
    if isinstance(milli, bool) or not isinstance(milli, int):
        raise ModelError(field_name, f"must be a whole number of GPU-milli, got {milli!r}")
    if not 0 < milli < GPU_MILLI:
        raise ModelError(field_name, f"a GPU fraction must be 1..999 milli, got {milli} "
                                     "(use nvidia.com/gpu for whole GPUs)")
    if gpus != 1:
        raise ModelError(field_name, f"a fraction applies to exactly one GPU, but {gpus} GPUs were asked for")
    if isinstance(mem_mib, bool) or not isinstance(mem_mib, int) or mem_mib < 0:
        raise ModelError(f"{where}: gpufleet.io/gpu-memory", f"must be a non-negative MiB count, got {mem_mib!r}")
    return GpuRequest(GpuKind.FRACTION, count=1, milli=milli, mem_mib=mem_mib)


def mig_slices(profile: str, n: int = 1, *, gpu_model: str | None = None, where: str = "pod") -> GpuRequest:
    mig.check_profile(profile, gpu_model, f"{where}: nvidia.com/mig-{profile}")
    _positive_int(n, f"{where}: nvidia.com/mig-{profile}")
    return GpuRequest(GpuKind.MIG, count=n, mig_profile=profile)


def _positive_int(n: object, where: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ModelError(where, f"must be a whole number, got {n!r}")
    if n < 1:
        raise ModelError(where, f"must be at least 1, got {n}")


class Operator(str, Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"node affinity requirement on {self.key!r}"
        if self.operator in (Operator.IN, Operator.NOT_IN) and not self.values:
            raise ModelError(where, f"{self.operator.value} needs at least one value")
        if self.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and self.values:
            raise ModelError(where, f"{self.operator.value} takes no values")
        if self.operator in (Operator.GT, Operator.LT):
            if len(self.values) != 1:
                raise ModelError(where, f"{self.operator.value} needs exactly one value")
            try:
                int(self.values[0])
            except ValueError:
                raise ModelError(where, f"{self.operator.value} needs an integer, got {self.values[0]!r}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator is Operator.IN:
            return present and value in self.values
        if self.operator is Operator.NOT_IN:
            return not present or value not in self.values
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return present and (number > bound if self.operator is Operator.GT else number < bound)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """All requirements must match (AND). A pod's terms are ORed, as in Kubernetes."""

    requirements: tuple[NodeSelectorRequirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


class TolerationOperator(str, Enum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True, slots=True)
class Toleration:
    """Kubernetes toleration. An empty key with Exists tolerates everything; effect None = all effects."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None


@dataclass(frozen=True, slots=True)
class PodSpec:
    """A pod waiting to be placed. Resources in base units (milli-CPU, MiB)."""

    uid: PodUid
    name: str
    namespace: str = "default"
    cpu_milli: int = 0
    mem_mib: int = 0
    gpu: GpuRequest = NO_GPU
    gpu_models: frozenset[str] = frozenset()
    """Allowed GPU models (from node affinity on nvidia.com/gpu.product); empty = any."""
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    affinity: tuple[NodeSelectorTerm, ...] = ()
    """Required node affinity terms, ORed; empty = no constraint."""
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    queue: str = "default"
    pod_group: str | None = None
    preemptible: bool = True
    created_s: float = 0.0
    claims: tuple[str, ...] = ()
    """The pod's DRA ResourceClaims, `namespace/name` (a template's claim once the controller made it)."""

    def __post_init__(self) -> None:
        where = f"pod {self.namespace}/{self.name}"
        for attr in ("cpu_milli", "mem_mib"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ModelError(f"{where}: {attr}", f"must be a whole number, got {value!r}")
            if value < 0:
                raise ModelError(f"{where}: {attr}", f"must not be negative, got {value}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ModelError(f"{where}: priority", f"must be an integer, got {self.priority!r}")
        if self.gpu.kind is GpuKind.MIG and self.gpu.mig_profile is not None:
            self._check_mig_models(where, self.gpu.mig_profile)

    def _check_mig_models(self, where: str, profile: str) -> None:
        if not self.gpu_models:
            return
        if not any(profile in mig.profiles_for(m) for m in self.gpu_models):
            raise ModelError(f"{where}: nvidia.com/mig-{profile}",
                             f"no allowed GPU model ({', '.join(sorted(self.gpu_models))}) has this MIG profile")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
"""KAI-Scheduler's name of the Topology object a gang's levels come from; read for compatibility
(gpufleet's levels are the profile's `topology.levels`), not acted on."""
REQUIRED_TOPOLOGY_ANNOTATION = "kai.scheduler/topology-required-placement"
"""On a PodGroup: a node label key (a topology level); every member runs in one domain of it."""
PREFERRED_TOPOLOGY_ANNOTATION = "kai.scheduler/topology-preferred-placement"
"""On a PodGroup: a node label key; members go into one domain of it when they fit, else of the
next level up, else anywhere."""


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A gang (scheduler-plugins PodGroup): at least `min_member` pods run together or none do."""

    name: str
    min_member: int
    namespace: str = "default"
    max_member: int | None = None
    """Elastic gangs: members beyond `min_member` (up to this many in all) run when they fit
    and are the first victims of preemption. None = as many as the job creates."""
    required_topology: str | None = None
    """`kai.scheduler/topology-required-placement`: the level (node label key) all members run
    inside one domain of, or the gang waits. Checked against the profile's levels when placed,
    so a level the profile does not list makes the gang wait with a reason, not a crash."""
    preferred_topology: str | None = None
    """`kai.scheduler/topology-preferred-placement`: the level tried first; None = the profile's
    `topology.gangDefault`."""

    def __post_init__(self) -> None:
        if isinstance(self.min_member, bool) or not isinstance(self.min_member, int) or self.min_member < 1:
            raise ModelError(f"podgroup {self.namespace}/{self.name}: minMember",
                             f"must be at least 1, got {self.min_member!r}")
        if self.max_member is not None and (isinstance(self.max_member, bool) or not isinstance(self.max_member, int)
                                            or self.max_member < self.min_member):
            raise ModelError(f"podgroup {self.namespace}/{self.name}: maxMember",
                             f"must be a whole number >= minMember ({self.min_member}), got {self.max_member!r}")
        for key, value in ((REQUIRED_TOPOLOGY_ANNOTATION, self.required_topology),
                           (PREFERRED_TOPOLOGY_ANNOTATION, self.preferred_topology)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ModelError(f"podgroup {self.namespace}/{self.name}: {key}",
                                 f"must be a node label key naming a topology level, got {value!r}")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
