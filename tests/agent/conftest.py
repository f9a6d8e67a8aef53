"""Shared pieces of the agent tests: short socket directories, a kubelet peer, a virtual clock."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gpufleet.agent import configsource, fake
from gpufleet.agent.kube import FakeNodeApi, PodView
from gpufleet.agent.runtime import Agent, AgentOptions

from .kubelet import WAIT_S, FakeKubelet

NODE = "gpu-node-1"
MPS_STUB_DIR = Path(__file__).parent / "mps_stub"
"""Holds `nvidia-cuda-mps-control`, the stand-in written from NVIDIA's documented interface (README there)."""


class FakeClock:
    """Virtual time for the health quiet period: tests advance it instead of sleeping.

    It counts its reads (the health monitor reads it once per poll), so a test can wait for
    polls to happen rather than for wall-clock time to pass.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.reads = 0
        self._cond = threading.Condition()

    def __call__(self) -> float:
        with self._cond:
            self.reads += 1
            self._cond.notify_all()
            return self.now

    def advance(self, seconds: float) -> None:
        with self._cond:
            self.now += seconds

    def wait_reads(self, n: int, timeout_s: float = WAIT_S) -> None:
        """Wait until the clock has been read `n` more times after this call."""
        with self._cond:
            target = self.reads + n
            if not self._cond.wait_for(lambda: self.reads >= target, timeout_s):
                raise AssertionError(f"the clock was read {n} times fewer than expected within {timeout_s} s")


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(sock_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(sock_dir)
    k.start()
    yield k
    k.stop()


AgentFactory = Callable[..., tuple[Agent, fake.FakeBackend, FakeNodeApi]]


@pytest.fixture
def mps_root(sock_dir: Path) -> Path:
    """An MPS root for configs (`flags: {mpsRoot: ...}`): short, since the daemon's socket lives under it."""
    return sock_dir / "mps"


def kill_mps_daemons(root: Path) -> None:
    """SIGKILL every control daemon whose pid file is under `root` (a test's leftovers)."""
    for pid_file in root.rglob("nvidia-cuda-mps-control.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture
def make_agent(sock_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentFactory]:
    """Start an agent on a fixture with a config text; every agent is stopped at teardown.

    The MPS control stand-in comes first on PATH, so configs with MPS sharing get a daemon.
    """
    agents: list[Agent] = []
    monkeypatch.setenv("PATH", f"{MPS_STUB_DIR}{os.pathsep}{os.environ.get('PATH', '')}")

    def factory(fixture: str = "h100-sxm-8", config: str = "", pods: tuple[PodView, ...] = (),
                clock: FakeClock | None = None, **options: Any) -> tuple[Agent, fake.FakeBackend, FakeNodeApi]:
        config_file = tmp_path / "config.yaml"
        config_file.write_text(config)
        backend = fake.load_fixture(fixture)
        api = FakeNodeApi(pods=pods)
        agent = Agent(lambda: backend, api, configsource.ConfigSource(config_file),
                      AgentOptions(NODE, sock_dir, metrics_port=0, health_poll_s=0.05, **options),
                      clock=clock or FakeClock(), dev_exists=lambda path: path.endswith(("nvidiactl", "nvidia-uvm")))
        agent.start()
        agents.append(agent)
        return agent, backend, api

    yield factory
    for a in agents:
        a.stop()
    kill_mps_daemons(sock_dir)
