"""What a selector sees of a device, and the bounds Kubernetes puts on it.

The bounds are `k8s.io/api/resource/v1` validation limits; the API server enforces them on
every ResourceSlice, and the cost estimate (`cost.py`) assumes them, as Kubernetes' does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Mapping, Union

MAX_EXPRESSION_BYTES = 10 * 1024
"""`resource.CELSelectorExpressionMaxLength`: the longest selector, in UTF-8 bytes."""
MAX_COST = 1_000_000
"""`resource.CELSelectorExpressionMaxCost`: the cost limit of one evaluation."""

MAX_ATTRIBUTES_AND_CAPACITIES = 32
"""`ResourceSliceMaxAttributesAndCapacitiesPerDevice`: bounds every attribute/capacity map."""
MAX_ATTRIBUTE_VALUE_LENGTH = 64
"""`DeviceAttributeMaxValueLength`: the longest string (or version) attribute value."""
MAX_ATTRIBUTE_VALUES = 48
"""`ResourceSliceMaxAttributeValuesPerDevice`: the longest list `includes` accepts."""
MAX_ID_LENGTH = 32
"""`DeviceMaxIDLength`: the longest attribute or capacity short name."""
MAX_DOMAIN_LENGTH = 63
"""`DeviceMaxDomainLength`: the longest attribute or capacity domain."""
MAX_DRIVER_LENGTH = 63
"""`DriverNameMaxLength`."""


@dataclass(frozen=True, slots=True)
class Version:
    """A semantic-version attribute value (DRA's `version` kind), e.g. "1.2.3"."""

    text: str


AttributeValue = Union[bool, int, str, Version]


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """One device as a CEL selector sees it: `device.driver`, `device.attributes[domain][name]`,
    `device.capacity[domain][name]` (a quantity, in base units) and
    `device.allowMultipleAllocations`."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
