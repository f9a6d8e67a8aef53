"""The agent's Kubernetes access, wired here because only the CLI may import both drivers.

`gpufleet.kube.KubeNodeApi` reads pods into `BoundPod` and raises `KubeError`; the agent's
`NodeApi` Protocol wants `PodView` and `KubeAccessError`. `AgentNodeApi` translates those
and nothing else: the agent's `NodePatch` already has the shape `kube` asks for.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from gpufleet.agent.kube import KubeAccessError, NodePatch, PodView
from gpufleet.cli.main import UsageError
from gpufleet.kube import config
from gpufleet.kube.errors import KubeError, PermanentError
from gpufleet.kube.node_api import KubeNodeApi

log = logging.getLogger(__name__)


class AgentNodeApi:
    """`KubeNodeApi` behind the agent's `NodeApi` Protocol."""

    def __init__(self, api: KubeNodeApi) -> None:
        self._api = api

    def node_labels(self) -> Mapping[str, str]:
        with _as_access_error():
            return self._api.node_labels()

    def node_annotations(self) -> Mapping[str, str]:
        with _as_access_error():
            return self._api.node_annotations()

    def pods_on_node(self) -> Sequence[PodView]:
        with _as_access_error():
            pods = self._api.pods_on_node()
        return [PodView(p.namespace, p.name, p.uid, p.node_name, p.scheduler_name, p.phase, p.created,
                        p.annotations) for p in pods]

    def patch_node(self, patch: NodePatch) -> None:
        with _as_access_error():
            self._api.patch_node(patch)

    def pod_event(self, pod: PodView, reason: str, note: str) -> None:
        with _as_access_error():
            self._api.pod_event(pod.namespace, pod.name, pod.uid, reason, note)

    def publish_resource_slices(self, driver: str, slices: Sequence[Mapping[str, Any]]) -> int:
        with _as_access_error():
            return self._api.publish_resource_slices(driver, slices)

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with _as_access_error():
            return self._api.resource_claim(namespace, name)


def connect(kubeconfig: Path | None, node_name: str) -> AgentNodeApi:
    """API access from `kubeconfig`, or in-cluster config when it is None; raises UsageError.

    The node is read once here: a wrong node name, missing RBAC or bad credentials are
    permanent, so they stop the agent with one line. A server that is not reachable yet is
    not: the agent serves the kubelet meanwhile and writes its node once the server answers.
    """
    try:
        api = KubeNodeApi(config.connect(config.from_kubeconfig(kubeconfig) if kubeconfig else config.in_cluster()),
                          node_name)
        api.node_labels()
    except PermanentError as exc:  # KubeConfigError included
        raise UsageError(str(exc)) from None
    except KubeError as exc:  # temporary: already logged by the retrier
        log.warning("starting without the API server; node writes are retried: %s", exc)
    return AgentNodeApi(api)


@contextlib.contextmanager
def _as_access_error() -> Iterator[None]:
    try:
        yield
    except KubeError as exc:
        raise KubeAccessError(str(exc)) from exc
