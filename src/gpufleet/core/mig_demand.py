"""The MIG demand of a cycle's unschedulable pods, as `mig_planner` requests: each slice a pod
asks for, with the GPUs the pod could use.

A pod may be unschedulable for reasons no MIG layout changes: its node selector or affinity,
taints, CPU or memory, its gang's topology, its GPU model. Repartitioning for it would destroy
idle instances other pods could use and carve one it never gets. So each request names the MIG
GPUs of the nodes where the pod passes every filter but the GPU fit (the pod with its GPU
request taken off, then its GPU models), with the usage as it is now. Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Iterable, Sequence

from gpufleet.core.mig_planner import MigRequest
from gpufleet.core.statement import Statement
from gpufleet.framework.plugins.gpu_fit import model_mask
from gpufleet.framework.profile import Profile
from gpufleet.model import NO_GPU, ClusterSnapshot, GpuKind, PodSpec, PodUid


def mig_requests(snapshot: ClusterSnapshot, specs: Sequence[PodSpec], unschedulable: Iterable[PodUid],
                 profile: Profile, now: float) -> list[MigRequest]:
    """The MIG slices the `unschedulable` pods among `specs` ask for, in the order of `specs` (the
    queue's), a pod asking n slices counting n times, each with the GPUs the pod could use."""
    waiting = set(unschedulable)
    pods = [s for s in specs if s.uid in waiting and s.gpu.kind is GpuKind.MIG and s.gpu.mig_profile]
    if not pods:
        return []
    statement = Statement(snapshot, profile, now, random.Random(0), explain=False)
    cluster = snapshot.cluster
    out: list[MigRequest] = []
    for pod in pods:
        nodes = statement.feasible_unmasked(replace(pod, gpu=NO_GPU))
        models = model_mask(statement.state, pod, statement.view)
        if models is not None:
            nodes = nodes[models[nodes]]
        gpus = frozenset(g.uuid for i in nodes.tolist() for g in cluster.nodes[i].gpus if g.mig_enabled)
        assert pod.gpu.mig_profile is not None
        out.extend(MigRequest(pod.gpu.mig_profile, gpus) for _ in range(pod.gpu.count))
    return out
