"""gpufleet cli."""
