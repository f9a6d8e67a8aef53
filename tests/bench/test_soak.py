"""bench/soak.py's workload and figures: the soak's verdicts rest on them."""

from __future__ import annotations

import math
from collections import Counter
from types import ModuleType

import pytest

from gpufleet.kube import translate
from gpufleet.testing.cluster import DURATION_ANNOTATION
from gpufleet.testing.cluster.cluster import START_DELAY_ANNOTATION
from gpufleet.testing.gpu_nodes import gpu_nodes

from . import load



@pytest.fixture(scope="module")
def soak() -> ModuleType:
    return load("soak.py", "soak_bench")


def test_the_stream_has_no_pod_that_fits_nowhere_and_gangs_come_whole(soak: ModuleType) -> None:
    nodes = gpu_nodes(50, seed=7)
    stream = soak.Stream(nodes, 1, 300, 1500, "2s")
    jobs = [next(stream) for _ in range(400)]
    pods = [o for job in jobs for o in job if o["kind"] == "Pod"]
    assert not [p for p in pods if soak.fits_nowhere(p)]
    gangs = [job for job in jobs if job[0]["kind"] == "PodGroup"]
    assert gangs, "the mix has gangs"
    for group, *members in gangs:
        assert len(members) == group["spec"]["minMember"]
        assert {m["metadata"]["labels"][translate.POD_GROUP_LABEL] for m in members} == {group["metadata"]["name"]}
        assert len({m["metadata"]["annotations"][DURATION_ANNOTATION] for m in members}) == 1, "one duration per gang"
    seconds = [float(p["metadata"]["annotations"][DURATION_ANNOTATION].rstrip("s")) for p in pods]
    assert 300 <= min(seconds) and max(seconds) <= 1500
    assert {p["metadata"]["annotations"][START_DELAY_ANNOTATION] for p in pods} == {"2s"}
    assert len({p["metadata"]["name"] for p in pods}) == len(pods)


def test_each_resource_class_gets_the_rate_that_keeps_the_asked_share_of_it_busy(soak: ModuleType) -> None:
    nodes = gpu_nodes(100, seed=7)
    rates = soak.arrival_rates(nodes, 0.85, 900.0)
    capacity = Counter[str]()
    for n in nodes:
        for resource, value in n["status"]["capacity"].items():
            if resource.startswith(("nvidia.com/gpu", "nvidia.com/mig-")):
                capacity[resource] += int(value)
    assert set(rates) == {"gpu", "cpu", *(r for r in capacity if r.startswith("nvidia.com/mig-"))}
    assert rates["gpu"].capacity == capacity["nvidia.com/gpu"]
    assert 0.5 < rates["gpu"].mean_demand < 4
    for cls, r in rates.items():
        if cls != "cpu":
            assert r.rate_per_s * r.mean_demand * 900.0 == pytest.approx(0.85 * capacity[cls if cls != "gpu" else "nvidia.com/gpu"])
    # CPU-only pods keep their share of the mix (15 % of pods against 56 % with GPUs, in workload.pod_manifests)
    assert 0.15 < rates["cpu"].rate_per_s / rates["gpu"].rate_per_s < 0.4


def test_a_class_stream_keeps_only_its_class(soak: ModuleType) -> None:
    nodes = gpu_nodes(50, seed=7)
    for cls in ("gpu", "cpu", "nvidia.com/mig-2g.20gb"):
        stream = soak.Stream(nodes, 1, 300, 1500, "2s", only=cls)
        pods = [o for _ in range(100) for o in next(stream) if o["kind"] == "Pod"]
        assert pods and {soak.resource_class(p) for p in pods} == {cls}


def test_the_figures(soak: ModuleType) -> None:
    assert soak.p99_ms([i / 1000 for i in range(1, 101)]) == pytest.approx(99.0)
    assert math.isnan(soak.p99_ms([]))
    flat = [(t, 100.0) for t in range(0, 3600, 10)]
    assert soak.growth_pct(flat, 1200, 3600) == 0
    growing = [(t, 100.0 + 10 * t / 3600) for t in range(0, 3600, 10)]
    assert 4 < soak.growth_pct(growing, 1200, 3600) < 6  # 5 % from minute 20 to minute 60, medians of 5-minute windows
    assert math.isnan(soak.growth_pct(flat, 3600, 3700))
