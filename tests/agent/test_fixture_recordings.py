"""The MIG tables of the fixtures are what NVML reported on real GPUs.

`tests/live/data/<gpu>-resourceslices-dynamic.yaml` is what `gpufleet agent resourceslices --mig dynamic`
printed on a real H100 and a real H200 (docs/hardware.md, runs 5 and 6). Built from the fixture of the
same board, the partitionable devices of its first GPU must ask for the same capacities and counters:
the fixtures feed the scheduler's tests and the benchmarks, and a guessed table (the H200's memory
sizes, the SMs of a `1g` profile with two memory slices) places pods on MIG devices that do not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.resourceslices import MigMode, SliceOptions

RECORDED = Path(__file__).parents[1] / "live" / "data"


def mig_devices(slices: Any) -> dict[str, tuple[Any, Any]]:
    return {d["name"]: (d["capacity"], d["consumesCounters"][0]["counters"])
            for s in slices for d in s["spec"].get("devices", [])
            if d["name"].startswith("gpu-0-mig-")}


@pytest.mark.parametrize("fixture,recording", [("h100-sxm-8", "h100"), ("h200-sxm-8", "h200")])
def test_the_fixtures_mig_devices_are_the_recorded_ones(fixture: str, recording: str) -> None:
    backend = fake.load_fixture(fixture)
    built = mig_devices(rs.resource_slices(inventory.inventory(backend.system(), backend.devices()), "n", 1,
                                           SliceOptions(mig=MigMode.DYNAMIC)))
    recorded = mig_devices(yaml.safe_load_all((RECORDED / f"{recording}-resourceslices-dynamic.yaml").read_text()))
    assert sorted(built) == sorted(recorded)
    assert len(recorded) == 25
    for name, want in recorded.items():
        assert built[name] == want, name
