"""The plugin contract: one Protocol per extension point, named as in kube-scheduler.

Unlike kube-scheduler, `filter` and `score` see *all* candidate nodes at once as NumPy
arrays (the columnar `Cluster` and `Usage`), so a Python scheduler can evaluate 5,000 nodes
per pod in microseconds. A plugin implements any subset of the Protocols; the profile
classifies it with `isinstance` when it is built.

Plugins never mutate `Usage`; the core does that when it places a pod.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpufleet.framework.cycle_state import CycleState
from gpufleet.framework.status import Status
from gpufleet.model import Cluster, PodSpec, Usage

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class View(Protocol):
    """What plugins read: the static cluster and the cycle's current (tentative) usage."""

    @property
    def cluster(self) -> Cluster: ...

    @property
    def usage(self) -> Usage: ...


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodSpec, view: View) -> Status:
        """Reject a pod before any node is looked at (e.g. a request no node type can serve).

        Returns SUCCESS, or UNRESOLVABLE/UNSCHEDULABLE with reasons. No side effects
        except writing this plugin's keys into `state`.
        """
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodSpec, view: View) -> BoolArray | None:
        """Which nodes can host `pod`: a boolean array over all nodes, or None for "all".

        Must be cheap: it runs for every pod. Static parts (labels, taints) should be
        cached in `state` keyed by the pod's constraint key.
        """
        ...

    def reasons(self, state: CycleState, pod: PodSpec, view: View) -> list[tuple[str, BoolArray]]:
        """Why nodes fail this filter: (reason, failing-node mask) pairs, kube-scheduler wording.

        Called only for pods left unschedulable, to build "0/N nodes are available: ...".
        """
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodSpec, view: View, nodes: IntArray) -> FloatArray:
        """Scores (higher is better) for the feasible `nodes` (indices), same order.

        Plugins that define a range document it; `normalize_score` maps to 0..100.
        """
        ...


@runtime_checkable
class UniformScorePlugin(ScorePlugin, Protocol):
    def uniform(self, state: CycleState, pod: PodSpec, view: View) -> bool:
        """True when `score` would give every node the same value for `pod` (the plugin has
        no preference for it): the core then leaves the plugin out of the sum, since a
        constant changes no choice. Must be cheaper than `score`."""
        ...


@runtime_checkable
class NormalizeScorePlugin(ScorePlugin, Protocol):
    def normalize_score(self, scores: FloatArray) -> FloatArray:
        """Map raw scores to 0..100 (e.g. min-max across the feasible nodes)."""
        ...


KEEPS_FIRST_MAX = "normalize_keeps_first_max"
"""Optional class attribute of a `NormalizeScorePlugin`: True when `normalize_score` gives its
single highest value exactly to the nodes with the highest raw score and integers elsewhere
(min-max to integers over integer raw scores does). When such a scorer is the only one with
a preference for a pod, the core takes the first node of its highest raw score and skips the
normalisation: the same node, since a positive weight keeps 100 above 99."""


@runtime_checkable
class DevicePicker(Plugin, Protocol):
    def pick_devices(self, state: CycleState, pod: PodSpec, view: View, node: int) -> tuple[int, ...] | None:
        """Which GPU devices (indices on `node`) the pod gets, or None to defer to the default.
        Called only for pods that ask for GPUs.

        KAI's `gpu_order`: the policy that scores nodes also chooses devices inside one.
        For MIG requests the indices are carved-slice indices on the node.
        """
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodSpec, placed_in_group: int, view: View) -> Status:
        """After a pod is tentatively placed: SUCCESS to allow, UNSCHEDULABLE to roll back.

        `placed_in_group` counts the members of the pod's group placed in this cycle so far,
        this pod and tentative placements included (0 for a pod without a group).
        """
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        """Record a tentative placement in plugin state (e.g. a gang's chosen rack)."""
        ...

    def unreserve(self, state: CycleState, pod: PodSpec, view: View, node: int) -> None:
        """Undo `reserve` when the placement is rolled back."""
        ...
