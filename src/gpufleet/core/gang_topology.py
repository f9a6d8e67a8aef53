"""Topology for gangs: the domains of each level, a gang's plan, and where its members already run.

A level is a node label key of the profile's `topology.levels` (lowest first); nodes with the
same value are one domain, nodes without the label are in none (the host level,
`kubernetes.io/hostname`, gives every node its own). A gang declares a level with KAI-
Scheduler's PodGroup annotations (`model.pod`):

- required: every member, running or placed, is inside one domain of the level. The
  `Statement` enforces it as a filter (so preemption's what-ifs keep it too), and `Placer`
  looks for the domain: the one its running members are in, else each domain with room in
  best-fit order (least free GPU capacity that can hold the gang, KAI's bin-packing of
  domains; ties to the lowest label value), until one holds at least minMember. None: the
  gang waits, and its reason names the level.
- preferred: the same search at the declared level, then at each level above it, lowest
  first; if no single domain of any level holds the gang, members go where the scorers put
  them (the Topology scorer keeps them on the nodes and rack already chosen), so a gang is
  in as few domains as the search can find.
- neither: the profile's `topology.gangDefault` as the preferred level (the host, shipped).

Decisions: domains are computed per cycle, one level at a time and only when a gang asks for
it (label reads are O(nodes)); the search tries at most `MAX_TRIES` domains per level, each a
tentative placement of the gang rolled back on failure, so a gang costs at most that many
placements per level; and a domain's room is counted on the nodes where the gang's first
member passes the filters now, so a selector, a taint or CPU rules out a domain before a try.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.framework.topology_levels import HOSTNAME, TopologyConfig
from gpufleet.model import Cluster, ClusterSnapshot, GpuKind, PodGroup, PodSpec, Usage
from gpufleet.model import pod as pod_model

MAX_TRIES = 16
"""Domains of one level tried per gang and cycle (each try places the gang tentatively)."""

NO_ROOM = "no_room"
"""The key of a mask that admits no node (the gang's members already span domains)."""


@dataclass(frozen=True, slots=True)
class GangPlan:
    """What the search does for one gang: the levels to try, in order, and whether one is required."""

    ladder: tuple[int, ...] = ()
    """Level indexes to look for one domain at, in order; empty: no search."""
    required: int | None = None
    problem: str | None = None
    """Why the gang cannot be placed at all (a level the profile does not list)."""


class GangTopology:
    """A cycle's view of topology domains and of the nodes each gang's members run or are placed on."""

    def __init__(self, snapshot: ClusterSnapshot, config: TopologyConfig) -> None:
        self.snapshot = snapshot
        self.config = config
        self._ids: dict[int, np.ndarray] = {}
        self._names: dict[int, list[str]] = {}
        self._members: dict[str, dict[int, int]] | None = None

    # -- domains -------------------------------------------------------------------------
    def ids(self, level: int) -> np.ndarray:
        """Each node's domain index at `level` (-1: the node lacks the label); indexes follow the
        sorted label values, so the lowest index is the lowest name."""
        got = self._ids.get(level)
        if got is None:
            got = self._build(level)
        return got

    def name(self, level: int, domain: int) -> str:
        self.ids(level)
        return self._names[level][domain]

    def _build(self, level: int) -> np.ndarray:
        cluster: Cluster = self.snapshot.cluster
        key = self.config.levels[level]
        if key == HOSTNAME:
            values: list[str | None] = [n.name for n in cluster.nodes]
        else:
            values = [n.labels.get(key) for n in cluster.nodes]
        names = sorted({v for v in values if v is not None})
        index = {v: i for i, v in enumerate(names)}
        ids = np.array([-1 if v is None else index[v] for v in values], dtype=np.int64)
        self._ids[level], self._names[level] = ids, names
        return ids

    # -- plans ---------------------------------------------------------------------------
    def plan(self, group_key: str, group: PodGroup | None) -> GangPlan:
        cfg = self.config
        required = group.required_topology if group is not None else None
        preferred = group.preferred_topology if group is not None else None
        for note, level in ((pod_model.REQUIRED_TOPOLOGY_ANNOTATION, required),
                            (pod_model.PREFERRED_TOPOLOGY_ANNOTATION, preferred)):
            if level is not None and cfg.index(level) is None:
                return GangPlan(problem=(f"podgroup {group_key}: annotation {note}: {level!r} is not a topology "
                                         f"level of the profile ({', '.join(cfg.levels)})"))
        if required is not None:
            r = cfg.index(required)
            assert r is not None
            return GangPlan((r,), r)
        start = cfg.index(preferred or cfg.gang_default) if (preferred or cfg.gang_default) else None
        if start is None:
            return GangPlan()
        return GangPlan(tuple(range(start, len(cfg.levels))))

    def required_level(self, pod: PodSpec) -> int | None:
        """The level index `pod`'s gang requires (-1 for a level the profile lacks), else None."""
        group = self.snapshot.pod_groups.get(pod.pod_group) if pod.pod_group else None
        if group is None or group.required_topology is None:
            return None
        level = self.config.index(group.required_topology)
        return -1 if level is None else level

    # -- members -------------------------------------------------------------------------
    def members(self, group_key: str) -> dict[int, int]:
        """Node index -> members of the gang on it (running, placed this cycle, less evicted)."""
        if self._members is None:
            counts: dict[str, dict[int, int]] = {}
            index = self.snapshot.cluster.index
            for p in self.snapshot.placements.values():
                if p.pod_group is not None:
                    nodes = counts.setdefault(p.pod_group, {})
                    i = index[p.node]
                    nodes[i] = nodes.get(i, 0) + 1
            self._members = counts
        return self._members.get(group_key, {})

    def add(self, group_key: str, node: int, sign: int) -> None:
        nodes = self.members(group_key)
        assert self._members is not None
        left = nodes.get(node, 0) + sign
        if left:
            nodes[node] = left
        else:
            nodes.pop(node, None)
        self._members[group_key] = nodes

    def member_domains(self, group_key: str, level: int) -> set[int]:
        ids = self.ids(level)
        return {int(ids[n]) for n in self.members(group_key)}

    # -- the filter ----------------------------------------------------------------------
    def constraint(self, pod: PodSpec) -> tuple[np.ndarray | None, object]:
        """The nodes `pod` may take under its gang's required level (None: any), and a key naming
        that mask for the failure cache: the domain its gang's members are in, else any node that
        has the level's label; no node once members are outside one domain of it."""
        level = self.required_level(pod)
        if level is None:
            return None, None
        n = self.snapshot.cluster.n_nodes
        if level < 0:
            return np.zeros(n, dtype=np.bool_), NO_ROOM
        assert pod.pod_group is not None
        ids = self.ids(level)
        domains = self.member_domains(pod.pod_group, level)
        if not domains:
            return ids >= 0, ("level", level)
        if len(domains) > 1 or -1 in domains:
            return np.zeros(n, dtype=np.bool_), NO_ROOM
        (d,) = domains
        return ids == d, ("domain", level, d)

    # -- the search ----------------------------------------------------------------------
    def candidates(self, group_key: str, level: int, members: list[PodSpec], need: int, usage: Usage,
                   fits: np.ndarray) -> list[int]:
        """Domains of `level` to try for the gang, best fit first, at most `MAX_TRIES`: the one
        its members already occupy (if one), else every domain whose free GPU capacity, counted on
        the nodes `fits` (where its first member passes the filters now), can hold `need` members."""
        ids = self.ids(level)
        here = self.member_domains(group_key, level)
        if len(here) > 1 or -1 in here:
            return []
        whole = all(p.gpu.kind is GpuKind.WHOLE for p in members)
        free = (usage.free_whole * 1000 if whole else usage.free_milli_total).astype(np.float64)
        sizes = sorted(p.gpu.total_milli for p in members)
        demand = float(sum(sizes[:max(need, 1)]))
        ok = np.zeros(len(ids), dtype=np.bool_)
        ok[fits] = True
        ok &= ids >= 0
        n_domains = len(self._names[level])
        room = np.bincount(ids[ok], weights=free[ok], minlength=n_domains)
        reach = np.bincount(ids[ok], minlength=n_domains)
        eligible = np.nonzero((room >= demand) & (reach > 0))[0]
        if here:
            eligible = eligible[eligible == next(iter(here))]
        order = np.lexsort((eligible, room[eligible]))
        return [int(d) for d in eligible[order][:MAX_TRIES]]

    def mask(self, level: int, domain: int) -> np.ndarray:
        result: np.ndarray = self.ids(level) == domain
        return result
