"""gpufleet autoscale."""
