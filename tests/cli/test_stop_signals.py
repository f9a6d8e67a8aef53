"""SIGTERM and SIGINT stop a long-running command, and the handlers before come back after it."""

from __future__ import annotations

import os
import signal

import pytest

from gpufleet.cli.stop_signals import stop_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_command_and_the_old_handler_comes_back(sig: signal.Signals) -> None:
    seen: list[str] = []
    before = signal.signal(sig, lambda s, f: seen.append("old"))
    try:
        with stop_signals(lambda: seen.append("stop")):
            os.kill(os.getpid(), sig)  # Python runs the handler in the main thread, before the next line
            assert seen == ["stop"]
        os.kill(os.getpid(), sig)
        assert seen == ["stop", "old"]
    finally:
        signal.signal(sig, before)


def test_the_handlers_come_back_when_the_command_fails() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(RuntimeError):
        with stop_signals(lambda: None):
            raise RuntimeError("a user mistake, reported after the handlers are back")
    assert {s: signal.getsignal(s) for s in before} == before
