"""Markdown report of a mutmut run: a table per module, then every mutant that was not killed, with its diff.

Reads what `mutmut run` left in mutants/ through mutmut's own commands (`mutmut results --all
true` for each mutant's status, `mutmut show NAME` for a diff), so it runs from the repository
root after `make mutate` (docs/testing.md). Glob arguments keep only the mutants whose names
match, as `mutmut run` takes them; with none, the report covers every mutant mutmut knows.

    .venv/bin/python hack/mutation_report.py [--out reports/mutation.md] ['gpufleet.core.fairshare.*' ...]

"Killed %" is (killed + timeout) / checked, mutmut's own score: a mutant that hangs the tests is
caught. Checked leaves out the mutants no run has reached yet ("not checked"). Equivalent
mutants are not told apart here; docs/testing.md keeps that judgement.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

COLUMNS = ("killed", "survived", "timeout", "suspicious", "no tests")
CAUGHT = ("killed", "timeout")
NOT_CHECKED = "not checked"
_MODULE = re.compile(r"^(?P<module>.+?)\.(?:x_|xǁ)")


def mutmut(*args: str) -> str:
    """Run the mutmut next to this interpreter (the project's virtualenv) and return its stdout."""
    exe = Path(sys.executable).with_name("mutmut")
    done = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True)
    return done.stdout


def statuses(globs: list[str]) -> dict[str, str]:
    """Mutant name -> mutmut's status ("killed", "survived", ...), only names matching a glob if any."""
    out: dict[str, str] = {}
    for line in mutmut("results", "--all", "true").splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and (not globs or any(fnmatch.fnmatchcase(name, g) for g in globs)):
            out[name] = status
    return out


def module_of(name: str) -> str:
    m = _MODULE.match(name)
    return m.group("module") if m else name.rpartition(".")[0]


def diff_of(name: str) -> str:
    """`mutmut show`'s unified diff of one mutant, without its '# name: status' title line."""
    lines = mutmut("show", name).splitlines()
    return "\n".join(line for line in lines if not line.startswith(f"# {name}:")).strip()


def score(counts: Counter[str]) -> str:
    checked = sum(counts.values()) - counts[NOT_CHECKED]
    return f"{100 * sum(counts[s] for s in CAUGHT) / checked:.1f}" if checked else "-"


def row(label: str, counts: Counter[str]) -> str:
    other = sum(n for s, n in counts.items() if s not in COLUMNS and s != NOT_CHECKED)
    cells = [label, str(sum(counts.values())), *(str(counts[c]) for c in COLUMNS), str(other),
             str(counts[NOT_CHECKED]), score(counts)]
    return "| " + " | ".join(cells) + " |"


def report(by_name: dict[str, str], globs: list[str]) -> str:
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in by_name.items():
        by_module[module_of(name)][status] += 1
    total: Counter[str] = sum(by_module.values(), Counter())
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    scope = ", ".join(f"`{g}`" for g in globs) if globs else "every mutant in mutants/"
    out = [
        "# Mutation testing report",
        "",
        f"mutmut {version('mutmut')}, {when}; scope: {scope}. Killed % = (killed + timeout) / checked.",
        "",
        "| module | mutants | " + " | ".join(COLUMNS) + " | other | not checked | killed % |",
        "|---" + "|---:" * (len(COLUMNS) + 4) + "|",
        *(row(f"`{m}`", c) for m, c in sorted(by_module.items())),
        row("**all**", total),
        "",
        "## Not killed",
        "",
        "Every checked mutant that no test failed on (survived, no tests, suspicious, other), "
        "with `mutmut show`'s diff.",
    ]
    left = sorted(n for n, s in by_name.items() if s not in CAUGHT and s != NOT_CHECKED)
    if not left:
        out += ["", "None."]
    for module in sorted({module_of(n) for n in left}):
        out += ["", f"### `{module}`"]
        for name in (n for n in left if module_of(n) == module):
            out += ["", f"`{name}` ({by_name[name]})", "", "```diff", diff_of(name), "```"]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("globs", nargs="*", help="mutant-name globs, as `mutmut run` takes them")
    parser.add_argument("--out", type=Path, default=Path("reports/mutation.md"))
    args = parser.parse_args()
    by_name = statuses(args.globs)
    if not by_name:
        print("no mutants found: run `make mutate` first", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(by_name, args.globs), encoding="utf-8")
    print(f"mutation report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
