#!/usr/bin/env python3
"""Coverage-guided fuzzing of every parser of outside input, with atheris (docs/security.md, "Fuzzing").

    .venv/bin/python hack/fuzz.py                          # every target, 120 s each
    .venv/bin/python hack/fuzz.py --seconds-per-target 30 scenario profile
    .venv/bin/python hack/fuzz.py --engine hypothesis --examples 20000

Each target (`tests/fuzz/targets.py`, shared with the Hypothesis tests) runs in a process of its
own under libFuzzer, starting from the target's seeds (`tests/fuzz/seeds.py`; real trace rows
when GPUFLEET_TRACE_DIR is set), with gpufleet's modules instrumented for coverage. An input
that raises anything but the parser's documented error, runs past the hang limit, or gets an
error that is not one line naming the field is a finding: its bytes go to `--findings`, and
the run exits 1. One target at a time (the shared 2-core machine); run it under `nice -n 19`.

`--engine hypothesis` runs `tests/fuzz` with `--examples` examples per test instead and
prints the same per-target counts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INSTRUMENTED = ("gpufleet.sim.traces.openb", "gpufleet.sim.traces.philly", "gpufleet.sim.traces.scenario",
                "gpufleet.framework.profile", "gpufleet.agent.configsource", "gpufleet.agent.plan",
                "gpufleet.kube.translate", "gpufleet.model.annotations", "gpufleet.model.assignment_auth",
                "gpufleet.agent.servicer", "gpufleet.web.server", "gpufleet.web.sources")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="target names (default: all)")
    parser.add_argument("--seconds-per-target", type=float, default=120.0)
    parser.add_argument("--engine", choices=("atheris", "hypothesis"), default="atheris")
    parser.add_argument("--examples", type=int, default=10_000, help="examples per Hypothesis test")
    parser.add_argument("--findings", type=Path, default=Path(tempfile.gettempdir()) / "gpufleet-fuzz-findings")
    parser.add_argument("--json", type=Path, help="also write the per-target results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        return child(args.child, args.seconds_per_target, args.findings, args.result)
    if args.engine == "hypothesis":
        env = {**os.environ, "GPUFLEET_FUZZ_EXAMPLES": str(args.examples)}
        return subprocess.call([sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider"],
                               cwd=ROOT, env=env)
    from tests.fuzz.targets import targets
    names = args.targets or list(targets())
    unknown = [n for n in names if n not in targets()]
    if unknown:
        parser.error(f"unknown target {unknown[0]}; known: {', '.join(targets())}")
    results = []
    for name in names:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.call([sys.executable, __file__, "--child", name, "--seconds-per-target",
                             str(args.seconds_per_target), "--findings", str(args.findings), "--result", out.name],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            text = Path(out.name).read_text()
        result = json.loads(text) if text else {"target": name, "inputs": 0, "findings": [], "error": "no result"}
        results.append(result)
        print(f"{name:14} {result['inputs']:>10,} inputs ({result.get('parser_calls', 0):,} parser calls) "
              f"in {result.get('seconds', 0):5.0f} s  "
              f"{len(result['findings'])} finding(s)" + (f"  ERROR {result['error']}" if "error" in result else ""),
              flush=True)
        for f in result["findings"]:
            print(f"    {f['count']:>6}x {f['key']}\n            input: {f['file']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if any(r["findings"] or "error" in r for r in results) else 0


def child(name: str, seconds: float, findings_dir: Path, result_file: Path) -> int:
    import atheris  # type: ignore[import-untyped]  # dev extra; ships no type information

    with atheris.instrument_imports(include=["gpufleet"]):
        import importlib
        for module in INSTRUMENTED:
            importlib.import_module(module)
    from tests.fuzz import targets as t
    target = t.targets()[name]
    corpus = Path(tempfile.mkdtemp(prefix=f"gpufleet-fuzz-{name}-"))
    for i, seed in enumerate(target.seeds()):
        (corpus / f"seed-{i}").write_bytes(seed)
    findings: dict[str, dict[str, Any]] = {}
    start = time.monotonic()
    state = {"inputs": 0}

    def report() -> None:
        result_file.write_text(json.dumps({"target": name, "inputs": state["inputs"],
                                           "parser_calls": sum(t.COUNTS.values()),
                                           "seconds": round(time.monotonic() - start, 1),
                                           "findings": list(findings.values())}))

    def one(data: bytes) -> None:
        if time.monotonic() - start > seconds:
            report()
            os._exit(0)
        state["inputs"] += 1
        try:
            target.check(data)
        except Exception as exc:  # noqa: BLE001 (every exception is a finding; keep going to count them)
            key = _key(exc)
            if key not in findings:
                findings_dir.mkdir(parents=True, exist_ok=True)
                path = findings_dir / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
                path.write_bytes(data)
                findings[key] = {"key": key, "count": 0, "file": str(path)}
                report()
            findings[key]["count"] += 1

    atheris.Setup([sys.argv[0], str(corpus), "-max_len=8192", "-timeout=60", "-rss_limit_mb=6144"], one)
    try:
        atheris.Fuzz()
    finally:
        report()
    return 0


def _key(exc: BaseException) -> str:
    """Findings that are one bug share a key: the exception type and where in gpufleet it was raised."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/gpufleet/" in f.filename]
    place = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    from tests.fuzz.targets import Finding
    text = str(exc).splitlines()[0] if str(exc) else ""
    first = ": ".join(text.split(": ")[:2]) if isinstance(exc, Finding) else text[:60]
    return f"{type(exc).__name__} at {place}: {first}" if place else f"{type(exc).__name__}: {first}"


if __name__ == "__main__":
    sys.exit(main())
