"""Allocating a pod's DRA ResourceClaims inside a cycle.

`ClaimAllocator` answers three questions for the statement (`core.statement`):
- `check(pod)`: can the pod's claims be allocated at all (claims exist, classes exist,
  selectors compile)? If not, the pod is unschedulable with a reason naming the claim, the
  request and the problem;
- `node_mask(pod, usage)`: on which nodes could each request find enough free devices that
  match its class and selectors (a claim already allocated pins its node);
- `allocate(pod, node, usage)`: which devices, on the chosen node: requests in order, each
  request's alternatives (`firstAvailable`) in order, `matchAttribute` / `distinctAttribute`
  constraints, counters and consumable capacity never overcommitted (with what this pod
  takes for its earlier requests counted), backtracking over the groups a constraint allows.

Devices are chosen best-fit, not first-fit in name order: a multi-allocation device with the
least room left that still fits; among partitionable devices (counters, e.g. MIG placements)
those whose counter sets are already in use, so placements pack onto GPUs already carved
and whole GPUs stay whole; ties to the lowest name. Nodes are scored the same way
(`free_after`): the node left with the fewest free matching devices wins.

Selectors: each expression is compiled once; it is evaluated once per device *shape*
(`DeviceTable.shapes`: the devices' attributes without the per-device identity ones), or per
distinct device when it names an identity attribute or iterates a map. Following Kubernetes,
class selectors go first and a device's request selectors are evaluated only if they pass;
an evaluation error on any device aborts the allocation with the error as the reason.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.model import (GPU_MILLI, ClusterSnapshot, GpuKind, GpuRequest, NodeName, PodSpec, Usage, gpu_fraction,
                            whole_gpus)
from gpufleet.model.cel import CelError, Selector, compile_selector
from gpufleet.model.dra import AllocatedDevice, ClaimAllocation, Frozen, Request, ResourceClaim, Subrequest, qualify
from gpufleet.model.dra_table import DeviceTable, milli

_SHARE_IDS = uuid.UUID("0b3f7c52-5d8e-4f0a-9c61-6f1d2e8a4b37")
"""The namespace of the share IDs this allocator derives (uuid5)."""

Bool = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
SHARE = "share"
"""The capacity that offers a share of a GPU (a quantity: "1" is all of it, "500m" half)."""
MIB = 2**20
RECOUNT_ALL = 64
"""From this many changed nodes on, free devices are recounted over all nodes at once."""
MAX_OPTIONS = 8
"""Most device groups tried per request under a matchAttribute constraint before giving up."""
_ITERATING = re.compile(r"\b(size|exists|exists_one|all|map|filter)\b|\bin\b")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


_Picks = list[tuple[int, dict[str, Decimal]]]
"""Devices chosen for a request, each with the capacity it consumes."""


@dataclass(slots=True)
class _Tentative:
    """What this pod's allocation has taken so far (not yet in `Usage`)."""

    taken: set[int]
    counters: dict[int, int]
    caps: dict[int, int]


class ClaimAllocator:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.table: DeviceTable = snapshot.cluster.devices
        self.claims: Mapping[str, ResourceClaim] = snapshot.dra.claims
        self.classes = snapshot.dra.classes
        self.names = snapshot.cluster.names
        self.node_index = snapshot.cluster.index
        self.n_nodes = snapshot.cluster.n_nodes
        self._count_cache: dict[int, tuple[Bool, I64, I64, I64]] = {}
        """Per matching-device mask (by identity; the mask is kept in the entry): total and free
        matching devices per node, and the node stamps the free counts were taken at."""
        self.allocated: dict[str, ClaimAllocation] = {}
        """Claims allocated in this cycle (tentatively, for gang members) by the pods placed so far."""

    # -- bookkeeping the statement does ----------------------------------------------------
    def placed(self, allocations: Sequence[ClaimAllocation], sign: int) -> None:
        for a in allocations:
            if sign > 0:
                self.allocated[a.claim] = a
            else:
                self.allocated.pop(a.claim, None)

    def key(self, pod: PodSpec) -> tuple[object, ...]:
        """What makes two pods' claims alike for the failure cache: the same requests, unallocated."""
        out: list[object] = []
        for name in pod.claims:
            claim = self.claims.get(name)
            if claim is None or claim.allocation is not None or name in self.allocated:
                out.append(name)
            else:
                out.append(claim.signature())
        return tuple(out)

    def _pending(self, pod: PodSpec) -> Iterator[ResourceClaim]:
        """The pod's claims that still need an allocation."""
        for name in pod.claims:
            claim = self.claims[name]
            if claim.allocation is None and name not in self.allocated:
                yield claim

    # -- 1. can it be allocated at all -----------------------------------------------------
    def check(self, pod: PodSpec) -> str | None:
        for name in pod.claims:
            claim = self.claims.get(name)
            if claim is None:
                return f"resourceclaim {name} not found (a template's claim may not be created yet)"
            if claim.deleting:
                return f"resourceclaim {name} is being deleted"
            if claim.allocation is None and name not in self.allocated:
                for request in claim.requests:
                    for sub in request.alternatives:
                        found = self.matching(claim, sub)
                        if isinstance(found, str):
                            return found
        return None

    def matching(self, claim: ResourceClaim, sub: Subrequest) -> Bool | str:
        """Devices `sub` may take by class and selectors (ignoring what is in use), or why none can."""
        where = f"resourceclaim {claim.key}: request {sub.name}"
        cls = self.classes.get(sub.device_class)
        if cls is None:
            return f"{where}: device class {sub.device_class} not found"
        memo_key = ("devices", cls, sub.selectors)
        found = self.table.memo.get(memo_key)
        if found is None:
            found = self._evaluate([(e, f"DeviceClass {cls.name}: spec.selectors[{k}].cel.expression")
                                    for k, e in enumerate(cls.selectors)]
                                   + [(e, f"selectors[{k}].cel.expression") for k, e in enumerate(sub.selectors)])
            self.table.memo[memo_key] = found
        if isinstance(found, str):
            return f"{where}: {found}"
        return found  # type: ignore[return-value]

    def _evaluate(self, expressions: list[tuple[str, str]]) -> Bool | str:
        t = self.table
        mask = np.ones(t.n_devices, dtype=np.bool_)
        for expression, where in expressions:
            selector = self._compile(expression, where)
            if isinstance(selector, str):
                return selector
            full = bool(_ITERATING.search(expression)) or bool(set(_TOKEN.findall(expression)) & t.identity)
            facts, of = (t.facts, t.facts_of) if full else (t.shapes, t.shape_of)
            wanted = np.unique(of[mask])
            result = np.zeros(len(facts), dtype=np.bool_)
            for f in wanted.tolist():
                try:
                    result[f] = selector.matches(facts[f])
                except CelError as exc:
                    return f"CEL evaluation failed: {exc}"
            mask &= result[of]
        return mask

    def _compile(self, expression: str, where: str) -> Selector | str:
        key = ("cel", expression)
        found = self.table.memo.get(key)
        if found is None:
            try:
                found = compile_selector(expression, where)
            except CelError as exc:
                found = f"invalid CEL: {exc}"
            self.table.memo[key] = found
        return found  # type: ignore[return-value]

    # -- 2. which nodes --------------------------------------------------------------------
    def node_mask(self, pod: PodSpec, usage: Usage) -> Bool:
        if self.check(pod) is not None:  # no node: `check` says why (preemption asks here without it)
            return np.zeros(self.n_nodes, dtype=np.bool_)
        mask = np.ones(self.n_nodes, dtype=np.bool_)
        for name in pod.claims:
            node = self._pinned(name)
            if node is not None:
                pinned = np.zeros(self.n_nodes, dtype=np.bool_)
                if node >= 0:
                    pinned[node] = True
                mask &= pinned
        for claim in self._pending(pod):
            for request in claim.requests:
                mask &= self._request_nodes(claim, request, usage)
        return mask

    def _pinned(self, name: str) -> int | None:
        """The node index an allocated claim is pinned to; -1 for a node not in the cluster; None: not pinned."""
        a = self.allocated.get(name)
        node = a.node if a is not None else (self.claims[name].allocated_node if self.claims[name].allocation is not None
                                             else None)
        if node is None:
            return None
        return self.node_index.get(NodeName(node), -1)

    def _request_nodes(self, claim: ResourceClaim, request: Request, usage: Usage) -> Bool:
        ok = np.zeros(self.n_nodes, dtype=np.bool_)
        for sub in request.alternatives:
            ok |= self._sub_nodes(claim, sub, usage)
        return ok

    def _sub_nodes(self, claim: ResourceClaim, sub: Subrequest, usage: Usage) -> Bool:
        """Nodes with enough free devices for `sub` (counted alone, before constraints)."""
        matching = self.matching(claim, sub)
        if isinstance(matching, str):
            return np.zeros(self.n_nodes, dtype=np.bool_)
        free, total = self._counts(matching, usage)
        if sub.mode == "All":
            return np.asarray((total > 0) & (free == total))
        return np.asarray(free >= sub.count)

    def _counts(self, matching: Bool, usage: Usage) -> tuple[I64, I64]:
        """Free and matching devices per node (devices reachable from every node count on each).

        Kept per `matching` array across the cycle and brought up to date only on the nodes whose
        `Usage.version` stamp changed since (a stamp names one node state, in any copy of the usage)."""
        t = self.table
        cached = self._count_cache.get(id(matching))
        if cached is None or cached[0] is not matching:
            local = t.node >= 0
            total = np.bincount(t.node[matching & local], minlength=self.n_nodes).astype(np.int64)
            free = np.bincount(t.node[matching & usage.dev_free & local], minlength=self.n_nodes).astype(np.int64)
            cached = self._count_cache[id(matching)] = (matching, total, free, usage.version.copy())
        _, total, free, seen = cached
        changed = np.nonzero(usage.version != seen)[0]
        if len(changed) > RECOUNT_ALL:
            local = t.node >= 0
            free[:] = np.bincount(t.node[matching & usage.dev_free & local], minlength=self.n_nodes)
            seen[:] = usage.version
        else:
            dev_free = usage.dev_free
            for i in changed.tolist():
                lo, hi = int(t.start[i]), int(t.end[i])
                free[i] = int(np.count_nonzero(matching[lo:hi] & dev_free[lo:hi]))
                seen[i] = usage.version[i]
        if len(t.anywhere):
            return (free + int((matching & usage.dev_free)[t.anywhere].sum()),
                    total + int(matching[t.anywhere].sum()))
        return free.copy(), total

    def alternative_rank(self, pod: PodSpec, nodes: npt.NDArray[np.int64], usage: Usage) -> I64:
        """Per node in `nodes`: the sum over the pod's requests of the index of the first alternative
        (`firstAvailable` entry) that could be satisfied there; lower is better, as in kube-scheduler."""
        out = np.zeros(len(nodes), dtype=np.int64)
        for claim in self._pending(pod):
            for request in claim.requests:
                if len(request.alternatives) < 2:
                    continue
                rank = np.full(len(nodes), len(request.alternatives), dtype=np.int64)
                for j, sub in reversed(list(enumerate(request.alternatives))):
                    ok = self._sub_nodes(claim, sub, usage)[nodes]
                    rank[ok] = j
                out += rank
        return out

    def as_gpus(self, pod: PodSpec) -> GpuRequest | None:
        """The GPU request the pod's pending claims amount to, when they are nothing more. Such a
        pod is placed as an extended-resource pod asking that (the same filters, scorers and device
        choice), and its claims get the devices of the GPUs chosen (`devices_for`).

        - Whole GPUs: every request a single ExactCount alternative without capacity requests, no
          constraints, and every device it matches linked to a GPU, untainted, without counters,
          and either exclusive or taking all of its capacity when shared.
        - A share of one GPU: one request for one device with a capacity request for `share` (a
          quantity below 1: "500m" is half the GPU) and optionally `memory`, every device it
          matches shared (`allowMultipleAllocations`), linked to a GPU and offering `share`.
        """
        if pod.gpu.kind is not GpuKind.NONE:
            return None
        pending = list(self._pending(pod))
        subs: list[tuple[ResourceClaim, Subrequest]] = []
        for claim in pending:
            if claim.constraints:
                return None
            for request in claim.requests:
                if len(request.alternatives) != 1:
                    return None
                sub = request.alternatives[0]
                if sub.mode != "ExactCount" or sub.admin_access:
                    return None
                subs.append((claim, sub))
        if not subs:
            return None
        if len(subs) == 1 and subs[0][1].capacity:
            return self._as_share(*subs[0])
        total = 0
        for claim, sub in subs:
            matching = self.matching(claim, sub)
            if sub.capacity or isinstance(matching, str) or not self._linked(matching)[0]:
                return None
            total += sub.count
        return whole_gpus(total)

    def _as_share(self, claim: ResourceClaim, sub: Subrequest) -> GpuRequest | None:
        matching = self.matching(claim, sub)
        if sub.count != 1 or isinstance(matching, str) or not self._linked(matching)[1]:
            return None
        asked = {name.rpartition("/")[2]: amount for name, amount in sub.capacity.items()}
        share = asked.pop(SHARE, None)
        memory = asked.pop("memory", Decimal(0))
        if asked or share is None or not 0 < share < 1 or share * GPU_MILLI != int(share * GPU_MILLI):
            return None
        return gpu_fraction(int(share * GPU_MILLI), int((memory / MIB).to_integral_value(ROUND_CEILING)))

    def _linked(self, matching: Bool) -> tuple[bool, bool]:
        """Whether the devices of `matching` (some, all linked to GPUs, untainted, without counters)
        can be taken as whole GPUs (exclusive, or shared and a request without amounts takes all
        of them: `_taken_whole`), and as shares (shared, offering `share`). Kept with the table
        (the masks are, so their ids stay theirs)."""
        key = ("linked", id(matching))
        cached = self.table.memo.get(key)
        if not isinstance(cached, tuple) or cached[0] is not matching:
            cached = self.table.memo[key] = (matching, self._kind(np.flatnonzero(matching).tolist()))
        return cached[1]  # type: ignore[no-any-return]

    def _kind(self, rows: list[int]) -> tuple[bool, bool]:
        t = self.table
        if not rows or any(t.gpu[k] < 0 or t.tainted[k] or t.consumes[k] for k in rows):
            return False, False
        whole = all(not t.multi[k] or self._taken_whole(k) for k in rows)
        share = all(t.multi[k] and any(name.rpartition("/")[2] == SHARE for name in t.cap_rows[k]) for k in rows)
        return whole, share

    def _taken_whole(self, k: int) -> bool:
        """Whether a request naming no amounts takes all of shared device k: all of its `share`, or
        all of every capacity when it offers no share."""
        caps = self.table.cap_rows[k]
        shares = [cap for name, (_, cap) in caps.items() if name.rpartition("/")[2] == SHARE]
        return all(cap.amount(None) == cap.value for cap in (shares or [c for _, c in caps.values()]))

    def devices_for(self, pod: PodSpec, node: int, gpus: Sequence[int], usage: Usage
                    ) -> tuple[ClaimAllocation, ...] | None:
        """The pod's pending claims given the devices of `gpus` on `node`, requests in order
        (None if some GPU's device does not match, or fit, the request it would go to)."""
        t = self.table
        by_gpu = {int(t.gpu[k]): k for k in t.node_rows(node) if t.gpu[k] >= 0}
        left = list(gpus)
        out: list[ClaimAllocation] = []
        tentative = _Tentative(set(), {}, {})
        for claim in self._pending(pod):
            results: list[AllocatedDevice] = []
            for request in claim.requests:
                sub = request.alternatives[0]
                matching = self.matching(claim, sub)
                if isinstance(matching, str):
                    return None
                take, left = left[:sub.count], left[sub.count:]
                for j in take:
                    k = by_gpu.get(j)
                    consumed = self._fits(k, sub, usage, tentative) if k is not None and matching[k] else None
                    if k is None or consumed is None:
                        return None
                    self._take([(k, consumed)], tentative, sign=1)
                    results.append(self._result(claim, sub.name, k, consumed))
            out.append(ClaimAllocation(claim.key, tuple(results), self.names[node]))
        return tuple(out)

    def free_after(self, pod: PodSpec, nodes: npt.NDArray[np.int64], usage: Usage) -> I64:
        """Per node in `nodes`: free devices the pod's first-choice requests match (fewer is a tighter fit)."""
        out = np.zeros(len(nodes), dtype=np.int64)
        for claim in self._pending(pod):
            for request in claim.requests:
                matching = self.matching(claim, request.alternatives[0])
                if not isinstance(matching, str):
                    out += self._counts(matching, usage)[0][nodes]
        return out

    def explain(self, pod: PodSpec, usage: Usage) -> str | None:
        """Why no node can take the pod's claims, naming the claim and request; None if some node could."""
        for name in pod.claims:
            node = self._pinned(name)
            if node == -1:
                return f"resourceclaim {name} is allocated on a node that is not in the cluster"
        for claim in self._pending(pod):
            for request in claim.requests:
                if not self._request_nodes(claim, request, usage).any():
                    parts = []
                    for sub in request.alternatives:
                        matching = self.matching(claim, sub)
                        if isinstance(matching, str):
                            parts.append(matching)
                            continue
                        free, _ = self._counts(matching, usage)
                        want = "all matching devices of one node" if sub.mode == "All" else f"{sub.count} device(s)"
                        parts.append(f"{want} of class {sub.device_class}"
                                     + (" matching its selectors" if sub.selectors else "")
                                     + f" (at most {int(free.max(initial=0))} free on a node; "
                                     f"{int(matching.sum())} match in the cluster)")
                    return f"resourceclaim {claim.key}: request {request.name}: no node has " + "; or ".join(parts)
        return None

    # -- 3. which devices ------------------------------------------------------------------
    def allocate(self, pod: PodSpec, node: int, usage: Usage, avoid: Sequence[int] = ()
                 ) -> tuple[ClaimAllocation, ...] | str:
        """The devices on node index `node` for each of the pod's unallocated claims, or why not;
        no device linked to a GPU in `avoid` (the pod's own extended-resource GPUs)."""
        t = self.table
        tentative = _Tentative({k for k in t.node_rows(node)
                                if int(t.gpu[k]) in avoid or int(t.parent[k]) in avoid}, {}, {})
        out: list[ClaimAllocation] = []
        for claim in self._pending(pod):
            chosen: dict[str, tuple[str, _Picks]] = {}
            why = self._solve(claim, 0, node, usage, tentative, chosen, {})
            if why is not None:
                return why
            results: list[AllocatedDevice] = []
            anywhere_only = True
            for request in claim.requests:
                sub_name, picks = chosen[request.name]
                for k, consumed in picks:
                    results.append(self._result(claim, sub_name, k, consumed))
                    anywhere_only = anywhere_only and self.table.node[k] < 0
            out.append(ClaimAllocation(claim.key, tuple(results), None if anywhere_only else self.names[node]))
        return tuple(out)

    def _solve(self, claim: ResourceClaim, r: int, node: int, usage: Usage, tentative: _Tentative,
               chosen: dict[str, tuple[str, _Picks]], fixed: dict[int, object]) -> str | None:
        """Allocate requests r.. of `claim` (backtracking); None when done, else why not."""
        if r == len(claim.requests):
            return None
        request = claim.requests[r]
        why = f"resourceclaim {claim.key}: request {request.name}: no fitting devices on node {self.names[node]}"
        for sub in request.alternatives:
            matching = self.matching(claim, sub)
            if isinstance(matching, str):
                why = matching
                continue
            for option in self._options(claim, request, sub, matching, node, usage, tentative, fixed):
                picks, values = option
                self._take(picks, tentative, sign=1)
                chosen[request.name] = (sub.name, picks)
                fixed_now = {**fixed, **values}
                inner = self._solve(claim, r + 1, node, usage, tentative, chosen, fixed_now)
                if inner is None:
                    return None
                self._take(picks, tentative, sign=-1)
                del chosen[request.name]
                why = inner
        return why

    def _options(self, claim: ResourceClaim, request: Request, sub: Subrequest, matching: Bool, node: int,
                 usage: Usage, tentative: _Tentative, fixed: dict[int, object]
                 ) -> Iterator[tuple[_Picks, dict[int, object]]]:
        """Device sets for `sub` on the node, best first, with the constraint values they fix."""
        t = self.table
        rows = [k for k in (*t.node_rows(node), *t.anywhere.tolist()) if matching[k]]
        fits = [(k, c) for k in rows if (c := self._fits(k, sub, usage, tentative)) is not None]
        if sub.mode == "All":
            if not rows or len(fits) < len(rows):
                return
        ranked = sorted(fits, key=lambda kc: self._rank(kc[0], kc[1], usage, tentative))
        mine = [(j, c) for j, c in enumerate(claim.constraints)
                if not c.requests or request.name in c.requests or any(n.split("/")[0] == request.name
                                                                        for n in c.requests)]
        need = len(rows) if sub.mode == "All" else sub.count
        matches = [(j, c.match_attribute) for j, c in mine if c.match_attribute]
        distinct = [(j, c.distinct_attribute) for j, c in mine if c.distinct_attribute]
        if not matches:
            pick = self._pick_distinct(ranked, need, distinct, fixed)
            if pick is not None:
                yield pick
            return
        # Group by the values of every matchAttribute constraint; a value fixed by an earlier request must hold.
        groups: dict[tuple[object, ...], _Picks] = {}
        for k, c in ranked:
            key = tuple(self._attr(k, name) for _, name in matches)
            if any(v is None for v in key):
                continue
            if any(j in fixed and fixed[j] != v for (j, _), v in zip(matches, key)):
                continue
            groups.setdefault(key, []).append((k, c))
        viable = sorted((g for g in groups.items() if len(g[1]) >= need), key=lambda g: (len(g[1]), g[1][0][0]))
        for key, members in viable[:MAX_OPTIONS]:
            pick = self._pick_distinct(members, need, distinct, fixed)
            if pick is not None:
                devices, values = pick
                values.update({j: v for (j, _), v in zip(matches, key)})
                yield devices, values

    def _pick_distinct(self, ranked: _Picks, need: int, distinct: list[tuple[int, str]], fixed: dict[int, object]
                       ) -> tuple[_Picks, dict[int, object]] | None:
        """The first `need` of `ranked` whose distinctAttribute values differ from each other and
        from those earlier requests took; with the values now taken."""
        picks: _Picks = []
        used: dict[int, set[object]] = {j: set(v) if isinstance(v := fixed.get(j), frozenset) else set()
                                        for j, _ in distinct}
        for k, c in ranked:
            if len(picks) == need:
                break
            values = [(j, self._attr(k, name)) for j, name in distinct]
            if any(v is None or v in used[j] for j, v in values):
                continue
            for j, v in values:
                used[j].add(v)
            picks.append((k, c))
        if len(picks) < need:
            return None
        return picks, {j: frozenset(vs) for j, vs in used.items()}

    def _attr(self, k: int, qualified: str) -> object:
        return self.table.devices[k].attributes.get(qualified)

    def _fits(self, k: int, sub: Subrequest, usage: Usage, tentative: _Tentative) -> dict[str, Decimal] | None:
        """What device k would give `sub` (consumed capacity), or None if it cannot now."""
        t = self.table
        if not usage.dev_free[k] or k in tentative.taken:
            return None
        if t.tainted[k] and not all(any(tol.tolerates(taint) for tol in sub.tolerations) for taint in t.taints[k]):
            return None
        device = t.devices[k]
        asked = {qualify(name, t.refs[k].driver): amount for name, amount in sub.capacity.items()}
        if not t.multi[k]:
            for name, amount in asked.items():
                cap = device.capacity.get(name)
                if cap is None or cap.value < amount:
                    return None
            for row, want in t.consumes[k]:
                if usage.counter_used[row] + tentative.counters.get(row, 0) + want > t.counter_total[row]:
                    return None
            return {}
        consumed: dict[str, Decimal] = {}
        rows = t.cap_rows[k]
        if any(name not in rows for name in asked):
            return None
        for name, (row, cap) in rows.items():
            take = cap.amount(asked.get(name))
            if take is None:
                return None
            if usage.cap_used[row] + tentative.caps.get(row, 0) + milli(take) > t.cap_total[row]:
                return None
            consumed[name] = take
        return consumed

    def _rank(self, k: int, consumed: dict[str, Decimal], usage: Usage, tentative: _Tentative) -> tuple[object, ...]:
        t = self.table
        if t.multi[k]:
            left = sum(int(t.cap_total[row]) - int(usage.cap_used[row]) - milli(consumed.get(name, Decimal(0)))
                       for name, (row, _) in t.cap_rows[k].items())
            return (0, left, k)
        if t.consumes[k]:
            in_use = sum(1 for s in t.device_sets[k]
                         if any(usage.counter_used[c] + tentative.counters.get(c, 0) > 0 for c in t.set_counters[s]))
            return (0, -in_use, 0, k)
        return (0, 0, 0, k)

    def _result(self, claim: ResourceClaim, request: str, k: int, consumed: dict[str, Decimal]) -> AllocatedDevice:
        """Device row `k` as an allocation result. A device several claims may hold gets a share ID,
        as kube-scheduler gives each share (the API tells two shares of one device apart by it);
        derived from the claim, request and device, so writing the same decision again gives the same ID."""
        ref = self.table.refs[k]
        share = (str(uuid.uuid5(_SHARE_IDS, f"{claim.uid}/{request}/{ref.driver}/{ref.pool}/{ref.device}"))
                 if self.table.multi[k] else None)
        return AllocatedDevice(request, ref.driver, ref.pool, ref.device, Frozen(consumed), share)

    def _take(self, picks: _Picks, tentative: _Tentative, sign: int) -> None:
        t = self.table
        for k, consumed in picks:
            if t.multi[k]:
                for name, amount in consumed.items():
                    row = t.cap_rows[k][name][0]
                    tentative.caps[row] = tentative.caps.get(row, 0) + sign * milli(amount)
            else:
                if sign > 0:
                    tentative.taken.add(k)
                else:
                    tentative.taken.discard(k)
                for row, used in t.consumes[k]:
                    tentative.counters[row] = tentative.counters.get(row, 0) + sign * used

