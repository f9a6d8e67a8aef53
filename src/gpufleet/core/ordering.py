"""Which pending pod goes first, and how pods form units (a single pod, or a gang).

The default order is kube-scheduler's: higher priority, then older, then uid (a total,
stable order). Gang members are pulled forward to their group's first member so a gang is
placed as one unit. Queue-aware orders (fair share, least attained service) pass their own
key and interleave queues in `core.queued`.
"""

from __future__ import annotations

import bisect
from typing import Callable, Sequence

from gpufleet.model import PodSpec


def by_priority(p: PodSpec) -> tuple[object, ...]:
    return (-p.priority, p.created_s, p.uid)


def by_arrival(p: PodSpec) -> tuple[object, ...]:
    return (p.created_s, p.uid)


def las_level(thresholds: Sequence[float], attained: float) -> int:
    """Tiresias' discretised attained service: 0 until the first threshold, then 1, ..."""
    return bisect.bisect_right(list(thresholds), attained)


def order(pending: Sequence[PodSpec], key: Callable[[PodSpec], tuple[object, ...]] = by_priority
          ) -> list[list[PodSpec]]:
    """Units to place, in order: a single pod, or all pending members of one pod group."""
    ranked = sorted(pending, key=key)
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
