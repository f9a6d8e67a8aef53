"""A local Kubernetes API server for tests: the real REST and watch protocol, in-process.

Test infrastructure, not a production server (see docs/apiserver.md): it serves the
resources gpufleet uses (pods with binding/status/eviction, nodes, namespaces, events,
leases, PodDisruptionBudgets, CRDs and their custom resources) with list/watch,
resourceVersions, selectors, patches and optimistic concurrency, simulated kubelets, and
enough discovery and OpenAPI for the real `kubectl`.

    from gpufleet.testing.apiserver import ApiServer, gpu_nodes
    with ApiServer() as srv:
        for node in gpu_nodes(8, seed=1):
            srv.create(node)
"""

from gpufleet.testing.apiserver.errors import ApiError
from gpufleet.testing.apiserver.injection import RequestRecord
from gpufleet.testing.apiserver.kubelet import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION
from gpufleet.testing.gpu_nodes import gpu_nodes
from gpufleet.testing.apiserver.server import ApiServer

__all__ = ["ApiError", "ApiServer", "DURATION_ANNOTATION", "EXIT_CODE_ANNOTATION", "RequestRecord", "gpu_nodes"]
