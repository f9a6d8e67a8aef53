"""One device-plugin endpoint: a gRPC server on a unix socket, and its registration with the kubelet.

The order is the API's: serve first, then call Register. The server is threaded, so the
kubelet's GetDevicePluginOptions call, made from inside Register, is answered while our
Register call is still waiting.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from concurrent import futures
from pathlib import Path

import grpc  # type: ignore[import-untyped]  # grpcio ships no type information

from gpufleet.agent.plan import ResourcePlan
from gpufleet.agent.servicer import DevicePluginServicer, PluginContext
from gpufleet.agent.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)
API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
_WORKERS = 8
"""Enough for a ListAndWatch stream (held for its life) plus concurrent unary calls."""


class RegistrationError(RuntimeError):
    """Register failed (kubelet down, or it rejected us); retried on the next supervisor cycle."""


def socket_identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, ctime) of a unix socket, or None if there is none: a new kubelet makes a new one."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns) if stat.S_ISSOCK(st.st_mode) else None


class PluginServer:
    def __init__(self, plan: ResourcePlan, ctx: PluginContext, socket_dir: Path) -> None:
        self.plan = plan
        self._ctx = ctx
        self.socket_path = socket_dir / plan.socket_name
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()
        self.registered_with: tuple[int, int, int] | None = None
        """Identity of the kubelet socket we last registered with."""

    def start(self) -> None:
        self._remove_socket()
        self._stopping = threading.Event()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=_WORKERS,
                                                        thread_name_prefix=f"plugin-{self.plan.socket_name}"))
        servicer = DevicePluginServicer(self.plan, self._ctx, self._stopping)
        api_pb2_grpc.add_DevicePluginServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        if not server.add_insecure_port(f"unix://{self.socket_path}"):
            raise RegistrationError(f"cannot listen on {self.socket_path}")
        server.start()
        self._server = server
        self.registered_with = None
        log.info("serving %s on %s (%d device IDs)", self.plan.resource, self.socket_path, len(self.plan.units))

    def register(self, kubelet_socket: Path, timeout_s: float) -> None:
        identity = socket_identity(kubelet_socket)
        request = api_pb2.RegisterRequest(
            version=API_VERSION, endpoint=self.socket_path.name, resource_name=self.plan.resource,
            options=api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True))
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            try:
                stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
                stub.Register(request, timeout=timeout_s)
            except grpc.RpcError as exc:
                raise RegistrationError(f"{self.plan.resource}: Register with {kubelet_socket} failed: "
                                        f"{exc.code().name}: {exc.details()}") from None
        self.registered_with = identity
        log.info("registered %s with the kubelet", self.plan.resource)

    def socket_present(self) -> bool:
        return socket_identity(self.socket_path) is not None

    def stop(self, grace_s: float = 0.1) -> None:
        """Stop serving (open streams end, as with NVIDIA's plugin) and remove the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 2.0)
            self._server = None
        self._remove_socket()

    def _remove_socket(self) -> None:
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
