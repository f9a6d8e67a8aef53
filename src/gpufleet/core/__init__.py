"""gpufleet core."""
