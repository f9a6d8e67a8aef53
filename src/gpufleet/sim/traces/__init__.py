"""Readers for public cluster traces and the YAML scenario format."""
