"""gpufleet web."""
