"""No lower layer of gpufleet imports a higher one (checked statically with `ast`).

    model (0) <- framework (1) <- core (2) <- autoscale (2.5) <- sim | kube | agent (3) <- cli | web (4)

The three layer-3 drivers do not import each other. The autoscaling planner is pure, like the
core, and runs inside the scheduler and the simulator (DESIGN.md), so those drivers may call it;
it imports no driver. `testing` (builders and fakes) may import
anything except cli/web, and only cli/web may import it. The root `gpufleet` package counts
as layer 0; `gpufleet.__main__` (`python -m gpufleet`) sits above cli. Every import counts: inside
functions and `if TYPE_CHECKING:` blocks too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = {"model": 0, "framework": 1, "core": 2, "autoscale": 2.5, "sim": 3, "kube": 3, "agent": 3,
            "testing": 3.5, "cli": 4, "web": 4, "__main__": 5}
DRIVERS = {"sim", "kube", "agent"}


def top_package(module: str) -> str | None:
    """`gpufleet.core.cycle` -> `core`; the root `gpufleet` -> ""; anything else -> None."""
    parts = module.split(".")
    if parts[0] != "gpufleet":
        return None
    return parts[1] if len(parts) > 1 else ""


def layer(package: str) -> float:
    return PACKAGES.get(package, 0 if package == "" else -1)


def imported_modules(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in `source`, relative imports resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or target == "gpufleet":
                # `from gpufleet import core`, `from .. import core`: the names are the modules
                found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, target))
    return found


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """Layering violations of one module, as readable lines."""
    mine = top_package(module)
    assert mine is not None, module
    out = []
    for line, target in imported_modules(module, source, is_package):
        theirs = top_package(target)
        if theirs is None or theirs == mine or (theirs not in PACKAGES and theirs != ""):
            continue
        bad = (layer(theirs) > layer(mine)
               or (mine in DRIVERS and theirs in DRIVERS)
               or (theirs == "testing" and layer(mine) < 4)
               or (mine == "testing" and layer(theirs) >= 4))
        if bad:
            out.append(f"{module}:{line} imports {target} ({mine or 'gpufleet'} may not import {theirs})")
    return out


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted((SRC / "gpufleet").rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return found


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in (SRC / "gpufleet").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(PACKAGES), f"give these packages a layer: {sorted(packages - set(PACKAGES))}"
    assert {"model", "framework", "core"} <= packages


def test_no_lower_layer_imports_a_higher_one() -> None:
    modules = _modules()
    assert len(modules) > 20
    problems = [v for name, path in modules
                for v in violations(name, path.read_text(encoding="utf-8"), path.name == "__init__.py")]
    assert problems == []


FAKES: list[tuple[str, str, str, bool, list[str]]] = [
    ("the model importing the core is caught",
     "gpufleet.model.fake", "import numpy\nfrom gpufleet.core.cycle import schedule\n", False,
     ["gpufleet.model.fake:2 imports gpufleet.core.cycle (model may not import core)"]),
    ("an import hidden in a function is caught",
     "gpufleet.framework.fake", "def f():\n    import gpufleet.sim.workload\n", False,
     ["gpufleet.framework.fake:2 imports gpufleet.sim.workload (framework may not import sim)"]),
    ("a relative import reaching up is resolved and caught",
     "gpufleet.framework.plugins.fake", "from ...core import cycle\n", False,
     ["gpufleet.framework.plugins.fake:1 imports gpufleet.core (framework may not import core)",]),
    ("`from gpufleet import cli` names the cli package",
     "gpufleet.core.fake", "from gpufleet import cli\n", False,
     ["gpufleet.core.fake:1 imports gpufleet.cli (core may not import cli)"]),
    ("one driver importing another is caught",
     "gpufleet.sim.fake", "from gpufleet.agent import devices\n", False,
     ["gpufleet.sim.fake:1 imports gpufleet.agent (sim may not import agent)",]),
    ("the testing helpers importing the cli are caught",
     "gpufleet.testing.fake", "import gpufleet.web.app\n", False,
     ["gpufleet.testing.fake:1 imports gpufleet.web.app (testing may not import web)"]),
    ("the core importing the testing helpers is caught",
     "gpufleet.core.fake", "from gpufleet.testing import make_pod\n", False,
     ["gpufleet.core.fake:1 imports gpufleet.testing (core may not import testing)",]),
    ("the root package importing a layer is caught",
     "gpufleet", "from gpufleet.framework import profile\n", True,
     ["gpufleet:1 imports gpufleet.framework (gpufleet may not import framework)",]),
    ("a package __init__ resolves `from .` to itself",
     "gpufleet.model", "from . import cluster\nfrom .. import core\n", True,
     ["gpufleet.model:2 imports gpufleet.core (model may not import core)"]),
    ("downward imports are allowed", "gpufleet.cli.fake",
     "from gpufleet.core.cycle import schedule\nfrom gpufleet.sim import workload\nfrom gpufleet.testing import "
     "make_pod\nfrom gpufleet import __version__\nimport numpy, yaml\n", False, []),
    ("the planner importing a driver is caught",
     "gpufleet.autoscale.fake", "from gpufleet.sim import replay\n", False,
     ["gpufleet.autoscale.fake:1 imports gpufleet.sim (autoscale may not import sim)"]),
    ("the simulator may call the planner", "gpufleet.sim.fake", "from gpufleet.autoscale import plan\n", False, []),
    ("a driver may import the core, framework and model", "gpufleet.kube.fake",
     "from gpufleet.core import cycle\nfrom gpufleet.framework.status import Code\nimport gpufleet.model\n", False, []),
    ("the testing helpers may import the drivers", "gpufleet.testing.fake",
     "from gpufleet.sim.workload import Job\nfrom gpufleet.model import PodSpec\n", False, []),
]


@pytest.mark.parametrize(("module", "source", "is_package", "expected"), [c[1:] for c in FAKES],
                         ids=[c[0] for c in FAKES])
def test_the_checker_catches_violations_in_fake_modules(module: str, source: str, is_package: bool,
                                                        expected: list[str]) -> None:
    assert violations(module, source, is_package) == expected


# -- no import circles ----------------------------------------------------------------------
# A module that imports one that imports it back (directly or around a longer circle) shares
# its insides with it; the core's transactional type (`core.statement`) exists so that
# scheduling, queues and preemption need no such circle. `from package import module` is an
# edge to the module, not to the package's `__init__`.


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the gpufleet modules it imports, for `sources` (module -> (source, is_package))."""
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        deps: set[str] = set()
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(source)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(here[: len(here) - (node.level - 1)] + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
            for target in targets:
                while target and target not in sources:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other by imports (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    sources = {name: (path.read_text(encoding="utf-8"), path.name == "__init__.py") for name, path in _modules()}
    graph = import_graph(sources)
    assert {"gpufleet.core.statement", "gpufleet.core.preemption"} <= set(graph)
    assert circles(graph) == []


CIRCLE_FAKES: list[tuple[str, dict[str, tuple[str, bool]], list[list[str]]]] = [
    ("two modules importing each other, one under TYPE_CHECKING",
     {"gpufleet.core.a": ("from gpufleet.core.b import B\n", False),
      "gpufleet.core.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpufleet.core.a import A\n",
                          False)},
     [["gpufleet.core.a", "gpufleet.core.b"]]),
    ("a circle of three through an import inside a function",
     {"gpufleet.core.a": ("from gpufleet.core import b\n", False),
      "gpufleet.core.b": ("import gpufleet.core.c\n", False),
      "gpufleet.core.c": ("def f():\n    from .a import x\n", False),
      "gpufleet.core": ("", True)},
     [["gpufleet.core.a", "gpufleet.core.b", "gpufleet.core.c"]]),
    ("a package __init__ re-exporting its modules is no circle",
     {"gpufleet.model": ("from gpufleet.model.pod import PodSpec\n", True),
      "gpufleet.model.pod": ("from gpufleet.model import mig\n", False),
      "gpufleet.model.mig": ("", False)},
     []),
]


@pytest.mark.parametrize(("sources", "expected"), [c[1:] for c in CIRCLE_FAKES], ids=[c[0] for c in CIRCLE_FAKES])
def test_the_circle_finder_catches_circles_in_fake_modules(sources: dict[str, tuple[str, bool]],
                                                          expected: list[list[str]]) -> None:
    assert circles(import_graph(sources)) == expected
