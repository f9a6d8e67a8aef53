"""The scheduling cycle: ordering, placement, gangs, explanations."""
