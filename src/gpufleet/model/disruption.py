"""PodDisruptionBudgets, as much of them as the core needs to avoid futile evictions.

A budget selects running pods by the labels the model carries for a pod (its pod group,
`scheduling.x-k8s.io/pod-group`, and its queue, `gpufleet.io/queue`) with `matchLabels`
semantics: every listed label must match. It limits voluntary evictions the way Kubernetes'
disruption controller does: `disruptionsAllowed = currentHealthy - desiredHealthy`, where
desiredHealthy is `minAvailable`, or `expectedPods - maxUnavailable`.

Decisions:
- Integers only (no percentages) and no namespace: a `Placement` carries neither labels nor a
  namespace, and the simulator's workloads need neither. The live scheduler uses `LiveBudget`
  instead: the pods a real budget selects and the disruptions its status allows. The Eviction
  API answers 429 for a budget with no disruptions left anyway, and `kube.binder` waits and
  retries, so a budget the core does not know of delays, never breaks.
- `expected_pods` stands for the controller's scale (`.spec.replicas`); None = the pods the
  budget selects now, as for pods without a controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, Protocol

from gpufleet.model.errors import ModelError
from gpufleet.model.placement import Placement
from gpufleet.model.pod import PodUid

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
QUEUE_LABEL = "gpufleet.io/queue"
KNOWN_LABELS = (POD_GROUP_LABEL, QUEUE_LABEL)


def pod_labels(p: Placement) -> dict[str, str]:
    """The labels of a running pod that the model knows (its pod group's name, its queue)."""
    labels = {QUEUE_LABEL: p.queue}
    if p.pod_group is not None:
        labels[POD_GROUP_LABEL] = p.pod_group.rsplit("/", 1)[-1]
    return labels


class Budget(Protocol):
    """What defragmentation asks of a budget: which running pods it selects, and how many of
    them may be disrupted now."""

    @property
    def name(self) -> str: ...

    def selects(self, p: Placement) -> bool: ...

    def allowed(self, running: Iterable[Placement]) -> int: ...


@dataclass(frozen=True, slots=True)
class LiveBudget:
    """A PodDisruptionBudget as the live cluster has it: the pods its selector picks in its
    namespace (evaluated by the scheduler on the pods' own labels, `kube/disruption_budgets.py`)
    and `status.disruptionsAllowed`, which the disruption controller computes."""

    name: str
    pods: frozenset[PodUid]
    disruptions_allowed: int

    def selects(self, p: Placement) -> bool:
        return p.pod in self.pods

    def allowed(self, running: Iterable[Placement]) -> int:
        return self.disruptions_allowed


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget: exactly one of `min_available` and `max_unavailable` is set."""

    name: str
    match_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    min_available: int | None = None
    max_unavailable: int | None = None
    expected_pods: int | None = None

    def __post_init__(self) -> None:
        where = f"poddisruptionbudget {self.name}"
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ModelError(where, "set exactly one of minAvailable and maxUnavailable")
        for attr in ("min_available", "max_unavailable", "expected_pods"):
            value = getattr(self, attr)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ModelError(f"{where}: {attr}", f"must be a non-negative integer, got {value!r}")
        unknown = sorted(set(self.match_labels) - set(KNOWN_LABELS))
        if unknown:
            raise ModelError(f"{where}: selector", f"labels {unknown} are not modelled; known: {list(KNOWN_LABELS)}")

    def selects(self, p: Placement) -> bool:
        labels = pod_labels(p)
        return all(labels.get(k) == v for k, v in self.match_labels.items())

    def allowed(self, running: Iterable[Placement]) -> int:
        """Disruptions allowed now, given the running pods (the budget picks its own among them)."""
        healthy = sum(1 for p in running if self.selects(p))
        if self.min_available is not None:
            desired = self.min_available
        else:
            expected = healthy if self.expected_pods is None else self.expected_pods
            desired = expected - (self.max_unavailable or 0)
        return max(0, healthy - desired)
