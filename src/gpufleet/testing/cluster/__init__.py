"""The real Kubernetes control plane, run locally for tests, benchmarks and `gpufleet dev-cluster`.

See `gpufleet.testing.cluster.cluster` and docs/control-plane.md.
"""

from gpufleet.testing.cluster.binaries import MissingBinaries, binary, bin_dir
from gpufleet.testing.cluster.client import ApiError, KubeClient
from gpufleet.testing.cluster.cluster import (DURATION_ANNOTATION, AuditRecord, Cluster, ClusterOptions,
                                              add_stop_listener)
from gpufleet.testing.cluster.process import ComponentFailed

__all__ = ["ApiError", "AuditRecord", "Cluster", "ClusterOptions", "ComponentFailed", "DURATION_ANNOTATION",
           "KubeClient", "MissingBinaries", "add_stop_listener", "bin_dir", "binary"]
