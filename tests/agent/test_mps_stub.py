"""The MPS control stand-in itself: start, commands, quit, restart and the stub-only hooks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

STUB = Path(__file__).parent / "mps_stub" / "nvidia-cuda-mps-control"
WAIT_S = 5.0


def _gone(pid: int) -> bool:
    """True once `pid` has exited; a zombie counts as gone (pid 1 here may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while not _gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


@dataclass
class Mps:
    """One pipe directory and log directory, and the daemons started on them."""

    pipe_dir: Path
    log_dir: Path
    started: list[int]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
                "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    @property
    def pid_file(self) -> Path:
        return self.pipe_dir / "nvidia-cuda-mps-control.pid"

    @property
    def clients_file(self) -> Path:
        return self.pipe_dir / "stub-clients"

    def daemon_pid(self) -> int:
        return int(self.pid_file.read_text())

    def run(self, *args: str, stdin: str = "", extra_env: dict[str, str] | None = None,
            timeout_s: float = WAIT_S) -> subprocess.CompletedProcess[str]:
        # The interpreter is named to skip a slow pyenv shim; test_runs_as_program covers the shebang.
        return subprocess.run([sys.executable, str(STUB), *args], input=stdin,
                              env={**self.env, **(extra_env or {})}, capture_output=True,
                              text=True, timeout=timeout_s, check=False)

    def start(self, extra_env: dict[str, str] | None = None) -> int:
        result = self.run("-d", extra_env=extra_env)
        assert result.returncode == 0, result.stderr
        pid = self.daemon_pid()
        self.started.append(pid)
        return pid

    def send(self, *commands: str) -> str:
        result = self.run(stdin="".join(f"{c}\n" for c in commands))
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture
def mps(sock_dir: Path, tmp_path: Path) -> Iterator[Mps]:
    m = Mps(pipe_dir=sock_dir / "pipe", log_dir=tmp_path / "log", started=[])
    yield m
    pids = set(m.started)
    if m.pid_file.exists():
        pids.add(m.daemon_pid())
    for pid in pids:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_runs_as_program(mps: Mps) -> None:
    assert STUB.read_text().startswith("#!/usr/bin/env python3\n")
    started = subprocess.run([str(STUB), "-d"], env=mps.env, capture_output=True, text=True,
                             timeout=WAIT_S, check=False)
    assert started.returncode == 0, started.stderr
    mps.started.append(mps.daemon_pid())
    reply = subprocess.run([str(STUB)], input="get_server_list\n", env=mps.env,
                           capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert (reply.returncode, reply.stdout) == (0, "")


def test_start_writes_socket_pid_log_and_environment(mps: Mps) -> None:
    pid = mps.start(extra_env={"STUB_PROBE": "x"})
    assert (mps.pipe_dir / "control").is_socket()
    env = json.loads((mps.log_dir / "stub-env.json").read_text())
    assert env["STUB_PROBE"] == "x"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(mps.pipe_dir)
    mps.send("get_server_list")
    log = (mps.log_dir / "control.log").read_text().splitlines()
    assert log[0].endswith(f" Control {pid:5d}] Starting control daemon using socket "
                           f"{mps.pipe_dir}/control")
    assert log[1].endswith(f" Control {pid:5d}] Cmd:get_server_list")


def test_defaults_set_and_get(mps: Mps) -> None:
    mps.start()
    assert mps.send("get_default_active_thread_percentage") == "100.0\n"
    assert mps.send("set_default_active_thread_percentage 50",
                    "get_default_active_thread_percentage") == "50.0\n50.0\n"
    assert mps.send("set_default_active_thread_percentage 0").startswith("Error")
    assert mps.send("set_default_active_thread_percentage 101").startswith("Error")
    assert mps.send("get_default_device_pinned_mem_limit 0") == "0\n"
    assert mps.send("set_default_device_pinned_mem_limit 0 8192M",
                    "set_default_device_pinned_mem_limit GPU-1234 20389M",
                    "get_default_device_pinned_mem_limit 0",
                    "get_default_device_pinned_mem_limit GPU-1234") == "8G\n20389M\n"
    assert mps.send("set_default_device_pinned_mem_limit 0 lots").startswith("Error")
    assert mps.send("no_such_command") == "Unrecognized command\n"


def test_server_and_client_lists_follow_the_clients_hook(mps: Mps) -> None:
    pid = mps.start()
    assert mps.send("get_server_list", "get_device_client_list") == ""
    mps.clients_file.write_text("111 222\n")
    assert mps.send("get_server_list") == f"{pid + 1}\n"
    assert mps.send(f"get_client_list {pid + 1}") == "111\n222\n"
    assert mps.send("get_device_client_list") == "111\n222\n"


def test_quit_waits_until_no_client_is_attached(mps: Mps) -> None:
    pid = mps.start()
    mps.clients_file.write_text("4242")
    emptier = threading.Timer(0.5, mps.clients_file.write_text, args=("",))
    emptier.start()
    began = time.monotonic()
    assert mps.send("quit") == ""
    assert time.monotonic() - began >= 0.45
    emptier.join()
    assert not (mps.pipe_dir / "control").exists()
    assert not mps.pid_file.exists()
    _wait_gone(pid)


def test_quit_without_clients_returns_at_once(mps: Mps) -> None:
    pid = mps.start()
    assert mps.send("quit") == ""
    _wait_gone(pid)


def test_second_start_is_refused_while_one_runs(mps: Mps) -> None:
    pid = mps.start()
    second = mps.run("-d")
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert mps.daemon_pid() == pid


def test_restart_after_sigkill_on_the_same_directories(mps: Mps) -> None:
    first = mps.start()
    os.kill(first, signal.SIGKILL)
    _wait_gone(first)
    assert (mps.pipe_dir / "control").exists()  # stale, nobody listening
    second = mps.start()
    assert second != first
    assert mps.send("get_default_active_thread_percentage") == "100.0\n"


def test_sigterm_removes_socket_and_pid_file(mps: Mps) -> None:
    pid = mps.start()
    os.kill(pid, signal.SIGTERM)
    _wait_gone(pid)
    assert not (mps.pipe_dir / "control").exists()
    assert not mps.pid_file.exists()


def test_client_without_daemon_exits_1(mps: Mps) -> None:
    result = mps.run(stdin="get_server_list\n")
    assert result.returncode == 1
    assert result.stderr
    assert result.stdout == ""


def test_fail_start_hook_refuses_to_start(mps: Mps) -> None:
    result = mps.run("-d", extra_env={"STUB_MPS_FAIL_START": "1"})
    assert result.returncode == 1
    assert "nvidia-cuda-mps-control: stub: start refused" in result.stderr
    assert not mps.pid_file.exists()


def test_hang_hook_never_replies(mps: Mps) -> None:
    mps.start(extra_env={"STUB_MPS_HANG": "1"})
    with pytest.raises(subprocess.TimeoutExpired):
        mps.run(stdin="get_server_list\n", timeout_s=0.5)
