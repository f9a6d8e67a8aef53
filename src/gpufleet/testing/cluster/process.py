"""One control-plane process: started with its log in a file, stopped with SIGTERM, then SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

import httpx2


class ComponentFailed(RuntimeError):
    """A component exited or did not become ready: the message ends with the tail of its log."""


class Process:
    def __init__(self, name: str, argv: Sequence[str], log: Path, *, env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.log, self.env = name, list(argv), log, env
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} starting {' '.join(self.argv)}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=self.env, start_new_session=True)
        return self

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll `ready` until true; raise ComponentFailed if the process exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.alive():
                raise ComponentFailed(f"{self.name} exited (code {self._proc.returncode if self._proc else None}) "
                                      f"before {what}:\n{self.tail()}")
            try:
                if ready():
                    return
            except (OSError, httpx2.TransportError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ComponentFailed(f"{self.name} not {what} after {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait(10)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._signal(signal.SIGKILL)
            self._proc.wait(10)

    def _signal(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(f"  {self.name}| {line}" for line in text[-lines:])
