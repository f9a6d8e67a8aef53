"""`build_decoders()`: msgspec's decoding info for lightkube's models, built before threads share them.

lightkube decodes API objects with msgspec, which builds a type's decoding info the first time it
meets the type. With msgspec 0.22.0 on CPython 3.11, threads doing that for the same type at
once crash the process (a segmentation fault, not an exception): the live scheduler did so once
in about forty runs when several informers met their first error reply together and each built
lightkube's `ApiError` (its `Status`). Eight threads converting one model at once, with a 1 µs
GIL switch interval, crashed 32 of 40 processes for `Status` and 18 of 20 for `Node`, and none
once the type had been decoded before (tests/kube/test_decoders.py). So each module that
decodes these types from threads builds them at import, in one thread. The info is the type's,
whichever way it is later decoded (`from_dict`, or JSON as lightkube's client does).
"""

from __future__ import annotations

from lightkube.core import decoders


def build_decoders(*resources: type) -> None:
    """Build the decoding info of `meta_v1.Status`, watch events, and each of `resources` with
    its list type (lightkube creates that on first use, and its info holds the item type's)."""
    decoders.decode_status(b"{}")
    decoders.decode_watch_event(b'{"type":"ADDED","object":{}}')
    for resource in resources:
        decoders.decode_list(b'{"items":[]}', resource)
