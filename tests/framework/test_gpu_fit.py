"""GpuFit: which nodes can give the pod its GPUs, why the others cannot, and which devices it gets."""

from __future__ import annotations

from typing import Sequence

import pytest
from pluginkit import holding, mask, reasons, snapshot, state

from gpufleet.framework.plugins.gpu_fit import MODEL_REASON, NO_GPU_REASON, GpuFit, model_mask
from gpufleet.model import NodeInfo, Placement, PodSpec
from gpufleet.testing import NodeBuilder, make_node, make_pod

GIB = 1024
T4 = dict(model="T4", mem_gib=16)


def _mig_node(name: str = "a") -> NodeBuilder:
    """Two H100s; GPU 0 carved into 3g.40gb (slice 0) and three 1g.10gb (slices 1-3)."""
    return make_node(name).gpus(2).mig(0, "3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb")


# a: GPU 0 has 500 milli and 1 GiB free; GPU 1 has 100 milli and 16 GiB free.
SPLIT = ([make_node("a").gpus(2, **T4).build()],  # type: ignore[arg-type]
         [holding("r0", "a", gpus=(0,), milli=500, gpu_mem_mib=15 * GIB), holding("r1", "a", gpus=(1,), milli=900)])

Case = tuple[str, Sequence[NodeInfo], Sequence[Placement], PodSpec, list[bool], dict[int, tuple[int, ...]],
             dict[str, list[bool]]]
CASES: list[Case] = [
    ("whole GPUs need that many fully free devices",
     [make_node("a").gpus(4).build(), make_node("b").gpus(4).build()],
     [holding(f"r{j}", "a", gpus=(j,), milli=100) for j in range(3)],
     make_pod("p").gpus(2).build(), [False, True], {1: (0, 1)}, {"Insufficient GPU": [True, False]}),
    ("a device holding a 1-milli fraction is not free for a whole GPU",
     [make_node("a").gpus(1).build()], [holding("r", "a", gpus=(0,), milli=1)],
     make_pod("p").gpus(1).build(), [False], {}, {"Insufficient GPU": [True]}),
    ("a fraction needs one device with enough free milli and takes the tightest",
     [make_node("a").gpus(3, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=800), holding("r1", "a", gpus=(1,), milli=500)],
     make_pod("p").fraction(300).build(), [True], {0: (1,)}, {}),
    ("a fraction's exact fit leaves its device full",
     [make_node("a").gpus(2, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(1,), milli=700)], make_pod("p").fraction(300).build(), [True], {0: (1,)}, {}),
    ("a fraction asking exactly the largest free share of any device fits there",
     [make_node("a").gpus(2, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=700), holding("r1", "a", gpus=(1,), milli=900)],
     make_pod("p").fraction(300).build(), [True], {0: (0,)}, {}),
    ("between equally tight devices a fraction takes the lowest index",
     [make_node("a").gpus(3, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=500), holding("r1", "a", gpus=(1,), milli=800),
      holding("r2", "a", gpus=(2,), milli=500)],
     make_pod("p").fraction(300).build(), [True], {0: (0,)}, {}),
    ("a fraction asking exactly the GPU memory a used device has left fits there",
     [make_node("a").gpus(2, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=500, gpu_mem_mib=12 * GIB),
      holding("r1", "a", gpus=(1,), milli=200, gpu_mem_mib=12 * GIB)],
     make_pod("p").fraction(300, mem_mib=4 * GIB).build(), [True], {0: (0,)}, {}),
    ("a fraction may ask for all of a free GPU's memory",
     [make_node("a").gpus(1, **T4).build()], [],  # type: ignore[arg-type]
     make_pod("p").fraction(300, mem_mib=16 * GIB).build(), [True], {0: (0,)}, {}),
    ("a fraction skips a device with enough milli but too little GPU memory",
     [make_node("a").gpus(2, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=500, gpu_mem_mib=15 * GIB), holding("r1", "a", gpus=(1,), milli=700)],
     make_pod("p").fraction(300, mem_mib=4 * GIB).build(), [True], {0: (1,)}, {}),
    ("milli free on one device and memory free on another do not add up to a fit",
     *SPLIT, make_pod("p").fraction(300, mem_mib=4 * GIB).build(), [False], {},
     {"Insufficient GPU memory": [True]}),
    ("a free GPU takes a fraction with a GPU-memory request (no per-device check needed)",
     [make_node("a").gpus(2, **T4).build(), make_node("b").gpus(1, **T4).build()],  # type: ignore[arg-type]
     [holding("r0", "a", gpus=(0,), milli=200, gpu_mem_mib=15 * GIB), holding("r1", "b", gpus=(0,), milli=100)],
     make_pod("p").fraction(300, mem_mib=4 * GIB).build(), [True, True], {0: (1,), 1: (0,)}, {}),
    ("a fraction without a GPU-memory request ignores GPU memory",
     *SPLIT, make_pod("p").fraction(300).build(), [True], {0: (0,)}, {}),
    ("a fraction larger than any device's free share is Insufficient GPU, not also memory",
     *SPLIT, make_pod("p").fraction(600, mem_mib=1).build(), [False], {}, {"Insufficient GPU": [True]}),
    ("MIG needs a free slice of that profile and takes the lowest free one",
     [_mig_node().build()], [holding("r", "a", mig=(1,))], make_pod("p").mig("1g.10gb").build(), [True],
     {0: (2,)}, {}),
    ("MIG asking for exactly the free slices of its profile fits and takes them all",
     [_mig_node().build()], [holding("r", "a", mig=(1,))], make_pod("p").mig("1g.10gb", 2).build(), [True],
     {0: (2, 3)}, {}),
    ("MIG asking for more slices than are free does not fit",
     [_mig_node().build()], [holding("r", "a", mig=(1,))], make_pod("p").mig("1g.10gb", 3).build(), [False], {},
     {"Insufficient MIG 1g.10gb": [True]}),
    ("a MIG profile carved nowhere fits nowhere",
     [_mig_node().build()], [], make_pod("p").mig("7g.80gb").build(), [False], {},
     {"Insufficient MIG 7g.80gb": [True]}),
    ("MIG GPUs are not used for whole requests",
     [_mig_node().build()], [], make_pod("p").gpus(2).build(), [False], {}, {"Insufficient GPU": [True]}),
    ("the one non-MIG GPU serves a one-GPU request",
     [_mig_node().build()], [], make_pod("p").gpus(1).build(), [True], {0: (1,)}, {}),
    ("MIG GPUs are not used for fractions",
     [_mig_node().build()], [holding("r", "a", gpus=(1,), milli=900)], make_pod("p").fraction(200).build(), [False],
     {}, {"Insufficient GPU": [True]}),
    ("unhealthy GPUs are never used for whole GPUs",
     [make_node("a").gpus(2).unhealthy(0).build()], [], make_pod("p").gpus(2).build(), [False], {},
     {"Insufficient GPU": [True]}),
    ("a whole GPU goes to the healthy device",
     [make_node("a").gpus(2).unhealthy(0).build()], [], make_pod("p").gpus(1).build(), [True], {0: (1,)}, {}),
    ("unhealthy GPUs are never used for fractions",
     [make_node("a").gpus(2).unhealthy(1).build()], [holding("r", "a", gpus=(0,), milli=900)],
     make_pod("p").fraction(200).build(), [False], {}, {"Insufficient GPU": [True]}),
    ("MIG slices on an unhealthy GPU are never used",
     [_mig_node().unhealthy(0).build()], [], make_pod("p").mig("1g.10gb").build(), [False], {},
     {"Insufficient MIG 1g.10gb": [True]}),
    ("allowed GPU models filter nodes of other models and nodes without GPUs",
     [make_node("a").gpus(1, **T4).build(), make_node("b").gpus(1, model="A100-80GB").build(),  # type: ignore[arg-type]
      make_node("c").build()],
     [], make_pod("p").gpus(1).models("A100-80GB").build(), [False, True, False], {1: (0,)},
     {MODEL_REASON: [True, False, True]}),
    ("a node of the wrong model is reported for its model only, even when it is also full",
     [make_node("a").gpus(1, **T4).build(), make_node("b").gpus(1, model="A100-80GB").build()],  # type: ignore[arg-type]
     [holding("r", "a", gpus=(0,)), holding("s", "b", gpus=(0,))], make_pod("p").gpus(1).models("A100-80GB").build(),
     [False, False], {}, {MODEL_REASON: [True, False], "Insufficient GPU": [False, True]}),
    ("allowed models apply to MIG requests too",
     [make_node("a").gpus(1, model="A100-80GB").mig(0, "1g.10gb").build(), _mig_node("b").build()],
     [], make_pod("p").mig("1g.10gb").models("H100-80GB").build(), [False, True], {1: (1,)},
     {MODEL_REASON: [True, False]}),
    ("a node without GPUs says so, once",
     [make_node("a").build(), make_node("b").gpus(1).build()], [holding("r", "b", gpus=(0,))],
     make_pod("p").gpus(1).build(), [False, False], {},
     {NO_GPU_REASON: [True, False], "Insufficient GPU": [False, True]}),
    ("a CPU-only pod is not filtered, not even by its allowed models",
     [make_node("a").build(), make_node("b").gpus(1, **T4).build()], [],  # type: ignore[arg-type]
     make_pod("p").models("A100-80GB").build(), [True, True], {}, {}),
]


@pytest.mark.parametrize(("nodes", "running", "pod", "expected", "devices", "why"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_gpu_fit(nodes: Sequence[NodeInfo], running: Sequence[Placement], pod: PodSpec, expected: list[bool],
                 devices: dict[int, tuple[int, ...]], why: dict[str, list[bool]]) -> None:
    snap = snapshot(nodes, running)
    plugin = GpuFit()
    assert mask(plugin, snap, pod) == expected
    assert reasons(plugin, snap, pod) == why
    assert {i: plugin.pick_devices(state(), pod, snap, i) for i in devices} == devices


OUT_REQUESTS = [
    ("a whole GPU", make_pod("p").gpus(1).build()),
    ("a fraction", make_pod("p").fraction(300).build()),
    ("a fraction with a GPU-memory request", make_pod("p").fraction(300, mem_mib=4 * GIB).build()),
    ("a MIG slice", make_pod("p").mig("1g.10gb").build()),
]


@pytest.mark.parametrize("pod", [r[1] for r in OUT_REQUESTS], ids=[r[0] for r in OUT_REQUESTS])
def test_a_node_that_is_out_gives_no_gpu_to_any_request(pod: PodSpec) -> None:
    # a is NotReady (quarantined): its devices are healthy and free, yet none of them counts.
    snap = snapshot([_mig_node("a").build(), _mig_node("b").build()])
    snap.usage.set_ready(0, False)
    assert mask(GpuFit(), snap, pod) == [False, True]
    assert any(failing[0] for failing in reasons(GpuFit(), snap, pod).values())


def test_pods_allowing_the_same_models_share_one_model_mask_per_cycle() -> None:
    # The mask is worked out once per cycle for each allowed-model set (a large pending queue
    # usually repeats a few sets), whatever the request kind, and filtering does not alter it.
    snap = snapshot([make_node("a").gpus(1, **T4).build(),  # type: ignore[arg-type]
                     make_node("b").gpus(1, model="A100-80GB").build(), make_node("c").build()])
    cycle = state()
    whole = make_pod("p").gpus(1).models("A100-80GB").build()
    fraction = make_pod("q").fraction(300).models("A100-80GB").build()
    either = make_pod("r").gpus(1).models("T4", "A100-80GB").build()
    too_big = make_pod("s").gpus(2).models("A100-80GB").build()
    first = model_mask(cycle, whole, snap)
    assert first is not None and [bool(x) for x in first] == [False, True, False]
    assert model_mask(cycle, fraction, snap) is first
    filtered = GpuFit().filter(cycle, too_big, snap)
    assert filtered is not None and not filtered.any()
    assert [bool(x) for x in first] == [False, True, False]  # still what the next pod with that set gets
    other = model_mask(cycle, either, snap)
    assert other is not None and [bool(x) for x in other] == [True, True, False]
    assert model_mask(state(), whole, snap) is not first  # the next cycle works it out afresh


EIGHT_TWO_DOMAINS = make_node("a").gpus(8, nvlink_domains=2)
EIGHT_TWO_NUMA = make_node("a").gpus(8, nvlink_domains=0, numa_nodes=2)

DEVICE_CASES: list[tuple[str, NodeInfo, tuple[int, ...], int, tuple[int, ...]]] = [
    ("two whole GPUs go to the smallest NVLink domain that holds them", EIGHT_TWO_DOMAINS.build(), (0,), 2, (1, 2)),
    ("four whole GPUs take the NVLink domain that is wholly free", EIGHT_TWO_DOMAINS.build(), (0,), 4, (4, 5, 6, 7)),
    ("two whole GPUs prefer the tighter of two fitting domains",
     EIGHT_TWO_DOMAINS.build(), (0, 4, 5), 2, (6, 7)),
    ("without NVLink, whole GPUs stay on one NUMA node", EIGHT_TWO_NUMA.build(), (0, 1, 4), 3, (5, 6, 7)),
    ("without NVLink, the smaller NUMA group that fits is used", EIGHT_TWO_NUMA.build(), (0, 1, 4), 2, (2, 3)),
    ("when no domain or NUMA node holds them all, the lowest free indices are used",
     EIGHT_TWO_NUMA.build(), (0, 1, 4, 5), 3, (2, 3, 6)),
    ("a request for every free GPU takes them all", EIGHT_TWO_DOMAINS.build(), (0, 7), 6, (1, 2, 3, 4, 5, 6)),
    ("a single GPU takes the lowest free index", EIGHT_TWO_DOMAINS.build(), (0,), 1, (1,)),
]


@pytest.mark.parametrize(("node", "busy", "count", "expected"), [c[1:] for c in DEVICE_CASES],
                         ids=[c[0] for c in DEVICE_CASES])
def test_whole_gpu_device_choice(node: NodeInfo, busy: tuple[int, ...], count: int, expected: tuple[int, ...]) -> None:
    snap = snapshot([node], [holding(f"r{j}", "a", gpus=(j,)) for j in busy])
    pod = make_pod("p").gpus(count).build()
    assert mask(GpuFit(), snap, pod) == [True]
    assert GpuFit().pick_devices(state(), pod, snap, 0) == expected
