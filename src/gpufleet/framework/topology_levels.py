"""Topology levels for gangs: which node labels name the domains a gang can be kept inside.

In a profile's YAML this is the gpufleet-specific `topology` section, next to `plugins`:

    profiles:
      - schedulerName: gpufleet
        topology:
          levels:                        # node label keys, lowest (smallest domain) first
            - kubernetes.io/hostname
            - nvidia.com/gpu.clique
            - topology.gpufleet.io/rack
            - topology.gpufleet.io/block
            - topology.kubernetes.io/zone
          gangDefault: kubernetes.io/hostname   # "" = no default

A PodGroup asks for a level with KAI-Scheduler's annotations (`kai.scheduler/topology-
required-placement`, `kai.scheduler/topology-preferred-placement`), whose values are these
label keys (docs/scheduler.md, gangs and topology). A level plays the role of one entry of
KAI's Topology CRD `spec.levels[].nodeLabel`, here listed lowest first.

`gangDefault` is the preferred level of a gang that declares none. The shipped default,
the host, was chosen from `gpufleet experiment topology` (docs/results.md): a gang whose
GPUs fit on one node goes on one free node instead of being spread by the packing scorers.
"""

from __future__ import annotations

from dataclasses import dataclass

HOSTNAME = "kubernetes.io/hostname"
"""The host level: every node is its own domain, whether or not it carries the label."""
CLIQUE = "nvidia.com/gpu.clique"
"""GPU feature discovery's multi-node NVLink domain (`<cluster UUID>.<clique id>`, GB200 NVL)."""
RACK = "topology.gpufleet.io/rack"
BLOCK = "topology.gpufleet.io/block"
ZONE = "topology.kubernetes.io/zone"

DEFAULT_LEVELS = (HOSTNAME, CLIQUE, RACK, BLOCK, ZONE)


@dataclass(frozen=True, slots=True)
class TopologyConfig:
    levels: tuple[str, ...] = DEFAULT_LEVELS
    """Node label keys naming topology domains, lowest (smallest domain) first. A node without
    a level's label is in no domain of that level (the host level always has one per node)."""
    gang_default: str = HOSTNAME
    """The preferred level of a gang that declares none ("" = none: members go wherever the
    scorers put them)."""

    def problem(self) -> tuple[str, str] | None:
        """(camelCase key, what is wrong) for an invalid setting, else None."""
        if not self.levels:
            return "levels", "must list at least one node label key"
        if len(set(self.levels)) != len(self.levels):
            return "levels", "must not list a label key twice"
        if any(not level for level in self.levels):
            return "levels", "must not hold an empty label key"
        if self.gang_default and self.gang_default not in self.levels:
            return "gangDefault", f"must be one of levels ({', '.join(self.levels)}) or \"\", got {self.gang_default!r}"
        return None

    def index(self, level: str) -> int | None:
        """The position of `level` (lowest first), None if the profile does not list it."""
        return self.levels.index(level) if level in self.levels else None
