"""Fuzz the agent's DRA prepare check (`agent.draprepare.prepare`) with ResourceClaims one change
away from valid ones: whatever an allocator wrote, the answer is the devices or a PrepareError
of one line naming the claim, never another exception (the kubelet would get an opaque gRPC
UNKNOWN, and the claim no reason)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent import draprepare, fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.draprepare import PreparedClaim, PreparedDevice, PrepareError
from tests.fuzz.strategies import fuzz_settings, mutated

_BACKEND = fake.load_fixture("a100-mig")
TARGETS = rs.device_targets(inventory.inventory(_BACKEND.system(), _BACKEND.devices()))
PREPARED = {"uid-held": PreparedClaim("team", "held", (PreparedDevice(("r",), "n", "gpu-3", ("x",)),))}


def claim(*devices: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "team", "name": "c", "uid": "u"}, "status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": rs.DRIVER, "pool": "n", "device": d}
                                                for d in devices]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}}


SEEDS = [claim("gpu-3"), claim("gpu-0-mig-3g20gb-9-4", "gpu-1-mig-1g5gb-19-0"), claim()]


@st.composite
def claims(draw: st.DrawFn) -> Any:
    doc, _ = draw(mutated(SEEDS))
    return doc


@fuzz_settings(500)
@given(claims())
def test_any_claim_is_prepared_or_refused_in_one_line_naming_it(doc: Any) -> None:
    try:
        done = draprepare.prepare(doc, "team", "c", "u", driver=rs.DRIVER, node="n", targets=TARGETS,
                                  prepared=PREPARED)
    except PrepareError as exc:
        message = str(exc)
        assert message.startswith("ResourceClaim team/c: ") and len(message.splitlines()) == 1, message
        return
    assert all(d.device in TARGETS and d.device != "gpu-3" for d in done.devices)
