"""A kubelet-side peer of the DRA plugin API over real unix sockets, written from the API
(k8s.io/kubelet `pkg/apis/pluginregistration/v1`, `pkg/apis/dra/v1`) and from what the
kubelet does around it:

- its plugin watcher dials `<registry dir>/*-reg.sock`, calls `GetInfo`, accepts only type
  `DRAPlugin` with a service version it speaks (`v1.DRAPlugin`), and answers with
  `NotifyRegistrationStatus`;
- before it prepares a pod's claims it checks each one (`kubelet_checks`): the claim exists,
  is allocated, lists the pod in `status.reservedFor`, and its allocation's node selector
  picks this node; then it calls `NodePrepareResources` on the endpoint `GetInfo` named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import grpc  # type: ignore[import-untyped]

from gpufleet.agent.drav1 import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc

CALL_TIMEOUT_S = 5.0


class RegistrationRefused(Exception):
    pass


@dataclass
class DraEndpoint:
    info: Any
    channel: Any
    stub: Any

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        """(namespace, name, uid) of each claim."""
        request = dra_pb2.NodePrepareResourcesRequest(
            claims=[dra_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        return self.stub.NodePrepareResources(request, timeout=CALL_TIMEOUT_S)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        request = dra_pb2.NodeUnprepareResourcesRequest(
            claims=[dra_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims])
        return self.stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT_S)

    def close(self) -> None:
        self.channel.close()


def register(registration_socket: Path) -> DraEndpoint:
    """What the plugin watcher does with a new registration socket."""
    with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
        stub = registration_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=CALL_TIMEOUT_S)
        problem = None
        if info.type != "DRAPlugin":
            problem = f"plugin type {info.type!r} is not DRAPlugin"
        elif "v1.DRAPlugin" not in info.supported_versions:
            problem = f"no supported service version in {list(info.supported_versions)}"
        stub.NotifyRegistrationStatus(registration_pb2.RegistrationStatus(
            plugin_registered=problem is None, error=problem or ""), timeout=CALL_TIMEOUT_S)
    if problem is not None:
        raise RegistrationRefused(problem)
    dra = grpc.insecure_channel(f"unix://{info.endpoint}")
    return DraEndpoint(info, dra, dra_pb2_grpc.DRAPluginStub(dra))


def kubelet_checks(claim: Mapping[str, Any] | None, pod: Mapping[str, Any], node: str,
                   node_labels: Mapping[str, str]) -> list[str]:
    """The kubelet's checks before it prepares a claim for a pod; the problems found."""
    if claim is None:
        return ["the claim does not exist"]
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    problems = []
    if not allocation:
        problems.append("the claim is not allocated")
    if pod["metadata"]["uid"] not in {r.get("uid") for r in status.get("reservedFor") or []}:
        problems.append("the pod is not in status.reservedFor")
    selector = (allocation or {}).get("nodeSelector")
    if selector is not None and not any(_term_matches(t, node, node_labels) for t in selector.get("nodeSelectorTerms", [])):
        problems.append(f"the allocation's node selector does not pick this node: {selector}")
    return problems


def _term_matches(term: Mapping[str, Any], node: str, labels: Mapping[str, str]) -> bool:
    """Only the `In` operator, which is what allocations use; anything else does not match."""
    for e in term.get("matchExpressions", []):
        if e["operator"] != "In" or labels.get(e["key"]) not in e["values"]:
            return False
    for f in term.get("matchFields", []):  # metadata.name is the only field the API allows here
        if f["operator"] != "In" or f["key"] != "metadata.name" or node not in f["values"]:
            return False
    return True
