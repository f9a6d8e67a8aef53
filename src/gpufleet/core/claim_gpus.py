"""What a pending pod's DRA claims ask of GPUs, as the queue layer counts it (`quota.PodGpus`).

A pod whose claims amount to whole GPUs or a share of one (`ClaimAllocator.as_gpus`) is placed
as a pod asking those GPUs, so its queue counts them exactly so: the same fair share, the
same limits, the same reclaim as the extended-resource pod. Once it runs, its placement lists
those GPUs (`Statement.place_on(..., claims_as_gpus=True)`), so demand and usage agree.

Other claims (constraints, `firstAvailable`, MIG placements, shares asking only memory, ...)
count what they will hold at least, as `quota.device_gpu_milli` counts an allocated device:
per request, the cheapest of its alternatives; per alternative, `count` times the cheapest
device it matches (a linked exclusive device: a GPU; a linked shared device: the share its
capacity request stands for under the device's request policy; a MIG device: its slice's
compute share; any other device: nothing). A request with `allocationMode: All` counts
nothing before it runs (how many devices it gets depends on the node). Once running, the
claims' devices count as allocated, which may be more than asked before (a device with more
memory than the cheapest, a later alternative).
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from gpufleet.core.claims import ClaimAllocator
from gpufleet.core.quota import device_gpu_milli, gpu_milli
from gpufleet.model import GpuRequest, PodSpec, PodUid
from gpufleet.model.dra import ResourceClaim, Subrequest, qualify


class ClaimGpus:
    """`quota.PodGpus` for a cycle whose pods may ask through claims; answers once per pod."""

    def __init__(self, allocator: ClaimAllocator) -> None:
        self.allocator = allocator
        self._asked: dict[PodUid, tuple[GpuRequest, int]] = {}
        self._per_device: dict[tuple[int, tuple[tuple[str, Decimal], ...]], tuple[object, int]] = {}

    def request(self, pod: PodSpec) -> GpuRequest:
        return self._ask(pod)[0]

    def milli(self, pod: PodSpec) -> int:
        return self._ask(pod)[1]

    def _ask(self, pod: PodSpec) -> tuple[GpuRequest, int]:
        if not pod.claims:
            return pod.gpu, gpu_milli(pod.gpu)
        found = self._asked.get(pod.uid)
        if found is None:
            found = self._asked[pod.uid] = self._count(pod)
        return found

    def _count(self, pod: PodSpec) -> tuple[GpuRequest, int]:
        a = self.allocator
        if a.check(pod) is not None:
            return pod.gpu, gpu_milli(pod.gpu)  # a pod whose claims cannot be allocated asks nothing through them
        as_gpus = a.as_gpus(pod)
        if as_gpus is not None:
            return as_gpus, gpu_milli(as_gpus)
        total = gpu_milli(pod.gpu)
        for name in pod.claims:
            claim = a.claims[name]
            if claim.allocation is not None or name in a.allocated:
                continue  # allocated already: its devices count where they are held
            for request in claim.requests:
                total += min(self._least(claim, sub) for sub in request.alternatives)
        return pod.gpu, total

    def _least(self, claim: ResourceClaim, sub: Subrequest) -> int:
        """GPU-milli `sub` holds at least once allocated."""
        if sub.mode == "All":
            return 0
        matching = self.allocator.matching(claim, sub)
        if isinstance(matching, str) or not matching.any():
            return 0
        key = (id(matching), tuple(sorted(sub.capacity.items())))
        cached = self._per_device.get(key)
        if cached is None or cached[0] is not matching:
            cached = self._per_device[key] = (matching, self._cheapest(matching, sub))
        return sub.count * cached[1]

    def _cheapest(self, matching: np.ndarray, sub: Subrequest) -> int:
        t = self.allocator.table
        best: int | None = None
        seen: set[tuple[object, ...]] = set()
        for k in np.flatnonzero(matching).tolist():
            device = t.devices[k]
            alike = (bool(t.gpu[k] >= 0), bool(t.multi[k]), tuple(sorted(device.capacity.items())),
                     device.attributes.get(f"{t.refs[k].driver}/profile"))
            if alike in seen:  # counts as a device already seen
                continue
            seen.add(alike)
            consumed: dict[str, Decimal] = {}
            if t.multi[k]:
                asked = {qualify(name, t.refs[k].driver): amount for name, amount in sub.capacity.items()}
                for name, (_, cap) in t.cap_rows[k].items():
                    take = cap.amount(asked.get(name))
                    if take is not None:
                        consumed[name] = take
            milli = device_gpu_milli(t, k, consumed)
            best = milli if best is None else min(best, milli)
            if best == 0:
                break
        return best or 0
