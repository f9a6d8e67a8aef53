"""For the whole live session: every request of the scheduler's and the agent's ServiceAccounts,
on every control plane a test starts, is recorded (`rbac_record.py`), and the RBAC test
(`test_rbac_recorded_live.py`) runs after every other test to check deploy/'s RBAC against it.

What that test needs to know about the session is kept here too: which live tests were
collected, deselected or skipped, so that "every grant was used" is judged only on a run of the
whole live suite.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Generator, Iterator

import pytest

from gpufleet.testing.cluster import add_stop_listener

from .rbac_record import LIVE, LiveRun, Recording

LAST = "test_rbac_recorded_live.py"
"""The module that runs after every other test of the session."""
RUN = pytest.StashKey[LiveRun]()
"""This session's LiveRun, filled by the hooks below."""


def _run(config: pytest.Config) -> LiveRun:
    if RUN not in config.stash:
        config.stash[RUN] = LiveRun(args=list(config.args))
    return config.stash[RUN]


def _is_live(item: pytest.Item) -> bool:
    return item.path.parent == LIVE


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_live(item):
            _run(item.config).deselected.append(item.nodeid)


@pytest.hookimpl(trylast=True)  # after every hook that deselects or reorders
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = _run(config)
    run.modules = {item.path.name for item in items if _is_live(item)}
    items.sort(key=lambda item: _is_live(item) and item.path.name == LAST)  # stable: the rest keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if _is_live(item) and item.path.name != LAST:
        if report.skipped:
            _run(item.config).skipped.append(item.nodeid)
        elif report.failed:
            _run(item.config).failed.append(item.nodeid)
    return report


@pytest.fixture(scope="session", autouse=True)
def rbac_recording() -> Iterator[Recording]:
    """Every call the scheduler and the agent make, on every cluster started from here on."""
    recording = Recording()
    remove = add_stop_listener(recording.listener)
    try:
        yield recording
    finally:
        remove()


@pytest.fixture(scope="session")
def live_run(request: pytest.FixtureRequest) -> LiveRun:
    return _run(request.config)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
