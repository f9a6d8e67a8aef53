"""Tests of the bench scripts; `load` imports one of them as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load(script: str, name: str) -> ModuleType:
    """bench/`script` as the module `name` (registered: dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
