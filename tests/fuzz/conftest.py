"""Print how many inputs each fuzz target tried in this run (docs/security.md, "Fuzzing")."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.fuzz import targets
    if not targets.COUNTS:
        return
    terminalreporter.section("fuzz inputs per target")
    for name, count in sorted(targets.COUNTS.items()):
        terminalreporter.write_line(f"{name:20} {count:>8,} inputs ({targets.OUTCOMES[name, 'accepted']:,} accepted, "
                                    f"{targets.OUTCOMES[name, 'rejected']:,} rejected)")
