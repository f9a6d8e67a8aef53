"""`stop_signals`: SIGTERM and SIGINT ask a long-running command to stop while it runs, and the
handlers there before come back when it returns.

A command run inside another Python program (the tests run the commands in-process) would
otherwise leave its handler behind, calling into a finished command's objects on the next
signal, and a process forked later inherits it.
"""

from __future__ import annotations

import contextlib
import signal
from types import FrameType
from typing import Callable, Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT call `stop()` (from the main thread, as Python runs
    signal handlers); after it, the handlers before are restored."""
    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    before = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)  # None: set outside Python
