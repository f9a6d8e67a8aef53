"""Starting, watching and stopping the MPS control daemons (`nvidia-cuda-mps-control`).

Start, per daemon (NVIDIA's mps-control-daemon does the same; docs/hardware.md shows it on an H100):

1. compute mode EXCLUSIVE_PROCESS on its GPUs when configured, through the backend (NVML);
2. the pipe and log directories (0755), then `nvidia-cuda-mps-control -d` with
   CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY and CUDA_VISIBLE_DEVICES;
3. the default limits, one command each (`echo CMD | nvidia-cuda-mps-control`): a restarted
   daemon has none of the defaults set before;
4. ready: the board releases the resource and ListAndWatch advertises its replicas healthy.

A daemon already answering on the pipe directory is adopted (its defaults are set again).

Liveness: every `check_s` the daemon must answer `get_server_list`. Until it first answers,
and whenever it stops, the resource is held: its devices are advertised Unhealthy, so the
kubelet admits no new pod to it, Allocate refuses, and the node condition says why. It is
restarted at once, then after 1, 2, 4 ... 60 s while it keeps failing; the backoff resets
after `stable_s` up. Daemons and servers killed under us are reaped when we are their parent
(the agent is PID 1 of its container), so they do not stay as zombies.

Retiring (the config stops sharing a resource with MPS, or the agent stops): `quit` is sent
only when no client is attached, since quit blocks until every client has gone; otherwise the
supervisor says which clients it waits for and asks again at every check.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from gpufleet.agent.backend import BackendError, GpuBackend
from gpufleet.agent.health import HealthBoard
from gpufleet.agent.metrics import AgentMetrics
from gpufleet.agent.mps import MpsDaemonSpec, MpsStatus

log = logging.getLogger(__name__)
PID_FILE = "nvidia-cuda-mps-control.pid"
LIVENESS = "get_server_list"


class MpsError(RuntimeError):
    """The control program failed, was not found, or did not answer in time."""


class MpsControl:
    """One daemon's control interface: `-d` to start it, one process per command."""

    def __init__(self, binary: str, spec: MpsDaemonSpec, timeout_s: float = 5.0) -> None:
        self.binary, self.spec, self.timeout_s = binary, spec, timeout_s

    def start(self) -> None:
        for directory in (self.spec.pipe_dir, self.spec.log_dir):
            os.makedirs(directory, 0o755, exist_ok=True)
        self._run(["-d"], "", "start (-d)")

    def send(self, command: str) -> str:
        return self._run([], command + "\n", command)

    def server_pids(self) -> list[int]:
        return _pids(self.send(LIVENESS))

    def clients(self) -> list[int]:
        return [pid for server in self.server_pids() for pid in _pids(self.send(f"get_client_list {server}"))]

    def daemon_pid(self) -> int | None:
        try:
            with open(os.path.join(self.spec.pipe_dir, PID_FILE)) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def _run(self, args: list[str], stdin: str, what: str) -> str:
        env = {k: os.environ[k] for k in ("PATH", "LD_LIBRARY_PATH") if k in os.environ}
        env.update(self.spec.env())
        # Files, not pipes: the daemon that `-d` forks may keep its stdout, and a pipe would not end.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            try:
                proc = subprocess.Popen([self.binary, *args], stdin=subprocess.PIPE, stdout=out, stderr=err,
                                        env=env, text=True, start_new_session=bool(args))
            except FileNotFoundError:
                raise MpsError(f"{self.binary} not found: the NVIDIA container toolkit mounts it into containers "
                               "that ask for the `utility` and `compute` driver capabilities") from None
            except OSError as exc:
                raise MpsError(f"cannot run {self.binary}: {exc}") from None
            try:
                proc.communicate(stdin, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise MpsError(f"{self.spec.resource}: `{what}` got no answer within {self.timeout_s:g} s") from None
            out.seek(0)
            err.seek(0)
            reply, problem = out.read().strip(), err.read().strip()
        if proc.returncode != 0:
            detail = (problem or reply or "no output").splitlines()[0][:200]
            raise MpsError(f"{self.spec.resource}: `{what}` failed (exit {proc.returncode}): {detail}")
        return reply


def _pids(reply: str) -> list[int]:
    return [int(word) for word in reply.split() if word.isdigit()]


def backoff_s(failures: int, base_s: float = 1.0, cap_s: float = 60.0) -> float:
    """Delay before the next start after `failures` consecutive failures: 0, then 1, 2, 4 ... cap."""
    return 0.0 if failures <= 1 else min(cap_s, base_s * 2 ** (failures - 2))


@dataclass
class _Daemon:
    control: MpsControl
    up: bool = False
    reason: str = "MPS control daemon not started yet"
    failures: int = 0
    next_try: float = 0.0
    next_check: float = 0.0
    up_since: float = 0.0
    starts: int = 0
    pids: set[int] = field(default_factory=set)
    """Daemon and server processes seen, to reap when they die."""
    waiting_for: str = ""
    """Why a retiring daemon is not quit yet."""


class MpsSupervisor:
    """Keeps one control daemon per spec running; `sync()` is called from the agent's supervisor loop."""

    def __init__(self, backend: GpuBackend, board: HealthBoard, metrics: AgentMetrics, binary: str, *,
                 clock: Callable[[], float] = time.monotonic, check_s: float = 2.0, stable_s: float = 60.0,
                 timeout_s: float = 5.0) -> None:
        self._backend, self._board, self._metrics = backend, board, metrics
        self.binary, self._clock = binary, clock
        self.check_s, self.stable_s, self.timeout_s = check_s, stable_s, timeout_s
        self._daemons: dict[str, _Daemon] = {}
        self._retiring: dict[str, _Daemon] = {}
        self.version = 0
        """Bumped whenever status() would change, so that the node report is written again."""
        self._status = MpsStatus((), {}, {})
        """A snapshot, swapped whole: the node writer reads it without waiting for a slow command."""

    def apply(self, specs: tuple[MpsDaemonSpec, ...], binary: str | None = None) -> None:
        """Make `specs` the daemons to run. A resource no longer listed is retired; a changed spec of
        the same resource keeps its daemon and gets the new defaults (new GPUs need a restart)."""
        self.binary = binary or self.binary
        wanted = {s.resource: s for s in specs}
        for resource in [r for r in self._daemons if r not in wanted]:
            self._retiring[resource] = self._daemons.pop(resource)
            self._board.release(resource)
            with contextlib.suppress(KeyError):
                self._metrics.mps_up.remove(resource)
        for resource, spec in wanted.items():
            d = self._daemons.get(resource) or self._retiring.pop(resource, None)
            if d is None:
                d = _Daemon(MpsControl(self.binary, spec, self.timeout_s))
                self._board.hold(resource, d.reason)
            elif d.control.spec != spec or d.control.binary != self.binary:
                d.control = MpsControl(self.binary, spec, self.timeout_s)
                d.up, d.next_try, d.failures = False, 0.0, 0  # adopted again on the next sync, defaults resent
            self._daemons[resource] = d
        self.version += 1
        self._snapshot()

    def sync(self) -> None:
        now = self._clock()
        for d in list(self._daemons.values()):
            self._sync_daemon(d, now)
        for resource, d in list(self._retiring.items()):
            if self._retire(d):
                del self._retiring[resource]
                self.version += 1
        self._snapshot()

    def stop(self) -> None:
        """Quit every daemon that has no client; leave the others (they end with the container)."""
        for resource, d in list(self._daemons.items()):
            if not self._retire(d):
                log.warning("leaving the MPS daemon of %s running: %s", resource, d.waiting_for)
        self._daemons.clear()
        self._snapshot()

    def status(self) -> MpsStatus:
        return self._status

    def _snapshot(self) -> None:
        self._status = MpsStatus(tuple(self._daemons), {r: d.reason for r, d in self._daemons.items() if not d.up},
                                 {r: d.waiting_for or "quitting" for r, d in self._retiring.items()})

    def _sync_daemon(self, d: _Daemon, now: float) -> None:
        if d.up:
            if now < d.next_check:
                return
            d.next_check = now + self.check_s
            try:
                d.pids.update(d.control.server_pids())
            except MpsError as exc:
                self._down(d, f"MPS control daemon stopped answering: {exc}", now)
            else:
                if d.failures and now - d.up_since >= self.stable_s:
                    d.failures = 0
                return
        if now >= d.next_try:
            self._start(d, now)

    def _start(self, d: _Daemon, now: float) -> None:
        spec, resource = d.control.spec, d.control.spec.resource
        try:
            if spec.exclusive_process:
                for gpu in spec.gpus:
                    try:
                        self._backend.set_exclusive_process(gpu, True)
                    except BackendError as exc:
                        raise MpsError(f"cannot put {gpu} in EXCLUSIVE_PROCESS compute mode ({exc}); "
                                       "gpufleet.mps.exclusiveProcess: false runs MPS without it") from None
            if not self._answers(d):
                self._reap(d)
                d.control.start()
            for command in spec.default_commands():
                d.control.send(command)
        except (MpsError, BackendError) as exc:
            d.failures += 1
            delay = backoff_s(d.failures)
            d.next_try = now + delay
            self._set_reason(d, f"MPS control daemon cannot start (attempt {d.failures}, next in {delay:g} s): {exc}")
            log.warning("%s: %s", resource, d.reason)
            self._board.hold(resource, d.reason)
            self._metrics.mps_up.labels(resource).set(0)
            return
        if d.starts:
            self._metrics.mps_restarts.labels(resource).inc()
        d.starts += 1
        d.up, d.up_since, d.next_check = True, now, now + self.check_s
        pid = d.control.daemon_pid()
        if pid is not None:
            d.pids.add(pid)
        self._set_reason(d, "")
        self._board.release(resource)
        self._metrics.mps_up.labels(resource).set(1)
        log.info("MPS control daemon for %s is up (pipe %s; defaults: %s)", resource, spec.pipe_dir,
                 "; ".join(spec.default_commands()))

    def _down(self, d: _Daemon, reason: str, now: float) -> None:
        d.up = False
        d.failures += 1
        d.next_try = now + backoff_s(d.failures)
        self._set_reason(d, reason)
        self._reap(d)
        log.warning("%s: %s; restarting", d.control.spec.resource, reason)
        self._board.hold(d.control.spec.resource, reason)
        self._metrics.mps_up.labels(d.control.spec.resource).set(0)

    def _answers(self, d: _Daemon) -> bool:
        try:
            d.control.send(LIVENESS)
        except MpsError:
            return False
        return True

    def _retire(self, d: _Daemon) -> bool:
        """Quit the daemon if no client is attached; True when it is gone."""
        resource = d.control.spec.resource
        try:
            clients = d.control.clients()
        except MpsError:
            clients = None  # not answering: nothing left to quit
        if clients:
            why = f"waiting for {len(clients)} attached client(s) (pids {', '.join(map(str, clients))}) to exit"
            if why != d.waiting_for:
                log.warning("not quitting the MPS control daemon of %s: %s", resource, why)
                d.waiting_for = why
                self.version += 1
            return False
        if clients is not None:
            try:
                d.control.send("quit")
            except MpsError as exc:
                d.waiting_for = f"quit failed: {exc}"
                return False
        self._reap(d)
        self._restore_compute_mode(d.control.spec)
        log.info("MPS control daemon of %s stopped", resource)
        return True

    def _restore_compute_mode(self, spec: MpsDaemonSpec) -> None:
        if not spec.exclusive_process:
            return
        still_used = {g for other in self._daemons.values() if other.control.spec is not spec
                      for g in other.control.spec.gpus}
        for gpu in spec.gpus:
            if gpu not in still_used:
                try:
                    self._backend.set_exclusive_process(gpu, False)
                except BackendError as exc:
                    log.warning("cannot set compute mode DEFAULT on %s: %s", gpu, exc)

    def _set_reason(self, d: _Daemon, reason: str) -> None:
        if reason != d.reason:
            d.reason = reason
            self.version += 1

    @staticmethod
    def _reap(d: _Daemon) -> None:
        """Collect exited daemon and server processes that were re-parented to us (we are PID 1)."""
        for pid in list(d.pids):
            with contextlib.suppress(ChildProcessError, OSError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    continue
            d.pids.discard(pid)
