"""The DevicePlugin gRPC service of one resource: a thin translation to the pure modules.

ListAndWatch sends the full device list at once and again whenever the health board
changes. GetPreferredAllocation and Allocate first look for the scheduler's choice among
the pods bound to this node (`assignments`), and otherwise fall back to topology
(`preferred`). For whole GPUs and MIG devices the scheduler's choice is honoured through
GetPreferredAllocation, so that the kubelet's own bookkeeping names the same devices the
container gets; for fractions the kubelet's IDs are only tokens and Allocate maps the
container to the GPU of the pod's assignment.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import grpc  # type: ignore[import-untyped]  # grpcio ships no type information

from gpufleet.agent import allocate as alloc
from gpufleet.agent import assignments, mps, preferred
from gpufleet.agent.config import AgentConfig
from gpufleet.agent.health import HealthBoard
from gpufleet.agent.inventory import NodeGpuInventory
from gpufleet.agent.kube import KubeAccessError
from gpufleet.agent.metrics import AgentMetrics
from gpufleet.agent.plan import Kind, ResourcePlan
from gpufleet.agent.v1beta1 import api_pb2, api_pb2_grpc
from gpufleet.model import annotations as ann

log = logging.getLogger(__name__)
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
STREAM_CHECK_S = 0.5
"""How often an idle ListAndWatch stream checks that it is still wanted."""


@dataclass
class PluginContext:
    """What every resource's service shares."""

    node: str
    config: AgentConfig
    inventory: NodeGpuInventory
    board: HealthBoard
    book: assignments.AssignmentBook
    metrics: AgentMetrics
    dev_exists: Callable[[str], bool]


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, plan: ResourcePlan, ctx: PluginContext, stopping: threading.Event) -> None:
        self._plan, self._ctx, self._stopping = plan, ctx, stopping
        self._gpu_units = {u.gpu: u for u in reversed(plan.units)}
        self._daemon = mps.daemon_resource(plan, ctx.config)
        """The resource whose MPS daemon this plan's containers use; the board holds it while it is down."""

    def GetDevicePluginOptions(self, request: api_pb2.Empty, context: Any) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api_pb2.Empty, context: Any) -> Iterator[api_pb2.ListAndWatchResponse]:
        board, seen = self._ctx.board, -1
        while not self._stopping.is_set() and context.is_active():
            version = board.version
            if version != seen:
                yield self._device_list(board.unhealthy(), self._daemon in board.held())
                seen = version
            board.wait_change(seen, STREAM_CHECK_S)

    def GetPreferredAllocation(self, request: api_pb2.PreferredAllocationRequest,
                               context: Any) -> api_pb2.PreferredAllocationResponse:
        response = api_pb2.PreferredAllocationResponse()
        for creq in request.container_requests:
            available, must = list(creq.available_deviceIDs), list(creq.must_include_deviceIDs)
            size = creq.allocation_size
            ids = self._assigned_ids(available, must, size) or preferred.preferred(
                self._plan, available, must, size, self._domain,
                self._ctx.config.flags.plugin.shared_devices_allocation_policy == "packed")
            response.container_responses.add(deviceIDs=ids)
        return response

    def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        response = api_pb2.AllocateResponse()
        resource = self._plan.resource
        try:
            held = self._ctx.board.held().get(self._daemon or "")
            if held is not None:
                raise alloc.AllocationError(f"{resource}: no new MPS clients until the MPS control daemon of "
                                            f"{self._daemon} is back: {held}")
            for creq in request.container_requests:
                ids = list(creq.devices_ids)
                grant = self._fraction_grant(ids) if self._plan.kind is Kind.MILLI else None
                if grant is None and self._plan.replicas == 1:
                    self._note_scheduler_choice(ids)
                result = alloc.allocate(self._plan, ids, self._ctx.config, grant=grant,
                                        dev_exists=self._ctx.dev_exists)
                _add_container(response, result)
        except (alloc.AllocationError, KubeAccessError) as exc:
            self._ctx.metrics.allocations.labels(resource, "error").inc()
            log.warning("Allocate %s failed: %s", resource, exc)
            code = grpc.StatusCode.UNAVAILABLE if isinstance(exc, KubeAccessError) else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(exc))
        self._ctx.metrics.allocations.labels(resource, "ok").inc(len(request.container_requests))
        return response

    def PreStartContainer(self, request: api_pb2.PreStartContainerRequest,
                          context: Any) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()

    def _device_list(self, unhealthy: frozenset[str], held: bool) -> api_pb2.ListAndWatchResponse:
        response = api_pb2.ListAndWatchResponse()
        for u in self._plan.units:
            bad = held or u.gpu in unhealthy or (u.mig is not None and u.mig in unhealthy)
            device = response.devices.add(ID=u.id, health=UNHEALTHY if bad else HEALTHY)
            if u.numa is not None and u.numa >= 0:
                device.topology.nodes.add(ID=u.numa)
        return response

    def _domain(self, gpu_uuid: str) -> str | None:
        gpu = self._ctx.inventory.gpu(gpu_uuid)
        return gpu.nvlink_domain if gpu else None

    def _assigned_ids(self, available: list[str], must: list[str], size: int) -> list[str] | None:
        """The IDs of the oldest open scheduler assignment that fits this request, if any."""
        if self._plan.replicas > 1:
            return None
        try:
            candidates = self._ctx.book.candidates()
        except KubeAccessError as exc:
            log.warning("no scheduler assignments (API unreachable: %s); using topology", exc)
            return None
        free = [a for a in available if a in self._plan.by_id]
        for c in candidates:
            ids = self._ids_for(c.assignment, free, size)
            if ids is not None and set(must) <= set(ids):
                return ids
        return None

    def _ids_for(self, a: ann.GpuAssignment, free: list[str], size: int) -> list[str] | None:
        plan = self._plan
        if plan.kind is Kind.MILLI:
            if not a.is_fraction or a.milli != size:
                return None
            tokens = [i for i in free if plan.by_id[i].gpu == a.gpus[0]]
            return tokens[:size] if len(tokens) >= size else None
        if a.is_fraction:
            return None
        devices = assignments.assigned_devices(a, self._ctx.inventory)
        ids = [i for i in free if (plan.by_id[i].mig or plan.by_id[i].gpu) in (devices or ())]
        return ids if devices is not None and len(devices) == size == len(ids) else None

    def _fraction_grant(self, ids: list[str]) -> alloc.FractionGrant:
        token_gpus = {self._plan.by_id[i].gpu for i in ids if i in self._plan.by_id}
        matching = [c for c in self._ctx.book.candidates()
                    if c.assignment.is_fraction and c.assignment.milli == len(ids)]
        if not matching:
            raise alloc.AllocationError(
                f"no pod bound to node {self._ctx.node} by scheduler {ann.SCHEDULER_NAME} awaits {len(ids)} "
                f"{ann.GPU_MILLI_RESOURCE}; GPU fractions are served only to pods that gpufleet placed")
        chosen = next((c for c in matching if c.assignment.gpus[0] in token_gpus), matching[0])
        gpu = chosen.assignment.gpus[0]
        unit = self._gpu_units.get(gpu)
        if unit is None:
            raise alloc.AllocationError(f"pod {chosen.key}: assigned GPU {gpu} offers no fractions on this node")
        if gpu in self._ctx.board.unhealthy():
            raise alloc.AllocationError(f"pod {chosen.key}: assigned GPU {gpu} is unhealthy")
        self._ctx.book.consume(chosen)
        log.info("fraction for pod %s: %d milli, %d MiB on %s", chosen.key, chosen.assignment.milli,
                 chosen.assignment.mem_mib, gpu)
        return alloc.FractionGrant(unit, chosen.assignment.milli, chosen.assignment.mem_mib)

    def _note_scheduler_choice(self, ids: list[str]) -> None:
        """Consume the assignment these devices fulfil; the kubelet's IDs are what the container gets."""
        try:
            candidates = self._ctx.book.candidates()
        except KubeAccessError:
            return
        got = frozenset(self._plan.by_id[i].mig or self._plan.by_id[i].gpu for i in ids if i in self._plan.by_id)
        for c in candidates:
            if not c.assignment.is_fraction and assignments.assigned_devices(c.assignment, self._ctx.inventory) == got:
                self._ctx.book.consume(c)
                return


def _add_container(response: api_pb2.AllocateResponse, a: alloc.ContainerAllocation) -> None:
    c = response.container_responses.add()
    c.envs.update(a.envs)
    c.annotations.update(a.annotations)
    for m in a.mounts:
        c.mounts.add(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
    for d in a.devices:
        c.devices.add(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
    for name in a.cdi_devices:
        c.cdi_devices.add(name=name)
