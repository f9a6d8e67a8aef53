"""gpufleet: GPU-aware scheduling for Kubernetes around one pure scheduling core."""

__version__ = "0.1.0"
__all__ = ["__version__"]
