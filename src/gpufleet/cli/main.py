"""`gpufleet` command line: a thin edge that parses arguments and calls the library.

Each subcommand lives in its own module exposing `add_parser(subparsers)`; the module list
below is the one place commands are registered (no import-time side effects).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from gpufleet.framework.profile import ProfileError
from gpufleet.model import ModelError

COMMAND_MODULES = (
    "gpufleet.cli.simulate_cmd",
    "gpufleet.cli.agent_cmd",
    "gpufleet.cli.scheduler_cmd",
    "gpufleet.cli.devcluster_cmd",
)


class UsageError(Exception):
    """A user mistake the CLI reports in one line, without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="GPU-aware scheduling for Kubernetes: the trace simulator and the node agent.",
        epilog="Docs: README.md and docs/ (simulator.md, concepts.md, agent.md).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` with `parser` and run the chosen command; user mistakes are one line, exit 2."""
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        return code
    except FileNotFoundError as exc:
        # The trace readers raise with their own message; bare OS errors only carry a path.
        text = f"{exc.filename}: no such file" if exc.errno is not None and exc.filename else str(exc)
        print(f"gpufleet {args.command}: error: {text}", file=sys.stderr)
        return 2
    except (ModelError, ProfileError, UsageError) as exc:
        print(f"gpufleet {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
