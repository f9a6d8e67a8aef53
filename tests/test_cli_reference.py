"""docs/reference/cli.md names exactly the commands and flags of the live `gpufleet` parser.

Both directions, per command: every (command, flag) of `gpufleet.cli.main.build_parser()`
is in the flag table under that command's heading, and every flag a table names is one the
command takes. Help texts may differ (people edit the page); the sets of flags may not.
`-h`/`--help` is left out on both sides (every command has it).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gpufleet.cli.main import build_parser

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md"
REGENERATE = ("regenerate docs/reference/cli.md with `.venv/bin/python hack/gen-cli-reference.py` "
              "(it keeps the prose, rewrites the tables)")
HEADING = re.compile(r"^#{2,3} `(gpufleet(?: [a-z0-9-]+)+)`\s*$")


def parser_flags(parser: argparse.ArgumentParser, path: str = "gpufleet") -> dict[str, set[str]]:
    """Command path -> the flags it takes (option strings; a positional by its dest), every
    subcommand included; the root `gpufleet` itself takes nothing but a command."""
    out: dict[str, set[str]] = {}
    if path != "gpufleet":
        out[path] = {name for a in parser._actions
                     if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
                     for name in (a.option_strings or [a.dest])}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.update(parser_flags(child, f"{path} {name}"))
    return out


def documented_flags(text: str) -> dict[str, set[str]]:
    """Command path -> the flags named in the first column of the tables under its heading."""
    out: dict[str, set[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            current = m.group(1)
            out.setdefault(current, set())
        elif line.startswith("# ") or line.startswith("## ") or line.startswith("### "):
            current = None  # a heading that is not a command ends the command's section
        elif current is not None and line.startswith("| `"):
            out[current].update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return out


def _compare(code: dict[str, set[str]], docs: dict[str, set[str]]) -> None:
    """One failure listing every difference, commands first, then flags of the commands both have."""
    problems = []
    both = code.keys() & docs.keys()
    if missing_commands := sorted(code.keys() - docs.keys()):
        problems.append(f"commands missing from docs/reference/cli.md: {missing_commands}")
    if unknown_commands := sorted(docs.keys() - code.keys()):
        problems.append(f"commands in docs/reference/cli.md that the parser lacks: {unknown_commands}")
    if missing := sorted((c, f) for c in both for f in code[c] - docs[c]):
        problems.append(f"flags missing from docs/reference/cli.md: {missing}")
    if unknown := sorted((c, f) for c in both for f in docs[c] - code[c]):
        problems.append(f"flags in docs/reference/cli.md that the parser lacks: {unknown}")
    assert not problems, "; ".join(problems) + f"; {REGENERATE}"


def test_the_reference_names_every_command_and_flag_of_the_parser_and_no_other() -> None:
    _compare(parser_flags(build_parser()), documented_flags(PAGE.read_text()))


def test_the_check_sees_a_flag_added_to_the_parser_and_a_row_taken_from_the_page() -> None:
    code = parser_flags(build_parser())
    docs = documented_flags(PAGE.read_text())
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["scheduler"].add_argument("--not-documented-yet")
    with pytest.raises(AssertionError, match=re.escape("('gpufleet scheduler', '--not-documented-yet')")):
        _compare(parser_flags(parser), docs)
    row = next(line for line in PAGE.read_text().splitlines() if line.startswith("| `--karpenter-release-after`"))
    with pytest.raises(AssertionError, match=re.escape("('gpufleet scheduler', '--karpenter-release-after')")):
        _compare(code, documented_flags(PAGE.read_text().replace(row + "\n", "", 1)))
