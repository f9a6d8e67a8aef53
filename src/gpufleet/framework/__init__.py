"""gpufleet framework."""
