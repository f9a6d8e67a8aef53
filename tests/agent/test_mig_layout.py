"""Applying a MIG layout on the fake backend (agent/mig_layout.py): the kept instances stay, the
unwanted go, the missing are carved at their placements; bad layouts are refused naming why; an
instance in use is never destroyed; a failed step puts the old layout back."""

from __future__ import annotations

import json

import pytest

from gpufleet.agent import fake, inventory
from gpufleet.agent.backend import BackendError
from gpufleet.agent.devices import CarvedInstance
from gpufleet.agent import mig_layout as ml
from gpufleet.agent.fake import FakeBackend
from gpufleet.agent.inventory import GpuEntry
from gpufleet.agent.mig_layout import LayoutError, Placed

MIXED = "GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a01"
"""a100-mig's first GPU: 2g.10gb@0, 1g.5gb@2, 1g.5gb@3, 3g.20gb@4."""
ALL_1G = "GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a02"
WHOLE = "GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a04"
"""MIG off."""


@pytest.fixture
def backend() -> FakeBackend:
    return fake.load_fixture("a100-mig")


def gpu(b: FakeBackend, uuid: str) -> GpuEntry:
    entry = inventory.inventory(b.system(), b.devices()).gpu(uuid)
    assert entry is not None
    return entry


def layout(b: FakeBackend, uuid: str) -> list[str]:
    return sorted(str(p) for p in ml.current(gpu(b, uuid)))


def placed(*items: str) -> tuple[Placed, ...]:
    return tuple(sorted(Placed(p, int(s)) for p, _, s in (i.partition("@") for i in items)))


def test_a_change_keeps_what_is_wanted_destroys_the_rest_and_carves_the_missing(backend: FakeBackend) -> None:
    kept = {s.profile: s.uuid for s in gpu(backend, MIXED).mig_slices if s.profile == "3g.20gb"}
    change = ml.diff(gpu(backend, MIXED), placed("1g.5gb@0", "1g.5gb@1", "1g.10gb@2", "3g.20gb@4"))
    assert sorted(s.profile for s in change.destroy) == ["1g.5gb", "1g.5gb", "2g.10gb"]
    assert sorted((o.profile, start, size) for o, start, size in change.create) == \
        [("1g.10gb", 2, 2), ("1g.5gb", 0, 1), ("1g.5gb", 1, 1)]
    created = ml.apply(backend, change, frozenset())
    assert len(created) == 3
    assert layout(backend, MIXED) == ["1g.10gb@2", "1g.5gb@0", "1g.5gb@1", "3g.20gb@4"]
    assert kept["3g.20gb"] in {s.uuid for s in gpu(backend, MIXED).mig_slices}  # untouched, same UUID


def test_the_same_layout_is_no_change(backend: FakeBackend) -> None:
    same = tuple(ml.current(gpu(backend, MIXED)))
    assert ml.diff(gpu(backend, MIXED), same).empty


@pytest.mark.parametrize("want,message", [
    (("4g.20gb@4",), "4g.20gb may start at memory slice 0, not 4"),
    (("3g.20gb@0", "2g.10gb@2"), "both hold memory slice 2"),
    (("9g.99gb@0",), "the GPU offers no profile '9g.99gb'"),
    (("1g.5gb+me@0", "1g.5gb+me@1"), "2 x 1g.5gb+me; the GPU holds at most 1"),
], ids=["a placement the profile does not allow", "an overlap", "an unknown profile", "too many +me"])
def test_a_layout_the_gpu_cannot_hold_is_refused_naming_why(backend: FakeBackend, want: tuple[str, ...],
                                                             message: str) -> None:
    with pytest.raises(LayoutError, match="GPU " + MIXED) as refused:
        ml.diff(gpu(backend, MIXED), placed(*want))
    assert message in str(refused.value)


def test_mig_mode_is_not_switched(backend: FakeBackend) -> None:
    with pytest.raises(LayoutError, match="MIG mode is off"):
        ml.diff(gpu(backend, WHOLE), placed("7g.40gb@0"))
    assert not gpu(backend, WHOLE).mig_enabled


def test_an_instance_in_use_is_never_destroyed_and_nothing_changes(backend: FakeBackend) -> None:
    before = layout(backend, ALL_1G)
    used = next(s.uuid for s in gpu(backend, ALL_1G).mig_slices if s.placement_start == 5)
    change = ml.diff(gpu(backend, ALL_1G), placed("1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"))
    with pytest.raises(LayoutError, match=f"in use by a pod or a prepared claim; nothing changed") as refused:
        ml.apply(backend, change, frozenset({used}))
    assert used in str(refused.value)
    assert layout(backend, ALL_1G) == before


def test_a_busy_device_stops_the_change_and_the_old_layout_comes_back(backend: FakeBackend) -> None:
    """The backend finds a process on the fifth instance after four were destroyed: those four are carved again."""
    before = layout(backend, ALL_1G)
    backend.busy.add(next(s.uuid for s in gpu(backend, ALL_1G).mig_slices if s.placement_start == 6))
    change = ml.diff(gpu(backend, ALL_1G), placed("7g.40gb@0"))
    with pytest.raises(LayoutError, match="device busy.*the old layout is back"):
        ml.apply(backend, change, frozenset())
    assert layout(backend, ALL_1G) == before


def test_a_failed_carve_destroys_what_was_created_and_restores_what_was_destroyed(
        backend: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second carve fails once (NVML out of resources): the first new instance is destroyed
    and the two destroyed ones (2g.10gb@0, 3g.20gb@4) are carved again."""
    before = layout(backend, MIXED)
    change = ml.diff(gpu(backend, MIXED), placed("1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3"))
    carve, calls = backend.create_mig_instance, []

    def fails_second(gpu_uuid: str, profile_id: int, start: int, size: int) -> CarvedInstance:
        calls.append(start)
        if len(calls) == 2:
            raise BackendError(f"GPU {gpu_uuid}: cannot create a GPU instance: Insufficient Resources")
        return carve(gpu_uuid, profile_id, start, size)

    monkeypatch.setattr(backend, "create_mig_instance", fails_second)
    with pytest.raises(LayoutError, match=f"^GPU {MIXED}: .*Insufficient Resources; the old layout is back$"):
        ml.apply(backend, change, frozenset())
    assert layout(backend, MIXED) == before
    assert calls == [0, 1, 4, 0]  # two new ones (the second fails), then the destroyed ones, newest first


def test_a_rollback_that_fails_too_names_what_the_gpu_lost(backend: FakeBackend) -> None:
    change = ml.diff(gpu(backend, MIXED), placed("1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3"))
    backend.fail_compute_instance = "Insufficient Resources"  # every carve fails, the rollback's too
    with pytest.raises(LayoutError, match="could not restore 3g.20gb@4, 2g.10gb@0: the GPU is left without them"):
        ml.apply(backend, change, frozenset())
    assert layout(backend, MIXED) == ["1g.5gb@2", "1g.5gb@3"]


@pytest.mark.parametrize("text,message", [
    ("{", "not JSON"),
    ('{"generation": 0, "gpus": {}}', "generation must be a positive integer"),
    ('{"generation": true, "gpus": {}}', "generation must be a positive integer"),
    ('{"generation": 1, "gpus": []}', '"gpus" must map GPU UUIDs'),
    ('{"generation": 1, "gpus": {"GPU-1": "1g.5gb@0"}}', "gpus[GPU-1]: must be a list"),
    ('{"generation": 1, "gpus": {"GPU-1": ["1g.5gb"]}}', "gpus[GPU-1][0]: '1g.5gb' is not"),
    ('{"generation": 1, "gpus": {"GPU-1": [7]}}', "gpus[GPU-1][0]: 7 is not"),
    ('{"generation": 1, "gpus": {}, "extra": 1}', 'with "generation" and "gpus" only'),
])
def test_a_malformed_annotation_is_an_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(LayoutError, match=f"annotation {ml.LAYOUT_ANNOTATION}") as refused:
        ml.parse(text)
    assert message in str(refused.value)


def test_the_annotation_round_trips_and_the_state_says_what_happened() -> None:
    desired = ml.parse(json.dumps({"generation": 3, "gpus": {MIXED: ["3g.20gb@4", "1g.5gb@0"]}}))
    assert desired.generation == 3
    assert desired.gpus[MIXED] == placed("1g.5gb@0", "3g.20gb@4")
    assert json.loads(ml.state(3, None)) == {"generation": 3, "state": "success"}
    assert json.loads(ml.state(3, "no")) == {"generation": 3, "state": "failed", "message": "no"}
