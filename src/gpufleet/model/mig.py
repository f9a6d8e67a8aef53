"""MIG GPU-instance profiles per GPU model (NVIDIA MIG user guide, mig-parted defaults).

Each profile is `<g>g.<mem>gb` with g compute slices of 7 and a share of memory in eighths.
`+me` profiles carry the media extensions. The tables are used to validate what a node
reports as carved and what a pod asks for; placement itself only counts free carved slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from gpufleet.model.errors import ModelError


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile: `compute_slices` of 7, `memory_eighths` of 8, `max_instances`."""

    name: str
    compute_slices: int
    memory_eighths: int
    max_instances: int


def _table(*rows: tuple[str, int, int, int]) -> Mapping[str, MigProfile]:
    return MappingProxyType({name: MigProfile(name, g, m, n) for name, g, m, n in rows})


MIG_TABLES: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType({
    "A100-40GB": _table(("1g.5gb", 1, 1, 7), ("1g.5gb+me", 1, 1, 1), ("1g.10gb", 1, 2, 4),
                        ("2g.10gb", 2, 2, 3), ("3g.20gb", 3, 4, 2), ("4g.20gb", 4, 4, 1),
                        ("7g.40gb", 7, 8, 1)),
    "A100-80GB": _table(("1g.10gb", 1, 1, 7), ("1g.10gb+me", 1, 1, 1), ("1g.20gb", 1, 2, 4),
                        ("2g.20gb", 2, 2, 3), ("3g.40gb", 3, 4, 2), ("4g.40gb", 4, 4, 1),
                        ("7g.80gb", 7, 8, 1)),
    "H100-80GB": _table(("1g.10gb", 1, 1, 7), ("1g.10gb+me", 1, 1, 1), ("1g.20gb", 1, 2, 4),
                        ("2g.20gb", 2, 2, 3), ("3g.40gb", 3, 4, 2), ("4g.40gb", 4, 4, 1),
                        ("7g.80gb", 7, 8, 1)),
    "H100-NVL-94GB": _table(("1g.12gb", 1, 1, 7), ("1g.24gb", 1, 2, 4), ("2g.24gb", 2, 2, 3),
                            ("3g.47gb", 3, 4, 2), ("4g.47gb", 4, 4, 1), ("7g.94gb", 7, 8, 1)),
    "H200-141GB": _table(("1g.18gb", 1, 1, 7), ("1g.18gb+me", 1, 1, 1), ("1g.35gb", 1, 2, 4),
                         ("2g.35gb", 2, 2, 3), ("3g.71gb", 3, 4, 2), ("4g.71gb", 4, 4, 1),
                         ("7g.141gb", 7, 8, 1)),
})

ALL_PROFILES: frozenset[str] = frozenset(p for table in MIG_TABLES.values() for p in table)


def mig_family(gpu_model: str) -> str | None:
    """The MIG table for a GPU product name (e.g. `NVIDIA-H100-80GB-HBM3` -> `H100-80GB`).

    Returns None for GPUs without MIG support (T4, V100, A10, ...).
    """
    name = gpu_model.upper().replace(" ", "-")
    if "H200" in name:
        return "H200-141GB"
    if "H100" in name:
        return "H100-NVL-94GB" if ("NVL" in name or "94GB" in name) else "H100-80GB"
    if "A100" in name or "A800" in name:
        return "A100-40GB" if "40GB" in name else "A100-80GB"
    return None


def profiles_for(gpu_model: str) -> Mapping[str, MigProfile]:
    """The MIG profiles a GPU model supports; empty if it has no MIG."""
    family = mig_family(gpu_model)
    return MIG_TABLES[family] if family else MappingProxyType({})


def check_profile(profile: str, gpu_model: str | None, where: str) -> None:
    """Raise ModelError unless `profile` exists (for `gpu_model`, when one is given)."""
    if gpu_model is None:
        if profile not in ALL_PROFILES:
            raise ModelError(where, f"unknown MIG profile {profile!r}; known: {', '.join(sorted(ALL_PROFILES))}")
        return
    table = profiles_for(gpu_model)
    if profile not in table:
        known = ", ".join(table) if table else "none (no MIG support)"
        raise ModelError(where, f"MIG profile {profile!r} does not exist on {gpu_model}; it has: {known}")


def check_layout(slices: tuple[str, ...], gpu_model: str, where: str) -> None:
    """A carved layout must use profiles of the model, each at most its instance count (one `+me`:
    `nvidia-smi mig -lgip` on an H100 lists 1/1), and fit in 7 compute slices and 8 memory eighths."""
    table = profiles_for(gpu_model)
    for s in slices:
        check_profile(s, gpu_model, where)
    for name in dict.fromkeys(slices):
        if slices.count(name) > table[name].max_instances:
            raise ModelError(where, f"MIG layout {list(slices)} has {slices.count(name)} x {name}; "
                                    f"{gpu_model} allows at most {table[name].max_instances}")
    compute = sum(table[s].compute_slices for s in slices)
    memory = sum(table[s].memory_eighths for s in slices)
    if compute > 7 or memory > 8:
        raise ModelError(where, f"MIG layout {list(slices)} needs {compute}/7 compute slices "
                                f"and {memory}/8 memory slices")
