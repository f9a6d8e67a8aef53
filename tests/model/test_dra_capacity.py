"""What a request takes of a device's consumable capacity under its request policy (KEP-5075):
an amount in a valid range is rounded up to the next step above the minimum."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpufleet.model.dra import Capacity

GI = Decimal(2**30)


@pytest.mark.parametrize(("policy", "asked", "takes"), [
    ((Decimal(0), 80 * GI, 60 * GI), 10 * GI, 60 * GI),     # 10Gi under a 60Gi step takes one step, not 0
    ((Decimal(0), 80 * GI, 60 * GI), 61 * GI, None),        # two steps are more than the device has
    ((4 * GI, None, 4 * GI), 5 * GI, 8 * GI),               # 5Gi with min and step 4Gi takes 8Gi, not 4Gi
    ((4 * GI, None, 4 * GI), 4 * GI, 4 * GI),
    ((4 * GI, None, 4 * GI), 1 * GI, 4 * GI),               # below the minimum takes the minimum
    ((Decimal(0), None, Decimal(2**20)), Decimal(1536 * 2**10), Decimal(2 * 2**20)),  # 1.5Mi in 1Mi steps
])
def test_a_request_in_a_valid_range_is_rounded_up_to_the_next_step(
        policy: tuple[Decimal, Decimal | None, Decimal], asked: Decimal, takes: Decimal | None) -> None:
    assert Capacity(80 * GI, valid_range=policy).amount(asked) == takes
