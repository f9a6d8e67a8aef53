"""Kubernetes DRA device selectors (CEL): compile once, evaluate per device.

`compile_selector(expression, where)` checks a `spec.selectors[].cel.expression` the way the
API server admits one and returns a `Selector`, whose `matches(DeviceFacts)` evaluates it
the way the scheduler does. The library is cel-expr-python (Google's cel-cpp); Kubernetes'
quantity, semver, regex and list functions, its cost estimate and its DRA quirks are shimmed
in the modules named for them.
"""

from gpufleet.model.cel.device import MAX_COST, MAX_EXPRESSION_BYTES, AttributeValue, DeviceFacts, Version
from gpufleet.model.cel.errors import CelError
from gpufleet.model.cel.selector import Selector, compile_selector

__all__ = ["AttributeValue", "CelError", "DeviceFacts", "MAX_COST", "MAX_EXPRESSION_BYTES", "Selector",
           "Version", "compile_selector"]
