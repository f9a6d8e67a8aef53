"""`ClusterSnapshot`: the immutable input of a scheduling cycle.

A snapshot is a static `Cluster`, a `Usage` built from the pods already running, and the
known pod groups. Drivers never mutate one; they derive the next with `apply()`, which
copies the usage arrays (cheap) and applies binds and releases. The core copies `usage`
before tentative placements, so a snapshot can be scheduled many times with the same result.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, Sequence

from gpufleet.model.cluster import Cluster, Usage
from gpufleet.model.dra import ClaimAllocation, DeviceClass, DraState, ResourceClaim, ResourceSlice, pools
from gpufleet.model.errors import ModelError
from gpufleet.model.node import NodeInfo, NodeName
from gpufleet.model.placement import Placement
from gpufleet.model.pod import GPU_MILLI, PodGroup, PodUid


class ClusterSnapshot:
    """Nodes, what runs on them, and the gangs pods belong to."""

    __slots__ = ("cluster", "_usage", "_placements", "pod_groups", "_consumed", "dra")

    def __init__(self, cluster: Cluster, usage: Usage, placements: Mapping[PodUid, Placement],
                 pod_groups: Mapping[str, PodGroup], dra: DraState = DraState()) -> None:
        self.cluster = cluster
        self._usage = usage
        self._placements = placements
        self.pod_groups = pod_groups
        self.dra = dra
        """DeviceClasses and ResourceClaims (the devices are `cluster.devices`)."""
        self._consumed = False

    @property
    def usage(self) -> Usage:
        self._check()
        return self._usage

    @property
    def placements(self) -> Mapping[PodUid, Placement]:
        self._check()
        return self._placements

    def _check(self) -> None:
        if self._consumed:
            raise RuntimeError("this snapshot was consumed by advance(); use the snapshot it returned")

    @classmethod
    def build(cls, nodes: Sequence[NodeInfo], running: Iterable[Placement] = (),
              pod_groups: Iterable[PodGroup] = (), *, device_classes: Iterable[DeviceClass] = (),
              slices: Sequence[ResourceSlice] = (), claims: Iterable[ResourceClaim] = ()) -> ClusterSnapshot:
        """Build from plain lists. Running placements that overcommit a node are an error.

        DRA: `slices` form the devices (complete pools of the newest generation only); allocated
        `claims` hold their devices, except those a running placement carries (its `claims`:
        released with the pod). What cannot be used is listed in `dra.problems`."""
        complete, problems = pools(slices)
        cluster = Cluster(nodes, complete)
        problems.extend(cluster.devices.problems)
        usage = Usage(cluster)
        placements: dict[PodUid, Placement] = {}
        for p in running:
            i = _check_placement(cluster, usage, p, placements)
            usage.place(p, i)
            problem = usage.overcommitted(i)
            if problem:
                raise ModelError(f"running pod {p.pod} on node {p.node}", f"overcommits {problem}")
            placements[p.pod] = p
        groups = {g.key: g for g in pod_groups}
        by_key = {c.key: c for c in claims}
        carried = {a.claim for p in placements.values() for a in p.claims}
        held = [ClaimAllocation(c.key, c.allocation, c.allocated_node) for c in by_key.values()
                if c.allocation is not None and c.key not in carried]
        problems.extend(f"{line}: not counted" for line in usage.hold_claims(held))
        dra = DraState({d.name: d for d in device_classes}, by_key, tuple(problems))
        return cls(cluster, usage, MappingProxyType(placements), MappingProxyType(groups), dra)

    def apply(self, binds: Iterable[Placement] = (), releases: Iterable[PodUid] = ()) -> ClusterSnapshot:
        """A new snapshot with `releases` removed and `binds` added (binds are trusted core output)."""
        usage, placements = self.usage.copy(), dict(self.placements)
        _step(self.cluster, usage, placements, binds, releases)
        return ClusterSnapshot(self.cluster, usage, MappingProxyType(placements), self.pod_groups, self.dra)

    def advance(self, binds: Iterable[Placement] = (), releases: Iterable[PodUid] = ()) -> ClusterSnapshot:
        """Like `apply`, but reuses this snapshot's arrays instead of copying them.

        For drivers that step one snapshot forward thousands of times (the simulator): copying
        the placements of every running pod per step would make a run quadratic. This
        snapshot is consumed: any later use of it raises RuntimeError.
        """
        self._check()
        placements = self._placements
        assert isinstance(placements, dict), "advance() needs a snapshot made by owned() or advance()"
        _step(self.cluster, self._usage, placements, binds, releases)
        self._consumed = True
        return ClusterSnapshot(self.cluster, self._usage, placements, self.pod_groups, self.dra)

    def owned(self) -> ClusterSnapshot:
        """A private copy that `advance()` may step forward (this snapshot stays usable)."""
        return ClusterSnapshot(self.cluster, self.usage.copy(), dict(self.placements), self.pod_groups, self.dra)

    def with_gpu_health(self, node: NodeName, gpu: int, healthy: bool) -> ClusterSnapshot:
        usage = self.usage.copy()
        usage.set_health(self.cluster.index[node], gpu, healthy)
        return ClusterSnapshot(self.cluster, usage, self.placements, self.pod_groups, self.dra)

    def with_pod_groups(self, groups: Iterable[PodGroup]) -> ClusterSnapshot:
        merged = dict(self.pod_groups)
        merged.update({g.key: g for g in groups})
        return ClusterSnapshot(self.cluster, self.usage, self.placements, MappingProxyType(merged), self.dra)

    # -- KPIs every driver reports the same way ------------------------------------------
    def gpu_capacity_milli(self) -> int:
        return int(self.cluster.gpu_count.sum()) * GPU_MILLI

    def gpu_allocated_milli(self) -> int:
        return int(self.usage.gpu_used_milli.sum())


def _step(cluster: Cluster, usage: Usage, placements: dict[PodUid, Placement],
          binds: Iterable[Placement], releases: Iterable[PodUid]) -> None:
    """Apply releases, then binds, to `usage` and `placements` in place (`Usage.place_all`:
    each node's aggregates recomputed once per pass, also when a bad release or bind stops it)."""
    def released() -> Iterator[tuple[Placement, int]]:
        for uid in releases:
            p = placements.pop(uid, None)
            if p is None:
                raise ModelError(f"release of pod {uid}", "pod is not running in this snapshot")
            yield p, cluster.index[p.node]

    def bound() -> Iterator[tuple[Placement, int]]:
        for p in binds:
            if p.pod in placements:
                raise ModelError(f"bind of pod {p.pod}", f"pod already runs on {placements[p.pod].node}")
            i = cluster.index[p.node]
            placements[p.pod] = p
            yield p, i

    usage.place_all(released(), sign=-1)
    usage.place_all(bound())


def _check_placement(cluster: Cluster, usage: Usage, p: Placement,
                     seen: Mapping[PodUid, Placement]) -> int:
    where = f"running pod {p.pod}"
    if p.pod in seen:
        raise ModelError(where, "listed twice")
    i = cluster.index.get(p.node)
    if i is None:
        raise ModelError(where, f"runs on unknown node {p.node!r}")
    n_gpus = int(cluster.gpu_count[i])
    for j in p.gpus:
        if not 0 <= j < n_gpus:
            raise ModelError(where, f"GPU index {j} does not exist on node {p.node} ({n_gpus} GPUs)")
        if not cluster.gpu_whole_ok[i, j]:
            raise ModelError(where, f"GPU {j} on node {p.node} is in MIG mode: only its MIG slices can be used")
    n_slices = int(cluster.slice_end[i] - cluster.slice_start[i])
    for s in p.mig_slices:
        if not 0 <= s < n_slices:
            raise ModelError(where, f"MIG slice {s} does not exist on node {p.node}")
        if usage.slice_used[int(cluster.slice_start[i]) + s]:
            raise ModelError(where, f"MIG slice {s} on node {p.node} is already in use")
    return i
