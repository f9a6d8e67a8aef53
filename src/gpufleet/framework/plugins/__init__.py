"""gpufleet framework/plugins."""
