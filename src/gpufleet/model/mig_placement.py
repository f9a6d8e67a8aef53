"""Where MIG GPU instances sit on a GPU: NVIDIA's placement table, valid layouts, count -> placed.

`model.mig` counts slices; a real GPU also needs every instance at an allowed start. A MIG GPU
has 8 memory slots (0-7); a GPU-instance profile occupies `size` consecutive slots from one
of its allowed starts. The table is NVIDIA's (`nvidia-smi mig -lgipp`, recorded on an H100
80GB HBM3 and an H200 this week; the fixtures `agent/fixtures/h100-sxm-8.yaml`,
`h200-sxm-8.yaml` and `a100-mig.yaml` carry it; the A100 rows follow the MIG user guide's
placement figure, which is the same):

    profile (GPU-instance profile id)      starts          size (slots)
    1g, 1g+me        (19, 20)              0 1 2 3 4 5 6   1
    1g, 2 mem slices (15, e.g. 1g.20gb)    0 2 4 6         2
    2g               (14)                  0 2 4           2
    3g               (9)                   0 4             4
    4g               (5)                   0               4
    7g               (0)                   0               8

The shape depends only on (compute slices, memory eighths): it is the same in every MIG
family, so the table is keyed by that pair and a family's profile names map onto it. A layout
is valid when each instance is at an allowed start, no two overlap, each profile appears at
most its `max_instances` times (one `+me`) and the compute slices add up to at most 7. So
4g + 3g is valid only as 4g@0 + 3g@4, and 3g + 3g + 1g is not valid at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from gpufleet.model import mig
from gpufleet.model.errors import ModelError

SLOTS = 8
"""Memory slots of a MIG GPU (eighths of its memory): the positions instances are placed at."""
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class Shape:
    """Where a profile may start and how many slots it covers."""

    starts: tuple[int, ...]
    size: int


SHAPES: Mapping[tuple[int, int], Shape] = MappingProxyType({
    (1, 1): Shape((0, 1, 2, 3, 4, 5, 6), 1),
    (1, 2): Shape((0, 2, 4, 6), 2),
    (2, 2): Shape((0, 2, 4), 2),
    (3, 4): Shape((0, 4), 4),
    (4, 4): Shape((0,), 4),
    (7, 8): Shape((0,), 8),
})
"""(compute slices, memory eighths) -> allowed starts and size (module docstring)."""


@dataclass(frozen=True, slots=True, order=True)
class MigInstance:
    """One GPU instance: its profile name and first memory slot."""

    start: int
    profile: str

    def slots(self, family: str) -> range:
        return range(self.start, self.start + shape(family, self.profile).size)


def shape(family: str, profile: str) -> Shape:
    """The placement shape of `profile` in MIG family `family` (a key of `mig.MIG_TABLES`)."""
    table = mig.MIG_TABLES.get(family)
    if table is None or profile not in table:
        raise ModelError(f"MIG family {family}", f"has no profile {profile!r}")
    p = table[profile]
    return SHAPES[(p.compute_slices, p.memory_eighths)]


def layout_problems(family: str, instances: Sequence[MigInstance]) -> list[str]:
    """Why `instances` is not a valid layout on a GPU of `family` (empty when it is)."""
    table = mig.MIG_TABLES.get(family)
    if table is None:
        return [f"unknown MIG family {family!r}"]
    problems: list[str] = []
    owner: dict[int, MigInstance] = {}
    for inst in sorted(instances):
        if inst.profile not in table:
            problems.append(f"{inst.profile} is not a profile of {family}")
            continue
        s = shape(family, inst.profile)
        if inst.start not in s.starts:
            problems.append(f"{inst.profile} cannot start at slot {inst.start} (allowed: {list(s.starts)})")
            continue
        for slot in inst.slots(family):
            if slot in owner:
                problems.append(f"{inst.profile}@{inst.start} overlaps {owner[slot].profile}@{owner[slot].start}")
                break
            owner[slot] = inst
    names = [i.profile for i in instances if i.profile in table]
    for name in dict.fromkeys(names):
        if names.count(name) > table[name].max_instances:
            problems.append(f"{names.count(name)} x {name}; at most {table[name].max_instances}")
    compute = sum(table[n].compute_slices for n in names)
    if compute > COMPUTE_SLICES:
        problems.append(f"{compute} compute slices; a GPU has {COMPUTE_SLICES}")
    return problems


def is_valid(family: str, instances: Sequence[MigInstance]) -> bool:
    return not layout_problems(family, instances)


def check_placed(family: str, instances: Sequence[MigInstance], where: str) -> None:
    """Raise ModelError naming every problem of a placed layout."""
    problems = layout_problems(family, instances)
    if problems:
        raise ModelError(where, f"MIG layout {describe(instances)} is not valid on {family}: " + "; ".join(problems))


def describe(instances: Iterable[MigInstance]) -> str:
    return "[" + ", ".join(f"{i.profile}@{i.start}" for i in sorted(instances)) + "]"


def can_add(family: str, instances: Sequence[MigInstance], new: MigInstance) -> bool:
    """Whether `new` fits beside `instances` (a valid layout) and keeps it valid."""
    return is_valid(family, [*instances, new])


def free_starts(family: str, instances: Sequence[MigInstance], profile: str) -> tuple[int, ...]:
    """The starts at which `profile` could be created beside `instances` without touching them."""
    return tuple(s for s in shape(family, profile).starts if can_add(family, instances, MigInstance(s, profile)))


def _by_size(family: str, profiles: Iterable[str]) -> list[str]:
    """Profiles largest first (compute, then memory), then by name: the order placement tries them."""
    table = mig.MIG_TABLES[family]
    return sorted(profiles, key=lambda p: (-table[p].compute_slices, -table[p].memory_eighths, p))


def place_counts(family: str, profiles: Sequence[str]) -> tuple[MigInstance, ...] | None:
    """A placed layout carving exactly `profiles` (a count layout such as `Gpu.mig_slices`), or
    None when no placement exists. Largest profiles go first, each at its lowest free start,
    with backtracking; the result is sorted by start (deterministic)."""
    table = mig.MIG_TABLES.get(family, {})
    if any(p not in table for p in profiles):
        return None
    order = _by_size(family, profiles)

    def place(k: int, placed: list[MigInstance]) -> list[MigInstance] | None:
        if k == len(order):
            return placed
        for start in free_starts(family, placed, order[k]):
            found = place(k + 1, [*placed, MigInstance(start, order[k])])
            if found is not None:
                return found
        return None
    found = place(0, [])
    return tuple(sorted(found)) if found is not None else None


def maximal_layouts(family: str, profiles: Iterable[str] | None = None) -> list[tuple[MigInstance, ...]]:
    """Every valid layout of `profiles` (default: the family's profiles without `+me`) to which no
    further instance of them can be added, one placement per distinct multiset of profiles,
    sorted by the profile counts. These are the candidate static layouts of a GPU."""
    table = mig.MIG_TABLES[family]
    names = _by_size(family, profiles if profiles is not None else [p for p in table if "+me" not in p])
    found: dict[tuple[str, ...], tuple[MigInstance, ...]] = {}

    def grow(slot: int, placed: list[MigInstance]) -> None:
        if slot >= SLOTS:
            if not any(free_starts(family, placed, p) for p in names):
                key = tuple(sorted(i.profile for i in placed))
                found.setdefault(key, tuple(sorted(placed)))
            return
        grow(slot + 1, placed)
        for p in names:
            new = MigInstance(slot, p)
            if slot in shape(family, p).starts and can_add(family, placed, new):
                grow(slot + shape(family, p).size, [*placed, new])
    grow(0, [])
    return [found[k] for k in sorted(found)]
