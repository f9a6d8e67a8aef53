"""`gpufleet` command line: a thin edge that parses arguments and calls the library.

Each subcommand lives in its own module exposing `add_parser(subparsers)`; the module list
below is the one place commands are registered (no import-time side effects).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from typing import Sequence

from gpufleet.framework.profile import ProfileError
from gpufleet.model import ModelError

COMMAND_MODULES = (
    "gpufleet.cli.simulate_cmd",
    "gpufleet.cli.agent_cmd",
    "gpufleet.cli.scheduler_cmd",
    "gpufleet.cli.devcluster_cmd",
    "gpufleet.cli.dashboard_cmd",
)


class UsageError(Exception):
    """A user mistake the CLI reports in one line, without a traceback."""


def finite_float(text: str) -> float:
    """An argparse type: a float that is neither nan nor infinite (they pass every `< 0` check)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _whole(text: str, minimum: int, too_small: str) -> int:
    """`text` as an int of at least `minimum`; `too_small` is the message, formatted with the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(too_small.format(value))
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (worker counts)."""
    return _whole(text, 1, "must be at least 1, got {}")


def random_seed(text: str) -> int:
    """An argparse type: a random seed, 0 or more (`random.Random(-n)` is `random.Random(n)`, so a
    negative seed would silently repeat a positive one)."""
    return _whole(text, 0, "a seed is 0 or more, got {}")


def port(text: str) -> int:
    """An argparse type: a TCP port, 0..65535 (0 = any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def names(text: str, known: Sequence[str], what: str = "policy", *, allow_empty: bool = False) -> list[str]:
    """A comma-separated list of names, each one of `known` (at least one unless `allow_empty`)."""
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or (not chosen and not allow_empty):
        raise UsageError(f"unknown {what} {unknown[0] if unknown else '(none)'}; known: {', '.join(known)}")
    return chosen


def output_file(path: Path, flag: str) -> None:
    """Check before a long run that `path` can be written: its folder is made, and it is no folder itself."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    output_dir(path.parent, flag)


def output_dir(path: Path, flag: str) -> None:
    """Make the output folder `path` now, so that a bad path fails before the run rather than after it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{flag}: {path} exists and is not a directory") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot create {path}: {exc.strerror or exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="GPU-aware scheduling for Kubernetes: the live scheduler, the node agent, the trace "
                    "simulator with its experiments, the autoscaling planner (with Karpenter), and the "
                    "dashboard.",
        epilog="Docs: README.md and docs/ (concepts.md, scheduler.md, agent.md, simulator.md, autoscaling.md).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Give every (sub)command its full name (`gpufleet experiment autoscale`) as `args.prog`, so
    our errors start the way argparse's own do for the same command."""
    parser.set_defaults(prog=parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _name_commands(child)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` with `parser` and run the chosen command; user mistakes are one line, exit 2."""
    _name_commands(parser)
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
        print(f"{_prog(args)}: error: {text}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not exc.filename:  # not about a file the user named (a socket, say): a bug to see in full
            raise
        # A folder where a file was expected, a file that cannot be read or written, ...
        reason = (exc.strerror or str(exc)).lower()
        print(f"{_prog(args)}: error: {exc.filename}: {reason}", file=sys.stderr)
        return 2
    except (ModelError, ProfileError, UsageError) as exc:
        print(f"{_prog(args)}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _prog(args: argparse.Namespace) -> str:
    return str(getattr(args, "prog", None) or f"gpufleet {args.command}")


if __name__ == "__main__":
    sys.exit(main())
