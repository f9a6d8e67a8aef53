"""docs/reference/annotations.md names exactly the label, annotation, taint and resource keys of the code.

Both directions:

* the keys of the code are the string constants of `src/gpufleet` shaped like `domain/name`
  (and `CONSTANT + "name"` concatenations of them), outside `gpufleet.testing` (test
  fixtures) and `agent/labels.py` (whose keys are computed, see below), less `NOT_KEYS`. A
  constant that ends in `/` or `-` is a prefix: the page writes it with a `<...>` part
  (`unhealthy.gpufleet.io/<device>`), unless the code only ever completes it with fixed
  names, which the page must then list one by one (`karpenter.k8s.aws/instance-cpu`);
* the GPU-feature-discovery labels are the keys `gfd_labels` writes for the cases of
  tests/agent/test_labels.py (those docs/labels.md shows), a MIG profile written `<profile>`.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "gpufleet"
PAGE = ROOT / "docs" / "reference" / "annotations.md"
FIX = ("update docs/reference/annotations.md (a row per key: who sets it, who reads it, and whether a pod "
       "author can set it and gpufleet trusts it)")

KEY = re.compile(r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/[A-Za-z0-9._-]*$")
SKIPPED = ("testing/", "agent/labels.py")
NOT_KEYS = {
    "gpufleet.io/scheduler": "the events' reportingController",
    "gpufleet.io/agent": "the agent's events' reportingController",
    "nvidia.com/": "the prefix the agent's config requires of a resource name",
}
API_VERSION = re.compile(r"/v\d+((alpha|beta)\d+)?$")
GFD_SECTION = "GPU feature-discovery labels"
MIG_ATTRIBUTE = re.compile(r"^(nvidia\.com/mig-)(.+?)\.(count|product|replicas|memory|multiprocessors"
                           r"|slices\.gi|slices\.ci|engines\.[a-z]+)$")


# -- the code -------------------------------------------------------------------------------

def code_keys() -> tuple[set[str], set[str]]:
    """(keys and prefixes in the code, the prefixes the code completes with fixed names)."""
    keys: set[str] = set()
    completed: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(SKIPPED) or "/v1beta1/" in rel:  # v1beta1: generated gRPC code
            continue
        tree = ast.parse(path.read_text(), str(path))
        constants = {t.id: n.value.value for n in tree.body
                     if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                     and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY.match(node.value):
                keys.add(node.value)
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Name)
                  and node.left.id in constants and isinstance(node.right, ast.Constant)
                  and isinstance(node.right.value, str) and KEY.match(constants[node.left.id] + node.right.value)):
                keys.add(constants[node.left.id] + node.right.value)
                completed.add(constants[node.left.id])
    keys = {k for k in keys if k not in NOT_KEYS and not API_VERSION.search(k)}
    return keys, completed


def _label_cases() -> ModuleType:
    """tests/agent/test_labels.py, loaded by path (`tests` is no package under a plain `pytest`)."""
    spec = importlib.util.spec_from_file_location("_gfd_label_cases", ROOT / "tests" / "agent" / "test_labels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gfd_keys() -> set[str]:
    cases = _label_cases()
    return {MIG_ATTRIBUTE.sub(r"\1<profile>.\3", k) for case in cases.CASES for k in cases.labels_for(*case)}


# -- the page -------------------------------------------------------------------------------

def page_keys(text: str) -> tuple[set[str], set[str]]:
    """(keys of every table but the GFD one, keys of the GFD table): first cells in code."""
    other: set[str] = set()
    gfd: set[str] = set()
    target = other
    for line in text.splitlines():
        if line.startswith("## "):
            target = gfd if line[3:].strip() == GFD_SECTION else other
        elif line.startswith("| `"):
            target.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return other, gfd


# -- checks ---------------------------------------------------------------------------------

def check(text: str, code: tuple[set[str], set[str]], gfd: set[str]) -> None:
    keys, completed = code
    documented, documented_gfd = page_keys(text)
    open_prefixes = {k for k in keys if k.endswith(("/", "-")) and k not in completed}
    stems = {d.split("<", 1)[0] for d in documented if "<" in d}

    def covered(k: str) -> bool:
        if k in completed:
            return any(d.startswith(k) for d in documented)
        return any(s.startswith(k) for s in stems) if k in open_prefixes else k in documented

    def known(d: str) -> bool:
        if "<" in d:
            return any(d.startswith(p) for p in open_prefixes)
        return d in keys

    assert sorted(k for k in keys if not covered(k)) == [], f"keys in the code missing from the reference; {FIX}"
    assert sorted(d for d in documented if not known(d)) == [], f"keys in the reference the code does not use; {FIX}"
    assert sorted(gfd - documented_gfd) == [], f"GFD labels the agent writes missing from the reference; {FIX}"
    assert sorted(documented_gfd - gfd) == [], f"GFD labels in the reference the agent does not write; {FIX}"


def test_the_reference_names_every_key_of_the_code_and_no_other() -> None:
    check(PAGE.read_text(), code_keys(), gfd_keys())


def test_the_scan_finds_the_keys_of_the_model_contract() -> None:
    from gpufleet.model import annotations as ann
    from gpufleet.model import queue
    keys, _ = code_keys()
    assert {ann.INVENTORY_ANNOTATION, ann.ASSIGNMENT_ANNOTATION, ann.GPU_RESOURCE, ann.GPU_MILLI_RESOURCE,
            ann.GPU_MEMORY_RESOURCE, ann.MIG_RESOURCE_PREFIX, queue.QUEUE_LABEL, queue.PREEMPTIBLE_ANNOTATION} <= keys


def test_the_check_fails_for_a_lost_row_or_a_new_key() -> None:
    text = PAGE.read_text()
    code, gfd = code_keys(), gfd_keys()

    def without(row_start: str) -> str:
        line = next(line for line in text.splitlines() if line.startswith(row_start))
        return text.replace(line + "\n", "", 1)

    with pytest.raises(AssertionError, match="missing"):
        check(without("| `gpufleet.io/preemptible`"), code, gfd)
    with pytest.raises(AssertionError, match="missing"):
        check(without("| `unhealthy.gpufleet.io/<device>`"), code, gfd)
    with pytest.raises(AssertionError, match="missing"):
        check(without("| `karpenter.k8s.aws/instance-cpu`"), code, gfd)
    with pytest.raises(AssertionError, match="GFD labels the agent writes missing"):
        check(without("| `nvidia.com/mig-<profile>.engines.ofa`"), code, gfd)
    with pytest.raises(AssertionError, match="missing"):
        check(text, (code[0] | {"gpufleet.io/new-annotation"}, code[1]), gfd)
    with pytest.raises(AssertionError, match="does not use"):
        extra = "\n| `gpufleet.io/no-such-key` | label |\n| `gpufleet.io/queue` |"
        check(text.replace("\n| `gpufleet.io/queue` |", extra, 1), code, gfd)
