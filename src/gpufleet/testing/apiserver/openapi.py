"""OpenAPI documents for kubectl (filled in below once kubectl's needs are pinned down)."""

from __future__ import annotations

from typing import Any

from gpufleet.testing.apiserver.resources import Registry


def document(registry: Registry, path: str) -> dict[str, Any] | None:
    return None
