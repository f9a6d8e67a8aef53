"""Public builders and fakes for tests and users."""

from gpufleet.testing.builders import NodeBuilder, PodBuilder, make_node, make_pod

__all__ = ["NodeBuilder", "PodBuilder", "make_node", "make_pod"]
