"""`gpufleet experiment topology` and its communication-cost model (sim/comm_cost.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from gpufleet.cli.main import main
from gpufleet.framework.topology_levels import CLIQUE, RACK
from gpufleet.model import NodeInfo, NodeName, Placement, PodUid
from gpufleet.sim import topology_experiment as tx
from gpufleet.sim.comm_cost import CommModel, spread_ratios
from gpufleet.sim.traces import philly
from gpufleet.sim.workload import Job
from gpufleet.testing import make_node

LM = "LM (batch size 20)"
RATIOS = spread_ratios({(LM, 8): 500.0, (LM, 4): 110.0, ("ResNet-50", 8): 10.0},
                       {(LM, 8): 50.0, (LM, 4): 110.0, ("ResNet-50", 8): 14.0})


def _nodes() -> list[NodeInfo]:
    labels = [("r1", "c1"), ("r1", "c1"), ("r1", "c2"), ("r2", "c3")]
    return [make_node(f"n{i}").gpus(8).label(RACK, r).label(CLIQUE, c).build() for i, (r, c) in enumerate(labels)]


def _on(*spread: tuple[int, int]) -> list[Placement]:
    return [Placement(PodUid(f"p{k}"), NodeName(f"n{node}"), 0, 0, tuple(range(gpus)), 1000, 0)
            for k, (node, gpus) in enumerate(spread)]


def _job(job_type: str = LM) -> Job:
    return Job((), attrs=MappingProxyType({"job_type": job_type}))


def test_the_ratios_are_consolidated_over_unconsolidated_and_never_below_one() -> None:
    assert RATIOS == {(LM, 8): 10.0, (LM, 4): 1.0, ("ResNet-50", 8): 1.0}


@pytest.mark.parametrize(("spread", "factor"), [
    (((0, 8),), 1.0),                       # one node
    (((0, 4), (1, 4)), 1.0),                # two nodes of one NVLink domain
    (((0, 6), (2, 2)), 10.0),               # split across domains in one rack: Gavel's spread ratio in full
    (((0, 6), (3, 2)), 10.0 * (1 + 0.9 * 0.5)),  # across racks: communication (9/10 of it) 1.5 times longer
    (((0, 8), (2, 8)), 1.0),                # 16 GPUs on the fewest nodes of one rack
    (((0, 8), (3, 8)), 1 + 0.9 * 0.5),      # 16 GPUs across racks
], ids=["one node", "one clique", "one rack", "two racks", "big job one rack", "big job two racks"])
def test_the_slowdown_follows_the_stated_model(spread: tuple[tuple[int, int], ...], factor: float) -> None:
    model = CommModel(_nodes(), RATIOS, 1.5)
    assert model(0, _job(), _on(*spread)) == pytest.approx(factor)


def test_a_model_insensitive_to_placement_is_not_slowed() -> None:
    assert CommModel(_nodes(), RATIOS)(0, _job("ResNet-50"), _on((0, 4), (3, 4))) == 1.0


def test_on_the_synthetic_mix_required_keeps_every_gang_in_a_rack_and_the_default_on_one_node() -> None:
    workload = tx.synthetic(60, 0.8, seed=1, nodes=16)
    rows = {p: tx.run_one(({"s": workload}, RATIOS, 1.5), "s", p).row for p in tx.POLICIES}
    assert rows["required"]["gangs_one_rack_pct"] == 100.0
    assert rows["default"]["gangs_one_node_pct"] == 100.0
    none_pct = rows["none"]["gangs_one_node_pct"]
    assert none_pct is not None and none_pct < 100.0
    assert all(row["finished"] == 60.0 for row in rows.values())


def test_the_experiment_writes_the_kpis_per_workload_and_policy(small_philly: Path, tmp_path: Path) -> None:
    throughputs = {"v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 1.0},
                            "('ResNet-18 (batch size 32)', 8)": {"null": 8.0}},
                   "v100_unconsolidated": {"('ResNet-18 (batch size 32)', 8)": {"null": 2.0}}}
    (small_philly / philly.SUBDIR / philly.THROUGHPUTS).write_text(json.dumps(throughputs))
    out = tmp_path / "t.json"
    code = main(["experiment", "topology", "--trace-dir", str(small_philly), "--json", str(out), "--workers", "1",
                 "--philly-jobs", "10", "--synthetic-jobs", "30"])
    assert code == 0
    doc = json.loads(out.read_text())
    assert list(doc["workloads"]) == ["philly", "synthetic"]
    for per_policy in doc["workloads"].values():
        assert list(per_policy) == list(tx.POLICIES)
        for row in per_policy.values():
            assert {"gangs_one_domain_pct", "jct_mean_s", "wait_p99_s"} <= set(row)
