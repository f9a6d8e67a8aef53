"""Philly-derived Gavel traces: durations from throughputs, gangs, cluster specs, bad rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.model import GPU_PRODUCT_LABEL, ModelError
from gpufleet.sim.traces import philly

WriteFile = Callable[[str, str], Path]

THROUGHPUTS = {
    "v100": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.0, "('LM', 1)": [5.0, 5.0]},
             "('ResNet-18 (batch size 32)', 4)": {"null": 30.0},
             "('ResNet-18 (batch size 32)', 8)": {"null": 50.0},
             "('A3C', 1)": {"null": 2.0}},
    "k80": {"('ResNet-18 (batch size 32)', 1)": {"null": 4.0},
            "('ResNet-18 (batch size 32)', 4)": {"null": 0.0}},
}


def line(job_type: str = "ResNet-18 (batch size 32)", steps: str = "1000", arrival: str = "5.000000",
         gpus: str = "1") -> str:
    return "\t".join([job_type, "cd %s && python3 train.py", "--num_steps", "1", steps, arrival, gpus])


@pytest.fixture
def throughputs(write_file: WriteFile) -> philly.Throughputs:
    return philly.read_throughputs(write_file("t.json", json.dumps(THROUGHPUTS)))


@pytest.mark.parametrize("job_type, gpus, gpu_type, duration, basis", [
    pytest.param("ResNet-18 (batch size 32)", "1", "v100", 100.0, "measured",
                 id="a one-GPU job runs total steps over its measured throughput"),
    pytest.param("ResNet-18 (batch size 32)", "8", "v100", 20.0, "measured",
                 id="an eight-GPU job uses the eight-GPU measurement"),
    pytest.param("ResNet-18 (batch size 32)", "16", "v100", 10.0, "scaled from 8 GPU(s)",
                 id="a sixteen-GPU job scales the eight-GPU throughput linearly"),
    pytest.param("ResNet-18 (batch size 32)", "7", "v100", 1000 / (30.0 * 7 / 4), "scaled from 4 GPU(s)",
                 id="an unmeasured size scales the largest measured size below it"),
    pytest.param("A3C", "2", "v100", 250.0, "scaled from 1 GPU(s)",
                 id="a model measured on one GPU only scales that measurement"),
    pytest.param("ResNet-18 (batch size 32)", "4", "k80", 1000 / 16.0, "scaled from 1 GPU(s)",
                 id="a zero throughput counts as unmeasured"),
    pytest.param("ResNet-18 (batch size 32)", "1", "k80", 250.0, "measured",
                 id="the chosen GPU type sets the duration"),
])
def test_duration_is_total_steps_over_throughput(write_file: WriteFile, throughputs: philly.Throughputs,
                                                 job_type: str, gpus: str, gpu_type: str, duration: float,
                                                 basis: str) -> None:
    path = write_file("ab12cd.trace", line(job_type, gpus=gpus) + "\n")
    (job,) = philly.read_trace(path, throughputs, gpu_type)
    assert job.duration_s == pytest.approx(duration)
    assert (job.attrs["throughput_basis"], job.attrs["gpu_type"], job.arrival_s) == (basis, gpu_type, 5.0)
    assert job.source == "ab12cd.trace:1"


@pytest.mark.parametrize("gpus, sizes", [
    pytest.param("3", [3], id="a three-GPU job is one pod"),
    pytest.param("8", [8], id="an eight-GPU job is one pod"),
    pytest.param("12", [8, 4], id="a twelve-GPU job is a gang of an eight- and a four-GPU pod"),
    pytest.param("32", [8, 8, 8, 8], id="a thirty-two-GPU job is a gang of four eight-GPU pods"),
])
def test_jobs_larger_than_a_server_become_gangs(write_file: WriteFile, throughputs: philly.Throughputs,
                                                gpus: str, sizes: list[int]) -> None:
    (job,) = philly.read_trace(write_file("ab12cd.trace", line(gpus=gpus) + "\n"), throughputs)
    assert [p.gpu.count for p in job.pods] == sizes
    assert {p.queue for p in job.pods} == {"ab12cd"}
    assert len({p.uid for p in job.pods}) == len(sizes)
    assert [p.cpu_milli for p in job.pods] == [n * philly.POD_CPU_MILLI_PER_GPU for n in sizes]
    if len(sizes) == 1:
        assert job.group is None and job.pods[0].pod_group is None
    else:
        assert job.group is not None and job.group.min_member == len(sizes)
        assert {p.pod_group for p in job.pods} == {job.group.key}


@pytest.mark.parametrize("text, field, problem", [
    pytest.param(line(steps="0"), "total_steps", "at least 1", id="zero total steps is an error"),
    pytest.param(line(steps="1e6"), "total_steps", "'1e6'", id="total steps in exponent notation is an error"),
    pytest.param(line(arrival="-3.0"), "arrival_time", "non-negative", id="a negative arrival is an error"),
    pytest.param(line(arrival="soon"), "arrival_time", "'soon'", id="an arrival that is not a number is an error"),
    pytest.param(line(gpus="0"), "scale_factor", "at least 1", id="a zero scale factor is an error, not skipped"),
    pytest.param(line(job_type="GPT-5"), "job_type", "no v100 throughput", id="an unknown job type is an error"),
    pytest.param(line().rsplit("\t", 1)[0], "scale_factor", "got 6", id="a row missing a field is an error"),
    pytest.param(line() + "\t1.0", "field 8", "got 8", id="a row with an extra field is an error"),
])
def test_malformed_row_names_file_line_and_field(write_file: WriteFile, throughputs: philly.Throughputs,
                                                 text: str, field: str, problem: str) -> None:
    path = write_file("vc.trace", line() + "\n" + text + "\n")
    with pytest.raises(ModelError) as caught:
        philly.read_trace(path, throughputs)
    assert caught.value.where == f"{path}:2: {field}" and problem in caught.value.problem


def test_unknown_gpu_type_is_an_error(write_file: WriteFile, throughputs: philly.Throughputs) -> None:
    with pytest.raises(ModelError, match="unknown GPU type 'a100'; known: k80, v100"):
        philly.read_trace(write_file("vc.trace", line() + "\n"), throughputs, "a100")


def test_malformed_throughput_key_is_an_error(write_file: WriteFile) -> None:
    path = write_file("t.json", json.dumps({"v100": {"ResNet-18": {"null": 1.0}}}))
    with pytest.raises(ModelError, match="t.json: v100: ResNet-18"):
        philly.read_throughputs(path)


@pytest.mark.parametrize("spec, nodes, last_gpus", [
    pytest.param("500:0:0", {"v100": 63}, 4, id="500 V100s are 62 eight-GPU servers and one with four"),
    pytest.param("16:8:0", {"v100": 2, "p100": 1}, 8, id="each GPU type gets its own servers"),
])
def test_cluster_spec_becomes_eight_gpu_servers(write_file: WriteFile, spec: str, nodes: dict[str, int],
                                                last_gpus: int) -> None:
    built = philly.cluster_nodes(philly.read_cluster_spec(write_file("c.json", json.dumps({"philly": [spec]}))))
    assert {t: sum(1 for n in built if n.name.startswith(t)) for t in nodes} == nodes
    assert sum(len(n.gpus) for n in built) == sum(int(c) for c in spec.split(":"))
    assert len(built[-1].gpus) == last_gpus
    assert built[0].labels[GPU_PRODUCT_LABEL] == "V100" and built[0].gpus[0].uuid == "GPU-v100-node-000-0"


@pytest.mark.parametrize("text", [
    pytest.param(json.dumps({"philly": ["500:0"]}), id="a spec with two counts is an error"),
    pytest.param(json.dumps({"philly": []}), id="an empty spec list is an error"),
    pytest.param(json.dumps(["500:0:0"]), id="a bare list is an error"),
])
def test_malformed_cluster_spec_is_an_error(write_file: WriteFile, text: str) -> None:
    with pytest.raises(ModelError, match="c.json"):
        philly.read_cluster_spec(write_file("c.json", text))


def test_load_merges_vcs_by_arrival_on_one_cluster(write_file: WriteFile) -> None:
    root = write_file(f"{philly.SUBDIR}/{philly.THROUGHPUTS}", json.dumps(THROUGHPUTS)).parent.parent
    write_file(f"{philly.SUBDIR}/{philly.CLUSTER_SPECS}", json.dumps({"philly": ["16:0:0"]}))
    write_file(f"{philly.SUBDIR}/{philly.TRACES}/bbb.trace", line(arrival="1.0") + "\n" + line(arrival="9.0") + "\n")
    write_file(f"{philly.SUBDIR}/{philly.TRACES}/aaa.trace", line(arrival="9.0") + "\n")
    workload = philly.load(root)
    assert [j.source for j in workload.jobs] == ["bbb.trace:1", "aaa.trace:1", "bbb.trace:2"]
    assert workload.gpu_capacity_milli == 16_000
    assert [j.source for j in philly.load(root, vcs=["aaa"]).jobs] == ["aaa.trace:1"]
    with pytest.raises(FileNotFoundError, match="zzz"):
        philly.load(root, vcs=["zzz"])


# --- the real traces (skipped without GPUFLEET_TRACE_DIR) ------------------------------------

@pytest.mark.parametrize("gpu_type", ["v100", "p100", "k80"])
def test_real_traces_load_with_positive_durations(trace_root: Path, gpu_type: str) -> None:
    workload = philly.load(trace_root, gpu_type=gpu_type)
    assert len(workload.jobs) == 15264
    assert all(j.duration_s is not None and j.duration_s > 0 for j in workload.jobs)
    assert len({p.queue for j in workload.jobs for p in j.pods}) == 15
    assert workload.gpu_capacity_milli == 500_000
    assert len({p.uid for j in workload.jobs for p in j.pods}) == sum(len(j.pods) for j in workload.jobs)


def test_heterogeneous_cluster_spec_has_three_gpu_types(trace_root: Path) -> None:
    spec = philly.read_cluster_spec(trace_root / philly.SUBDIR / "cluster_specs_heterogeneous.json")
    nodes = philly.cluster_nodes(spec)
    assert dict(spec) == {"v100": 300, "p100": 300, "k80": 300}
    assert {n.gpu_model for n in nodes} == {"V100", "P100", "K80"} and sum(len(n.gpus) for n in nodes) == 900
