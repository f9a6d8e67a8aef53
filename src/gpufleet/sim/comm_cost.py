"""A communication-cost model: how much slower a multi-GPU job runs where its GPUs are spread.

It is a model, stated here and in docs/results.md, not a measurement of gpufleet:

1. One node, or several nodes inside one NVLink domain (`nvidia.com/gpu.clique`): factor 1.
   The job's duration in the workload is its consolidated run (the Philly-derived trace's
   durations come from Gavel's throughputs measured with the job's GPUs on one server).
   Multi-node NVLink domains are assumed to give the same all-reduce bandwidth as one node
   (NVIDIA's GB200 NVL72 links every GPU of the domain at full NVLink bandwidth).
2. A job that fits on one node but runs on several: factor s = Gavel's measured throughput of
   the job type at min(GPUs, 8) consolidated on one server over its throughput
   "unconsolidated", spread across servers (`simulation_throughputs.json`, keys `v100` and
   `v100_unconsolidated`; Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies
   for Deep Learning Workloads", OSDI'20, which shows this placement sensitivity per model).
   For V100 they range from about 1 (ResNet-50, large batches) to 9.6 (the LSTM language
   model at 8 GPUs); a ratio below 1 is taken as 1 and a type with no multi-GPU measurement
   (A3C, CycleGAN, Recommendation) as 1. Tiresias (Gu et al., NSDI'19, section 2.3) reports
   the same split: models with large tensors (VGG, the LSTM) are placement-sensitive, ResNet
   is not. Any split counts in full: ring all-reduce runs at the pace of its slowest link, so
   a 3 + 1 split is as slow as a fully spread job (the bandwidth-bound case).
3. A job too big for one node is network-bound on the fewest nodes already: its duration in
   the workload stands for its run on the fewest nodes, inside one rack (factor 1).
4. Crossing racks (more racks than the job needs) stretches its communication time by
   `cross_rack` (default 1.5): traffic through the spine shares oversubscribed uplinks. The
   communication share of a network-bound run is taken as (s - 1) / s, from the same Gavel
   ratio, so the factor is multiplied by 1 + (s - 1) / s * (cross_rack - 1). `cross_rack` is
   an assumption of the model (no measurement of it ships with the traces);
   `--cross-rack-factor` changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpufleet.framework.topology_levels import CLIQUE, RACK
from gpufleet.model import NodeInfo, NodeName, Placement
from gpufleet.sim.traces import philly
from gpufleet.sim.workload import Job

CROSS_RACK = 1.5


def spread_ratios(consolidated: Mapping[tuple[str, int], float], unconsolidated: Mapping[tuple[str, int], float]
                  ) -> dict[tuple[str, int], float]:
    """(job type, GPUs) -> consolidated / unconsolidated throughput, at least 1."""
    return {k: max(1.0, rate / unconsolidated[k]) for k, rate in consolidated.items()
            if k[1] > 1 and unconsolidated.get(k, 0.0) > 0}


def load_ratios(root: object) -> dict[tuple[str, int], float]:
    """Gavel's V100 spread ratios from the trace directory `root`."""
    from pathlib import Path
    table = philly.read_throughputs(Path(str(root)) / philly.SUBDIR / philly.THROUGHPUTS)
    return spread_ratios(table["v100"], table["v100_unconsolidated"])


@dataclass(frozen=True, slots=True)
class Spread:
    """Where one run of a job is: nodes, NVLink domains and racks it touches."""

    gpus: int
    nodes: int
    cliques: int
    """NVLink domains (a node without the clique label counts as its own)."""
    racks: int
    factor: float


@dataclass
class CommModel:
    """Slowdown per job run (a `replay` `slowdown`), recording where each job ran (`spreads`)."""

    nodes: Sequence[NodeInfo]
    ratios: Mapping[tuple[str, int], float]
    cross_rack: float = CROSS_RACK
    spreads: dict[int, Spread] = field(default_factory=dict)
    """Job index -> its latest run's spread."""

    def __post_init__(self) -> None:
        self._labels = {n.name: n.labels for n in self.nodes}
        self._gpus = {n.name: len(n.gpus) for n in self.nodes}
        self.node_gpus = max(self._gpus.values(), default=1)

    def ratio(self, job_type: str, gpus: int) -> float:
        return self.ratios.get((job_type, min(gpus, 8)), 1.0)

    def __call__(self, index: int, job: Job, placements: Sequence[Placement]) -> float:
        gpus = sum(len(p.gpus) for p in placements)
        nodes = {p.node for p in placements}
        cliques = {self._domain(n, CLIQUE) for n in nodes}
        racks = {self._domain(n, RACK) for n in nodes}
        factor = 1.0
        if len(nodes) > 1 and len(cliques) > 1:
            s = self.ratio(job.attrs.get("job_type", ""), gpus)
            fits_one = gpus <= self.node_gpus
            factor = s if fits_one else 1.0  # a bigger job's duration is its network-bound run already
            rack_min = 1 if fits_one else self._racks_needed(gpus)
            if len(racks) > rack_min:
                factor *= 1.0 + (s - 1.0) / s * (self.cross_rack - 1.0)
        self.spreads[index] = Spread(gpus, len(nodes), len(cliques), len(racks), factor)
        return factor

    def _domain(self, node: NodeName, key: str) -> str:
        return self._labels[node].get(key) or f"node:{node}"

    def _racks_needed(self, gpus: int) -> int:
        """The fewest racks whose GPUs add up to `gpus` (the largest racks first)."""
        per_rack: dict[str, int] = {}
        for n, g in self._gpus.items():
            rack = self._domain(n, RACK)
            per_rack[rack] = per_rack.get(rack, 0) + g
        total = 0
        for k, size in enumerate(sorted(per_rack.values(), reverse=True), start=1):
            total += size
            if total >= gpus:
                return k
        return max(1, len(per_rack))
