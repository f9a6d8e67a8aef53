"""Bad pods, nodes and groups are rejected where they enter, with errors naming the object and field."""

from __future__ import annotations

from typing import Callable

import pytest

from gpufleet.model import (Gpu, GpuKind, GpuRequest, GpuUuid, ModelError, NodeInfo, NodeName,
                            NodeSelectorRequirement, Operator, PodGroup, PodSpec, PodUid, gpu_fraction,
                            mig_slices, whole_gpus)
from gpufleet.testing import make_node, make_pod


def _pod(**kw: object) -> PodSpec:
    return PodSpec(PodUid("team/p"), "p", "team", **kw)  # type: ignore[arg-type]


BAD: list[tuple[str, Callable[[], object], str, str]] = [
    ("negative CPU names the pod and field",
     lambda: _pod(cpu_milli=-1), "pod team/p: cpu_milli", "must not be negative, got -1"),
    ("non-integer CPU names the pod and field",
     lambda: _pod(cpu_milli=0.5), "pod team/p: cpu_milli", "must be a whole number, got 0.5"),
    ("negative memory names the pod and field",
     lambda: _pod(mem_mib=-5), "pod team/p: mem_mib", "must not be negative, got -5"),
    ("a bool is not a memory request",
     lambda: _pod(mem_mib=True), "pod team/p: mem_mib", "must be a whole number, got True"),
    ("a float priority is rejected",
     lambda: _pod(priority=1.5), "pod team/p: priority", "must be an integer, got 1.5"),
    ("a fraction of 0 milli is rejected",
     lambda: gpu_fraction(0, where="pod team/p"), "pod team/p: gpufleet.io/gpu-milli",
     "a GPU fraction must be 1..999 milli, got 0 (use nvidia.com/gpu for whole GPUs)"),
    ("a fraction of 1000 milli is a whole GPU, not a fraction",
     lambda: gpu_fraction(1000, where="pod team/p"), "pod team/p: gpufleet.io/gpu-milli",
     "a GPU fraction must be 1..999 milli, got 1000 (use nvidia.com/gpu for whole GPUs)"),
    ("a negative fraction is rejected",
     lambda: gpu_fraction(-3, where="pod team/p"), "pod team/p: gpufleet.io/gpu-milli",
     "a GPU fraction must be 1..999 milli, got -3 (use nvidia.com/gpu for whole GPUs)"),
    ("a non-integer fraction is rejected",
     lambda: gpu_fraction(2.5, where="pod team/p"), "pod team/p: gpufleet.io/gpu-milli",  # type: ignore[arg-type]
     "must be a whole number of GPU-milli, got 2.5"),
    ("a fraction combined with more than one GPU is rejected",
     lambda: gpu_fraction(500, gpus=2, where="pod team/p"), "pod team/p: gpufleet.io/gpu-milli",
     "a fraction applies to exactly one GPU, but 2 GPUs were asked for"),
    ("a negative GPU-memory request is rejected",
     lambda: gpu_fraction(500, -1, where="pod team/p"), "pod team/p: gpufleet.io/gpu-memory",
     "must be a non-negative MiB count, got -1"),
    ("zero whole GPUs is not a GPU request",
     lambda: whole_gpus(0, "pod team/p"), "pod team/p: nvidia.com/gpu", "must be at least 1, got 0"),
    ("1.5 whole GPUs is an error",
     lambda: whole_gpus(1.5, "pod team/p"), "pod team/p: nvidia.com/gpu",  # type: ignore[arg-type]
     "must be a whole number, got 1.5"),
    ("a MIG profile unknown for the GPU model is rejected",
     lambda: mig_slices("1g.10gb", gpu_model="T4", where="pod team/p"), "pod team/p: nvidia.com/mig-1g.10gb",
     "MIG profile '1g.10gb' does not exist on T4; it has: none (no MIG support)"),
    ("a MIG profile of another A100 size is rejected",
     lambda: mig_slices("1g.20gb", gpu_model="A100-SXM4-40GB", where="pod team/p"),
     "pod team/p: nvidia.com/mig-1g.20gb",
     "MIG profile '1g.20gb' does not exist on A100-SXM4-40GB; it has: 1g.5gb, 1g.5gb+me, 1g.10gb, "
     "2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"),
    ("a MIG profile no GPU has is rejected",
     lambda: mig_slices("9g.1gb", where="pod team/p"), "pod team/p: nvidia.com/mig-9g.1gb", "unknown MIG profile"),
    ("zero MIG slices is rejected",
     lambda: mig_slices("1g.10gb", 0, where="pod team/p"), "pod team/p: nvidia.com/mig-1g.10gb",
     "must be at least 1, got 0"),
    ("a pod allowing only T4 cannot ask for a MIG slice",
     lambda: _pod(gpu=mig_slices("1g.10gb"), gpu_models=frozenset({"T4"})), "pod team/p: nvidia.com/mig-1g.10gb",
     "no allowed GPU model (T4) has this MIG profile"),
    ("a pod allowing only A100-40GB cannot ask for an 80GB-only profile",
     lambda: _pod(gpu=mig_slices("1g.20gb"), gpu_models=frozenset({"A100-40GB", "T4"})),
     "pod team/p: nvidia.com/mig-1g.20gb", "no allowed GPU model (A100-40GB, T4) has this MIG profile"),
    ("a pod group needs minMember of at least 1",
     lambda: PodGroup("g", 0, "team"), "podgroup team/g: minMember", "must be at least 1, got 0"),
    ("In without values is rejected",
     lambda: NodeSelectorRequirement("zone", Operator.IN), "node affinity requirement on 'zone'",
     "In needs at least one value"),
    ("Exists with values is rejected",
     lambda: NodeSelectorRequirement("zone", Operator.EXISTS, ("a",)), "node affinity requirement on 'zone'",
     "Exists takes no values"),
    ("Gt with two values is rejected",
     lambda: NodeSelectorRequirement("gen", Operator.GT, ("1", "2")), "node affinity requirement on 'gen'",
     "Gt needs exactly one value"),
    ("Lt with a non-integer is rejected",
     lambda: NodeSelectorRequirement("gen", Operator.LT, ("x",)), "node affinity requirement on 'gen'",
     "Lt needs an integer, got 'x'"),
    ("a builder names the pod too",
     lambda: make_pod("trainer").fraction(1200), "pod trainer: gpufleet.io/gpu-milli",
     "a GPU fraction must be 1..999 milli, got 1200 (use nvidia.com/gpu for whole GPUs)"),
]


@pytest.mark.parametrize(("build", "where", "problem"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_pod_input_names_pod_and_field(build: Callable[[], object], where: str, problem: str) -> None:
    with pytest.raises(ModelError) as err:
        build()
    assert err.value.where == where
    assert err.value.problem.startswith(problem)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ModelError) as err:
        mig_slices("9g.1gb")
    assert "1g.10gb" in err.value.problem and "7g.141gb" in err.value.problem


@pytest.mark.parametrize(("request_", "expected"), [
    (lambda: whole_gpus(4), GpuRequest(GpuKind.WHOLE, 4, 1000)),
    (lambda: gpu_fraction(1), GpuRequest(GpuKind.FRACTION, 1, 1)),
    (lambda: gpu_fraction(999, 2048), GpuRequest(GpuKind.FRACTION, 1, 999, 2048)),
    (lambda: mig_slices("1g.10gb", 2, gpu_model="NVIDIA-H100-80GB-HBM3"), GpuRequest(GpuKind.MIG, 2, 0, 0, "1g.10gb")),
    (lambda: mig_slices("3g.47gb", gpu_model="NVIDIA H100 NVL"), GpuRequest(GpuKind.MIG, 1, 0, 0, "3g.47gb")),
], ids=[
    "four whole GPUs are 1000 milli each",
    "1 milli is the smallest fraction",
    "999 milli with GPU memory is the largest fraction",
    "an H100 product name maps to its MIG table",
    "an H100 NVL maps to the 94GB table",
])
def test_valid_gpu_requests(request_: Callable[[], GpuRequest], expected: GpuRequest) -> None:
    assert request_() == expected


def test_total_milli_counts_whole_and_fraction_but_not_mig() -> None:
    assert [whole_gpus(2).total_milli, gpu_fraction(300).total_milli, mig_slices("1g.10gb", 3).total_milli] == \
        [2000, 300, 0]


def test_a100_40gb_does_have_a_1g_10gb_profile() -> None:
    """1g.10gb is a real A100-40GB profile (4 instances), so this pod is valid."""
    pod = _pod(gpu=mig_slices("1g.10gb"), gpu_models=frozenset({"A100-40GB"}))
    assert pod.gpu.mig_profile == "1g.10gb"


# -- nodes ----------------------------------------------------------------------------------

def _gpu(i: int, model: str = "H100-80GB", mig: tuple[str, ...] = ()) -> Gpu:
    return Gpu(GpuUuid(f"GPU-{i}"), model, 80 * 1024, i, mig_slices=mig)


BAD_NODES: list[tuple[str, Callable[[], object], str, str]] = [
    ("a node with mixed GPU models is rejected",
     lambda: NodeInfo(NodeName("n1"), 1000, 1024, gpus=(_gpu(0), _gpu(1, "T4"))),
     "node n1", "GPUs of several models on one node: ['H100-80GB', 'T4']"),
    ("a MIG layout over 7 compute slices is rejected",
     lambda: make_node("n1").gpus(1).mig(0, "7g.80gb", "1g.10gb").build(),
     "node n1: gpus[0] (GPU-n1-0)", "MIG layout ['7g.80gb', '1g.10gb'] needs 8/7 compute slices and 9/8 memory"),
    ("a MIG layout over 8 memory eighths is rejected",
     lambda: make_node("n1").gpus(1).mig(0, "4g.40gb", "1g.20gb", "1g.20gb", "1g.20gb").build(),
     "node n1: gpus[0] (GPU-n1-0)", "MIG layout ['4g.40gb', '1g.20gb', '1g.20gb', '1g.20gb'] needs 7/7 compute "
                                    "slices and 10/8 memory slices"),
    ("a MIG profile more often than the GPU has instances of it is rejected",
     lambda: make_node("n1").gpus(1).mig(0, "1g.10gb+me", "1g.10gb+me").build(),
     "node n1: gpus[0] (GPU-n1-0)", "MIG layout ['1g.10gb+me', '1g.10gb+me'] has 2 x 1g.10gb+me; "
                                    "H100-80GB allows at most 1"),
    ("a MIG slice of another model is rejected",
     lambda: make_node("n1").gpus(2, model="A100-40GB", mem_gib=40).mig(1, "1g.20gb").build(),
     "node n1: gpus[1] (GPU-n1-1)", "MIG profile '1g.20gb' does not exist on A100-40GB"),
    ("MIG on a GPU without MIG is rejected",
     lambda: make_node("n1").gpus(1, model="T4", mem_gib=16).mig(0, "1g.10gb").build(),
     "node n1: gpus[0] (GPU-n1-0)", "MIG profile '1g.10gb' does not exist on T4"),
    ("negative node CPU names the field",
     lambda: make_node("n1").cpu(-1).build(), "node n1: cpu_milli", "must be a non-negative integer, got -1"),
    ("a float max-pods names the field",
     lambda: make_node("n1").max_pods(1.5).build(),  # type: ignore[arg-type]
     "node n1: max_pods", "must be a non-negative integer, got 1.5"),
    ("negative GPU memory is rejected",
     lambda: NodeInfo(NodeName("n1"), 1000, 1024, gpus=(Gpu(GpuUuid("g"), "T4", -1),)),
     "node n1: gpus[0] (g)", "mem_mib must be non-negative, got -1"),
    ("duplicate GPU UUIDs are rejected",
     lambda: NodeInfo(NodeName("n1"), 1000, 1024, gpus=(_gpu(0), _gpu(0))), "node n1", "duplicate GPU UUIDs"),
]


@pytest.mark.parametrize(("build", "where", "problem"), [c[1:] for c in BAD_NODES], ids=[c[0] for c in BAD_NODES])
def test_bad_node_input_names_node_and_field(build: Callable[[], object], where: str, problem: str) -> None:
    with pytest.raises(ModelError) as err:
        build()
    assert err.value.where == where
    assert err.value.problem.startswith(problem)


def test_a_full_mig_layout_is_accepted() -> None:
    node = make_node("n1").gpus(1).mig(0, "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb").build()
    assert node.gpus[0].mig_enabled and node.gpu_model == "H100-80GB"
