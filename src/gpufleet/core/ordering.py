"""Which pending pod goes first: higher priority, then older, then uid (a total, stable order).

Gang members are pulled forward to their group's first member so a gang is placed as one
unit. Queue fair share (a later layer) plugs in here as a sort key.
"""

from __future__ import annotations

from typing import Sequence

from gpufleet.model import PodSpec


def order(pending: Sequence[PodSpec]) -> list[list[PodSpec]]:
    """Units to place, in order: a single pod, or all pending members of one pod group."""
    ranked = sorted(pending, key=lambda p: (-p.priority, p.created_s, p.uid))
    units: list[list[PodSpec]] = []
    groups: dict[str, list[PodSpec]] = {}
    for pod in ranked:
        if pod.pod_group is None:
            units.append([pod])
        elif pod.pod_group in groups:
            groups[pod.pod_group].append(pod)
        else:
            groups[pod.pod_group] = [pod]
            units.append(groups[pod.pod_group])
    return units
