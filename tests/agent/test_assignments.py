"""Which scheduler assignments the agent trusts, and the order it uses them in."""

from __future__ import annotations

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent.assignments import AssignmentBook, assigned_devices, trusted_assignment
from gpufleet.agent.kube import FakeNodeApi, PodView
from gpufleet.model import annotations as ann

NODE = "n1"
A100 = [f"GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a0{i}" for i in range(1, 5)]


def pod(name: str = "p", *, scheduler: str = "gpufleet", node: str | None = NODE, text: str | None = None,
        phase: str = "Pending", created: str = "2026-01-01T00:00:00Z") -> PodView:
    if text is None:
        text = ann.encode_assignment(ann.GpuAssignment(NODE, ("GPU-a",), 1000))
    return PodView("ns", name, f"uid-{name}", node, scheduler, phase, created, {ann.ASSIGNMENT_ANNOTATION: text})


@pytest.mark.parametrize("p, trusted", [
    (pod(), True),
    (pod(scheduler="default-scheduler"), False),
    (pod(node=None), False),
    (pod(node="n2"), False),
    (pod(text=ann.encode_assignment(ann.GpuAssignment("n2", ("GPU-a",), 1000))), False),
    (pod(text="{not json"), False),
], ids=["a pod gpufleet bound here is trusted", "another scheduler's pod is not",
        "an unbound pod is not", "a pod bound elsewhere is not", "an assignment for another node is not",
        "a broken annotation is ignored"])
def test_trust_rules(p: PodView, trusted: bool) -> None:
    assert (trusted_assignment(p, NODE) is not None) is trusted


def test_candidates_are_pending_trusted_unconsumed_and_oldest_first() -> None:
    api = FakeNodeApi(pods=[pod("young", created="2026-01-02T00:00:00Z"), pod("old"),
                            pod("running", phase="Running"), pod("foreign", scheduler="other")])
    book = AssignmentBook(api, NODE)
    assert [c.pod.name for c in book.candidates()] == ["old", "young"]
    book.consume(book.candidates()[0])
    assert [c.pod.name for c in book.candidates()] == ["young"]


def test_a_consumed_pod_that_is_gone_is_forgotten() -> None:
    api = FakeNodeApi(pods=[pod("a")])
    book = AssignmentBook(api, NODE)
    book.consume(book.candidates()[0])
    api.pods = []
    assert book.candidates() == []
    api.pods = [pod("a")]  # a new pod with the same uid would be served again
    assert [c.pod.name for c in book.candidates()] == ["a"]


def test_assigned_devices_resolve_mig_slices_through_the_inventory() -> None:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    a = ann.GpuAssignment(NODE, mig=(ann.MigSliceRef(A100[0], 1), ann.MigSliceRef(A100[2], 0)))
    assert assigned_devices(a, inv) == {"MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a02",
                                        "MIG-8c2e1a3b-4d5f-6a7b-0c9d-8e7f6a5b4c01"}
    assert assigned_devices(ann.GpuAssignment(NODE, mig=(ann.MigSliceRef(A100[2], 5),)), inv) is None
    assert assigned_devices(ann.GpuAssignment(NODE, ("GPU-elsewhere",), 1000), inv) is None


def test_assigned_devices_go_by_mig_uuid_when_the_assignment_names_one() -> None:
    """A layout change moved the instance: its index names another one now, its UUID still names it."""
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    moved = ann.MigSliceRef(A100[0], 0, "MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a04")  # index 3 on the fixture
    assert assigned_devices(ann.GpuAssignment(NODE, mig=(moved,)), inv) == {"MIG-5a0c9e1f-2b3d-5e4f-8a7b-6c5d4e3f2a04"}
    destroyed = ann.MigSliceRef(A100[0], 0, "MIG-destroyed")
    assert assigned_devices(ann.GpuAssignment(NODE, mig=(destroyed,)), inv) is None
