"""gpufleet kube."""
