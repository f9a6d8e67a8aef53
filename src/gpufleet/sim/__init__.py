"""gpufleet sim."""
