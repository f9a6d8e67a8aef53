"""A kubelet-side peer of the device-plugin API over real unix sockets, written from the API.

It serves `/v1beta1.Registration/Register` on `<dir>/kubelet.sock` and, like the kubelet's
device manager, does the following *inside* Register: checks the version, dials the plugin's
endpoint and calls GetDevicePluginOptions; then it starts ListAndWatch in the background and
keeps every list it receives. Every call has a timeout and every thread is joined with one.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

from gpufleet.agent.v1beta1 import api_pb2, api_pb2_grpc

CALL_TIMEOUT_S = 5.0
WAIT_S = 10.0
"""How long a test waits for something the agent should do: generous, since it only bounds a failing
test; how fast the agent is belongs in bench/agent_latency.py, not in unit tests."""


@dataclass
class Endpoint:
    """A registered plugin as this kubelet sees it."""

    request: Any
    options: Any
    """The GetDevicePluginOptions answer obtained during Register."""
    options_during_register: bool
    channel: Any
    stub: Any
    registered_at: float
    lists: queue.Queue[Any] = field(default_factory=queue.Queue)
    stream: Any = None
    thread: threading.Thread | None = None

    def next_list(self, timeout_s: float = WAIT_S) -> Any:
        return self.lists.get(timeout=timeout_s)

    def wait_list(self, predicate: Any, timeout_s: float = WAIT_S) -> Any:
        """The first list (from now on) for which predicate(list) holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("no matching ListAndWatch update in time")
            try:
                update = self.lists.get(timeout=remaining)
            except queue.Empty:
                continue
            if predicate(update):
                return update

    def allocate(self, *containers: list[str]) -> Any:
        request = api_pb2.AllocateRequest()
        for ids in containers:
            request.container_requests.add(devices_ids=ids)
        return self.stub.Allocate(request, timeout=CALL_TIMEOUT_S)

    def preferred(self, available: list[str], size: int, must: list[str] | None = None) -> list[str]:
        request = api_pb2.PreferredAllocationRequest()
        request.container_requests.add(available_deviceIDs=available, must_include_deviceIDs=must or [],
                                       allocation_size=size)
        response = self.stub.GetPreferredAllocation(request, timeout=CALL_TIMEOUT_S)
        return list(response.container_responses[0].deviceIDs)


class _Registration(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: Any, context: Any) -> Any:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        channel = grpc.insecure_channel(f"unix://{self._kubelet.dir / request.endpoint}")
        grpc.channel_ready_future(channel).result(timeout=CALL_TIMEOUT_S)
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=CALL_TIMEOUT_S)
        endpoint = Endpoint(request, options, True, channel, stub, time.monotonic())
        self._kubelet.add(endpoint)
        return api_pb2.Empty()


class FakeKubelet:
    def __init__(self, plugin_dir: Path) -> None:
        self.dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[Endpoint] = []
        self._cond = threading.Condition()
        self._server: Any = None

    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()

    def add(self, endpoint: Endpoint) -> None:
        endpoint.stream = endpoint.stub.ListAndWatch(api_pb2.Empty())
        endpoint.thread = threading.Thread(target=self._watch, args=(endpoint,), daemon=True)
        endpoint.thread.start()
        with self._cond:
            old = self.endpoints.get(endpoint.request.resource_name)
            self.endpoints[endpoint.request.resource_name] = endpoint
            self.registrations.append(endpoint)
            self._cond.notify_all()
        if old is not None:
            self._close(old)

    def endpoint(self, resource: str, timeout_s: float = WAIT_S, after: float = 0.0) -> Endpoint:
        """The plugin registered for `resource` (at or after monotonic time `after`)."""
        with self._cond:
            ok = self._cond.wait_for(lambda: resource in self.endpoints
                                     and self.endpoints[resource].registered_at >= after, timeout_s)
            if not ok:
                raise AssertionError(f"{resource} did not register within {timeout_s} s")
            return self.endpoints[resource]

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait(CALL_TIMEOUT_S)
            self._server = None
        with self._cond:
            endpoints, self.endpoints = list(self.endpoints.values()), {}
        for e in endpoints:
            self._close(e)

    def restart(self) -> None:
        """What a kubelet restart does to the directory: every socket deleted, a new kubelet.sock."""
        self.stop()
        for path in self.dir.iterdir():
            if stat.S_ISSOCK(path.lstat().st_mode):
                os.unlink(path)
        self.start()

    @staticmethod
    def _watch(endpoint: Endpoint) -> None:
        try:
            for update in endpoint.stream:
                endpoint.lists.put(update)
        except grpc.RpcError:
            pass  # stream cancelled or plugin gone

    @staticmethod
    def _close(endpoint: Endpoint) -> None:
        endpoint.stream.cancel()
        if endpoint.thread is not None:
            endpoint.thread.join(CALL_TIMEOUT_S)
        endpoint.channel.close()
