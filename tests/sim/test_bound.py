"""The offline bound (issue 22 item 4): never above what any packing reaches, never above what
any policy measures in the FGD experiment, and tight on cases whose answer is known."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model import ModelError, NodeInfo, PodSpec
from gpufleet.model.placement import Placement
from gpufleet.model.pod import GPU_MILLI, GpuKind
from gpufleet.sim import bound as bd
from gpufleet.sim import fgd_experiment as fe
from gpufleet.sim.policies import DEFAULT, profile_for
from gpufleet.framework.plugins.fragmentation import typical_tasks
from gpufleet.sim.workload import Job, Workload
from gpufleet.testing import make_node, make_pod


def node(name: str, gpus: int, cpu: int = 16_000, model: str = "A100", mem_gib: int = 64) -> NodeInfo:
    return make_node(name).cpu(cpu).mem_gib(mem_gib).gpus(gpus, model=model).build()


def share(name: str, milli: int, cpu: int = 1000) -> PodSpec:
    return make_pod(name).cpu(cpu).fraction(milli).build()


def whole(name: str, n: int, cpu: int = 1000) -> PodSpec:
    return make_pod(name).cpu(cpu).gpus(n).build()


def upper(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec]) -> float:
    prob = bd.problem(nodes, pods)
    return bd.upper_bound(prob, bd.demand(prob, pods)).upper_milli


def offline(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec]) -> int:
    prob = bd.problem(nodes, pods)
    b = bd.upper_bound(prob, bd.demand(prob, pods))
    _, placements = bd.offline_packing(prob, nodes, pods, profile_for("bestfit", typical_tasks(pods)), b)
    return bd.check_packing(nodes, pods, placements)


# -- cases whose answer is known ------------------------------------------------------------

@pytest.mark.parametrize("nodes, pods, best", [
    # two 0.6 shares and one GPU: only one fits (a single pool of 1000 milli would take 1200 -> 1000)
    ([node("n", 1)], [share("a", 600), share("b", 600)], 600),
    # ... but 0.6 + 0.4 fill the device
    ([node("n", 1)], [share("a", 600), share("b", 600), share("c", 400)], 1000),
    # a 2-GPU task and a share on a 2-GPU node: not both (the task needs both devices whole)
    ([node("n", 2)], [whole("w", 2), share("s", 500)], 2000),
    ([node("n", 2)], [whole("w", 2), share("s", 500), share("t", 500)], 2000),
    # a 2-GPU task cannot span two 1-GPU nodes
    ([node("n", 1), node("m", 1)], [whole("w", 2), share("s", 300)], 300),
    # CPU: two 10-core single-GPU tasks on a 16-core, 2-GPU node -> one (an aggregate CPU pool
    # over several such nodes would let 1.6 per node in)
    ([node("n", 2), node("m", 2), node("o", 2)], [whole(f"w{i}", 1, cpu=10_000) for i in range(6)], 3000),
    # GPU model: the task asks for H100 and there is none
    ([node("n", 1)], [make_pod("h").cpu(1000).gpus(1).models("H100").build()], 0),
    # CPU-only tasks take nothing from the GPU count (and the bound drops them)
    ([node("n", 1, cpu=1000)], [make_pod("c").cpu(1000).build(), share("s", 700, cpu=500)], 700),
], ids=["two 0.6 on one GPU", "0.6+0.4", "2-GPU task vs share", "2-GPU task vs two halves",
        "no spanning nodes", "CPU per node", "GPU model", "CPU-only"])
def test_the_bound_and_the_offline_packing_meet_the_known_optimum(nodes: list[NodeInfo], pods: list[PodSpec],
                                                                   best: int) -> None:
    assert upper(nodes, pods) == best
    assert offline(nodes, pods) == best


def test_the_lp_generates_device_patterns_it_did_not_start_with() -> None:
    # 450 + 300 + 250 = 1000 on each of 2 devices; no single-size pattern gets there.
    pods = [share(f"a{i}", 450) for i in range(2)] + [share(f"b{i}", 300) for i in range(2)] + \
           [share(f"c{i}", 250) for i in range(2)]
    prob = bd.problem([node("n", 2)], pods)
    b = bd.upper_bound(prob, bd.demand(prob, pods))
    assert b.upper_milli == 2000 and b.rounds > 1
    assert ((250, 1), (300, 1), (450, 1)) in prob.patterns[0]


def test_best_pattern_is_the_most_valuable_device_fill() -> None:
    value, pattern = bd.best_pattern({450: 1.0, 300: 0.7, 250: 0.45, 600: 1.2})
    assert value == pytest.approx(2.15) and pattern == ((250, 1), (300, 1), (450, 1))


# -- brute force on tiny random cases ---------------------------------------------------------

def exact_best(nodes: Sequence[NodeInfo], pods: Sequence[PodSpec]) -> int:
    """The most GPU-milli of any feasible packing, by trying every task -> node-or-nothing map."""
    def node_fits(n: NodeInfo, group: list[PodSpec]) -> bool:
        if sum(p.cpu_milli for p in group) > n.cpu_milli or sum(p.mem_mib for p in group) > n.mem_mib:
            return False
        if len(group) > n.max_pods or any(p.gpu_models and n.gpu_model not in p.gpu_models for p in group
                                          if p.gpu.kind is not GpuKind.NONE):
            return False
        taken = sum(p.gpu.count for p in group if p.gpu.kind is GpuKind.WHOLE)
        shares = [p.gpu.milli for p in group if p.gpu.kind is GpuKind.FRACTION]
        devices = len(n.gpus) - taken
        if devices < 0 or (shares and devices == 0):
            return False
        for where in itertools.product(range(devices), repeat=len(shares)):
            load = [0] * devices
            for d, m in zip(where, shares):
                load[d] += m
            if max(load, default=0) <= GPU_MILLI:
                return True
        return not shares

    best = 0
    for choice in itertools.product(range(len(nodes) + 1), repeat=len(pods)):
        gpu = sum(p.gpu.total_milli for p, c in zip(pods, choice) if c < len(nodes))
        if gpu <= best:
            continue
        if all(node_fits(n, [p for p, c in zip(pods, choice) if c == i]) for i, n in enumerate(nodes)):
            best = gpu
    return best


@st.composite
def tiny(draw: st.DrawFn) -> tuple[list[NodeInfo], list[PodSpec]]:
    nodes = [node(f"n{i}", draw(st.integers(1, 3)), cpu=draw(st.sampled_from([4000, 8000, 16_000])),
                  model=draw(st.sampled_from(["A", "B"])))
             for i in range(draw(st.integers(1, 2)))]
    pods = []
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["share", "share", "whole", "cpu"]))
        cpu = draw(st.sampled_from([500, 2000, 5000, 9000]))
        pod = make_pod(f"p{i}").cpu(cpu)
        if kind == "share":
            pod = pod.fraction(draw(st.sampled_from([200, 350, 500, 650, 810])))
        elif kind == "whole":
            pod = pod.gpus(draw(st.integers(1, 3)))
        if kind != "cpu" and draw(st.booleans()):
            pod = pod.models(draw(st.sampled_from(["A", "B"])))
        pods.append(pod.build())
    return nodes, pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny())
def test_the_bound_is_never_below_the_exact_optimum_and_the_offline_packing_never_above(
        case: tuple[list[NodeInfo], list[PodSpec]]) -> None:
    nodes, pods = case
    best = exact_best(nodes, pods)
    assert upper(nodes, pods) >= best
    assert offline(nodes, pods) <= best


# -- against the FGD experiment's policies ------------------------------------------------------

@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    shapes = [(8, 96_000), (2, 16_000), (4, 32_000), (1, 8000), (2, 104_000)]
    nodes = []
    for i in range(draw(st.integers(2, 6))):
        gpus, cpu = draw(st.sampled_from(shapes))
        nodes.append(make_node(f"n{i}").cpu(cpu).mem_gib(256).max_pods(1001).gpus(gpus, model="G2").build())
    pods = []
    for i in range(draw(st.integers(3, 30))):
        kind = draw(st.sampled_from(["share", "share", "one", "one", "multi", "cpu"]))
        pod = make_pod(f"p{i:03d}").cpu(draw(st.sampled_from([1000, 3152, 6000, 11_300]))).mem_mib(2048)
        if kind == "share":
            pod = pod.fraction(draw(st.sampled_from([230, 320, 470, 650, 810])))
        elif kind == "one":
            pod = pod.gpus(1)
        elif kind == "multi":
            pod = pod.gpus(draw(st.sampled_from([2, 4, 8])))
        pods.append(pod.build())
    if not any(p.gpu.kind is not GpuKind.NONE for p in pods):
        pods.append(make_pod("gpu").cpu(1000).gpus(1).build())
    return Workload("tiny", tuple(nodes), tuple(Job((p,)) for p in pods))


POLICIES = ("fgd", "bestfit", DEFAULT)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(0, 1000))
def test_no_policy_measures_less_unallocated_gpu_than_the_lower_bound(workload: Workload, seed: int) -> None:
    levels = (50, 80, 90, 100, 110, 130)
    bounds = bd.seed_bounds(workload, seed, levels, offline_levels=(100,))
    for policy in POLICIES:
        measured = fe.bucketed(fe.run(workload, policy, seed), "unallocated_gpu_pct")
        for b in bounds:
            value = measured[b.arrived_pct]
            if np.isnan(value):
                continue
            assert b.lower_bound <= value + 1e-9, (policy, b)
    for b in bounds:
        if b.offline_best is not None:
            assert b.offline_best >= b.lower_bound - 1e-9


def test_the_bound_covers_every_attempt_of_its_column_and_an_empty_column_its_next() -> None:
    # capacity 1000: arrivals 0.30, 0.60, 0.90, 1.20 -> columns 30, 60, 90, 120
    arrived = [300, 300, 300, 300]
    assert bd.prefix_length(arrived, 1000, 30) == 1
    assert bd.prefix_length(arrived, 1000, 60) == 2
    assert bd.prefix_length(arrived, 1000, 29) == 1  # column 29 empty -> up to column 30
    # column 70 is empty: `bucketed` fills it from columns 69 and 71, so the bound covers up to 71
    assert bd.prefix_length(arrived, 1000, 70) == 2
    assert bd.prefix_length(arrived, 1000, 89) == 3  # column 89 empty -> up to column 90
    assert bd.prefix_length(arrived, 1000, 130) == 4


def test_a_packing_that_overcommits_or_breaks_a_request_is_refused() -> None:
    nodes = [node("n", 1)]
    pods = [share("a", 600), share("b", 600)]
    a, b = (Placement(p.uid, nodes[0].name, p.cpu_milli, p.mem_mib, (0,), 600) for p in pods)
    with pytest.raises(ModelError, match="overcommits"):
        bd.check_packing(nodes, pods, [a, b])
    with pytest.raises(ModelError, match="other resources"):
        bd.check_packing(nodes, pods, [Placement(a.pod, a.node, a.cpu_milli, a.mem_mib, (0,), 500)])
    with pytest.raises(ModelError, match="twice"):
        bd.check_packing(nodes, pods, [a, a])
    assert bd.check_packing(nodes, pods, [a]) == 600


def test_what_the_bound_does_not_model_is_refused() -> None:
    with pytest.raises(ModelError, match="offline bound"):
        bd.problem([node("n", 1)], [make_pod("m").cpu(1000).mig("1g.10gb").build()])
    with pytest.raises(ModelError, match="offline bound"):
        bd.problem([make_node("t").cpu(1000).mem_gib(1).gpus(1).taint("k").build()], [share("s", 100)])


# -- the command ----------------------------------------------------------------------------

def _cli(argv: list[str]) -> int:
    from gpufleet.cli.main import main

    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_the_command_writes_the_bound_per_arrived_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,1,P100\nn1,16000,65536,2,P100\n")
    pods = tmp_path / "pods.csv"
    header = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
              "scheduled_time\n")
    rows = [f"p{i},1000,1024,1,{m},,LS,Running,0,,0\n" for i, m in enumerate([600, 600, 500, 1000, 300])]
    pods.write_text(header + "".join(rows))
    out = tmp_path / "bound.json"
    assert _cli(["experiment", "bound", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "2",
                 "--levels", "100,130", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["arrived_pct"]) == {"100", "130"}
    row = data["arrived_pct"]["100"]
    assert 0 <= row["lower_bound"] <= row["offline_best"] and len(row["per_seed"]) == 2
    assert data["arrived_pct"]["130"]["offline_best"] is None
    assert "arrived 100 %: lower bound" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--variant", "nosuch", "--trace-dir", "{tmp}"], "no openb pod list"),
    (["--variant", "default", "--trace-dir", "{tmp}/absent"], "is not a directory"),
    (["--levels", "100,x"], "--levels: comma-separated whole arrived-% values"),
    (["--levels", "100", "--offline-levels", "90"], "--offline-levels only columns of --levels"),
    (["--claims"], "--claims and --profile do not apply"),
], ids=["unknown variant", "missing trace dir", "bad levels", "offline level not a level", "claims"])
def test_bad_input_is_one_clear_line_not_a_traceback(argv: list[str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "alibaba-gpu-v2023-openb").mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert _cli(["experiment", "bound", *argv, "--json", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
