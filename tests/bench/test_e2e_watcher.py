"""bench/e2e.py's pod watch, which runs in a child process: `stop()` ends it even where the parent
process handles SIGTERM (a CLI run in a test process installs such a handler, and a fork keeps
it), and a watch whose server is gone retries without spinning. In CI, a child that outlived its
cluster took a core for the rest of the run."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Iterator

import pytest

from gpufleet.testing.cluster.pki import make_pki

from . import load



@pytest.fixture(scope="module")
def e2e() -> ModuleType:
    return load("e2e.py", "e2e_bench_watcher")


@pytest.fixture
def sigterm_ignored() -> Iterator[None]:
    def ignore(signum: int, frame: FrameType | None) -> None:
        pass
    before = signal.signal(signal.SIGTERM, ignore)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stop_ends_the_watch_and_a_refused_server_is_retried_without_spinning(
        e2e: ModuleType, tmp_path: Path, sigterm_ignored: None) -> None:
    pki = make_pki(tmp_path / "pki")
    watcher = e2e.Watcher(e2e.Endpoint(f"https://127.0.0.1:{_closed_port()}", "token", str(pki.ca_cert)))
    child = watcher._proc
    try:
        time.sleep(1.0)
        resumed = watcher.resumed
        watcher.stop()
        alive = child.is_alive()
    finally:
        if child.is_alive():  # a regression fails here instead of hanging the run at exit
            child.kill()
            child.join(5)
    assert not alive, "the watch outlived stop()"
    assert 1 <= resumed <= 20, resumed  # refused, retried every 0.1 s or so


def test_waiting_for_a_watch_that_never_opens_ends_with_a_clear_error(e2e: ModuleType, tmp_path: Path,
                                                                       sigterm_ignored: None) -> None:
    pki = make_pki(tmp_path / "pki")
    watcher = e2e.Watcher(e2e.Endpoint(f"https://127.0.0.1:{_closed_port()}", "token", str(pki.ca_cert)))
    try:
        with pytest.raises(SystemExit, match="not watching after 1 s"):
            watcher.watching(timeout_s=1.0)
    finally:
        watcher.stop()
