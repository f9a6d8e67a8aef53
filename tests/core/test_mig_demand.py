"""The MIG requests of unschedulable pods (core/mig_demand.py): each names the MIG GPUs of the
nodes where its pod passes every filter but the GPU fit, so repartitioning never changes a GPU
the pod could not use (a node selector, taints, CPU, GPU model)."""

from __future__ import annotations

from gpufleet.core.mig_demand import mig_requests
from gpufleet.core.mig_planner import MigRequest
from gpufleet.framework.profile import ProfileSettings, build_profile
from gpufleet.model import ClusterSnapshot, GpuUuid, NodeInfo, PodSpec
from gpufleet.testing import make_node, make_pod

PROFILE = build_profile(ProfileSettings())


def nodes() -> list[NodeInfo]:
    """a, b: one A100 each with MIG on (b tainted, labelled pool=b); c: an H100 with MIG on; d: MIG off."""
    return [make_node("a").cpu(8_000).gpus(1, model="A100-80GB").mig(0, "1g.10gb").build(),
            make_node("b").cpu(8_000).gpus(1, model="A100-80GB").mig(0, "1g.10gb").label("pool", "b")
            .taint("dedicated").build(),
            make_node("c").cpu(64_000).gpus(1, model="H100-80GB").mig(0, "1g.10gb").build(),
            make_node("d").cpu(64_000).gpus(2, model="H100-80GB").build()]


def requests(*pods: PodSpec) -> list[MigRequest]:
    return mig_requests(ClusterSnapshot.build(nodes()), pods, {p.uid for p in pods}, PROFILE, 0.0)


def gpus(*names: str) -> frozenset[GpuUuid]:
    return frozenset(GpuUuid(f"GPU-{n}-0") for n in names)


def test_each_slice_of_each_unschedulable_mig_pod_in_queue_order() -> None:
    first, second = make_pod("x").mig("3g.40gb").build(), make_pod("y").mig("1g.10gb", 2).build()
    whole = make_pod("w").gpus(1).build()
    got = mig_requests(ClusterSnapshot.build(nodes()), [first, whole, second], {second.uid, whole.uid, first.uid},
                       PROFILE, 0.0)
    assert [r.profile for r in got] == ["3g.40gb", "1g.10gb", "1g.10gb"]
    assert got[0].gpus == gpus("a", "c")  # b is tainted; d has MIG off
    assert mig_requests(ClusterSnapshot.build(nodes()), [first, second], {second.uid}, PROFILE, 0.0) == [
        MigRequest("1g.10gb", gpus("a", "c"))] * 2


def test_a_pods_node_selector_tolerations_cpu_and_models_narrow_its_gpus() -> None:
    assert requests(make_pod("p").mig("1g.10gb").selector("pool", "b").tolerate("dedicated").build())[0].gpus \
        == gpus("b")
    assert requests(make_pod("p").mig("1g.10gb").tolerate("dedicated").build())[0].gpus == gpus("a", "b", "c")
    assert requests(make_pod("p").mig("1g.10gb").cpu(16_000).build())[0].gpus == gpus("c")
    assert requests(make_pod("p").mig("1g.10gb").models("A100-80GB").build())[0].gpus == gpus("a")


def test_a_pod_no_node_could_take_whatever_its_gpus_names_none() -> None:
    assert requests(make_pod("p").mig("1g.10gb").selector("pool", "nowhere").build()) == [
        MigRequest("1g.10gb", frozenset())]
