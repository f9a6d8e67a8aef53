"""Placement-aware MIG layouts (model/mig_placement.py) against NVIDIA's `-lgipp` table."""

from __future__ import annotations

import pytest

from gpufleet.model import ModelError
from gpufleet.model.mig_placement import (MigInstance, check_placed, free_starts, is_valid, layout_problems,
                                          maximal_layouts, place_counts, shape)

H100 = "H100-80GB"


def _i(profile: str, start: int) -> MigInstance:
    return MigInstance(start, profile)


@pytest.mark.parametrize(("profile", "starts", "size"), [
    ("1g.10gb", (0, 1, 2, 3, 4, 5, 6), 1), ("1g.10gb+me", (0, 1, 2, 3, 4, 5, 6), 1), ("1g.20gb", (0, 2, 4, 6), 2),
    ("2g.20gb", (0, 2, 4), 2), ("3g.40gb", (0, 4), 4), ("4g.40gb", (0,), 4), ("7g.80gb", (0,), 8),
])
def test_the_shapes_are_nvidias_lgipp_placements(profile: str, starts: tuple[int, ...], size: int) -> None:
    assert shape(H100, profile).starts == starts and shape(H100, profile).size == size


def test_other_families_map_their_names_onto_the_same_shapes() -> None:
    assert shape("A100-40GB", "3g.20gb") == shape(H100, "3g.40gb")
    assert shape("H200-141GB", "1g.35gb") == shape(H100, "1g.20gb")


@pytest.mark.parametrize(("layout", "valid"), [
    pytest.param([_i("4g.40gb", 0), _i("3g.40gb", 4)], True, id="4g at 0 and 3g at 4 is valid"),
    pytest.param([_i("3g.40gb", 0), _i("4g.40gb", 4)], False, id="4g can only start at 0"),
    pytest.param([_i("3g.40gb", 0), _i("3g.40gb", 4), _i("1g.10gb", 6)], False, id="3g+3g+1g overlaps"),
    pytest.param([_i("1g.10gb", k) for k in range(7)], True, id="seven 1g at 0-6"),
    pytest.param([_i("1g.10gb", 7)], False, id="no instance starts at slot 7"),
    pytest.param([_i("2g.20gb", 1)], False, id="2g cannot start at an odd slot"),
    pytest.param([_i("1g.10gb+me", 0), _i("1g.10gb+me", 1)], False, id="one +me instance at most"),
    pytest.param([_i("7g.80gb", 0), _i("1g.10gb", 0)], False, id="7g takes the whole GPU"),
    pytest.param([_i("2g.20gb", 0), _i("2g.20gb", 2), _i("3g.40gb", 4)], True, id="2g+2g+3g"),
])
def test_layout_validity(layout: list[MigInstance], valid: bool) -> None:
    assert is_valid(H100, layout) is valid
    assert bool(layout_problems(H100, layout)) is not valid


def test_check_placed_names_the_problem() -> None:
    with pytest.raises(ModelError, match="3g.40gb@4 overlaps"):
        check_placed(H100, [_i("4g.40gb", 0), _i("3g.40gb", 4), _i("3g.40gb", 4)], "gpu0")


def test_free_starts_leave_existing_instances_alone() -> None:
    assert free_starts(H100, [_i("3g.40gb", 4)], "2g.20gb") == (0, 2)
    assert free_starts(H100, [_i("1g.10gb", 1)], "4g.40gb") == ()


@pytest.mark.parametrize(("counts", "placed"), [
    pytest.param(("3g.40gb", "4g.40gb"), [_i("4g.40gb", 0), _i("3g.40gb", 4)], id="4g+3g"),
    pytest.param(("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),
                 [_i("2g.20gb", 0), _i("1g.10gb", 2), _i("1g.10gb", 3), _i("3g.40gb", 4)],
                 id="balanced needs backtracking past 3g at 0"),
    pytest.param(("3g.40gb", "3g.40gb", "1g.10gb"), None, id="3g+3g+1g has no placement"),
    pytest.param(("5g.50gb",), None, id="unknown profile"),
])
def test_place_counts(counts: tuple[str, ...], placed: list[MigInstance] | None) -> None:
    assert place_counts(H100, counts) == (tuple(sorted(placed)) if placed is not None else None)


def test_maximal_layouts_are_valid_distinct_and_cannot_grow() -> None:
    layouts = maximal_layouts(H100)
    keys = [tuple(sorted(i.profile for i in layout)) for layout in layouts]
    assert len(keys) == len(set(keys)) == 38
    for layout in layouts:
        assert is_valid(H100, layout)
        assert not any(free_starts(H100, layout, p) for p in ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb",
                                                                "4g.40gb", "7g.80gb"))
    assert ("7g.80gb",) in keys and ("3g.40gb", "4g.40gb") in keys and ("1g.10gb",) * 7 in keys
    assert ("1g.10gb", "3g.40gb", "3g.40gb") not in keys
