"""`Placer`: places units of work (a pod, or a gang) through a `Statement` and records what
became of every pod: bound, nominated (after evictions), or unschedulable with a reason.

A gang's members are placed tentatively, each counting the members placed before it; if
fewer than minMember (counting members already running) fit, the statement rolls every
tentative placement back and each member says why. With a topology level (declared, or the
profile's default) the gang is first tried inside one domain at a time (`core.gang_topology`):
required, only there; preferred, level by level upward, then anywhere.
"""

from __future__ import annotations

from typing import Protocol

from gpufleet.core.gang_topology import GangPlan
from gpufleet.core.result import CycleResult, Eviction
from gpufleet.core.statement import Statement
from gpufleet.framework.plugins import topology
from gpufleet.framework.status import Code, Status
from gpufleet.model import Placement, PodSpec, PodUid


class Admission(Protocol):
    """What the layer above says about each pod of a unit as it is placed (`core.queued`: queue limits)."""

    def admit(self, pod: PodSpec) -> Status | None:
        """None to try `pod` (the admission may restrict the statement's nodes for it), else why not."""

    def placed(self, placement: Placement) -> None:
        """`placement` was made, tentatively for a gang member."""

    def removed(self, placement: Placement) -> None:
        """A tentative `placement` was rolled back."""

    def explain(self, pod: PodSpec, status: Status) -> Status:
        """`status` (why `pod` found no node) with the admission's own part in it added."""


class Placer:
    """One cycle's units, placed through `statement`, and their outcome."""

    def __init__(self, statement: Statement) -> None:
        self.statement = statement
        self.binds: list[Placement] = []
        self.nominated: list[Placement] = []
        """Placements that start once `evictions` are carried out."""
        self.evictions: list[Eviction] = []
        self.unschedulable: dict[PodUid, Status] = {}
        self._running_groups: dict[str, int] | None = None

    def result(self) -> CycleResult:
        return CycleResult(tuple(self.binds), tuple(self.evictions), dict(self.unschedulable), tuple(self.nominated))

    def running_members(self, group_key: str) -> int:
        """Members of a pod group running before this cycle (counted once per cycle)."""
        if self._running_groups is None:
            counts: dict[str, int] = {}
            for p in self.statement.snapshot.placements.values():
                if p.pod_group is not None:
                    counts[p.pod_group] = counts.get(p.pod_group, 0) + 1
            self._running_groups = counts
        return self._running_groups.get(group_key, 0)

    def members_needed(self, unit: list[PodSpec]) -> int:
        """How many of the unit's pods must be placed together: all, or what a gang lacks of minMember."""
        group = self.statement.snapshot.pod_groups.get(unit[0].pod_group or "")
        if unit[0].pod_group is None or group is None:
            return len(unit)
        return max(group.min_member - self.running_members(unit[0].pod_group), 0)

    def fail(self, unit: list[PodSpec], why: str, plugin: str) -> None:
        """Every pod of `unit` stays pending for `why`."""
        for pod in unit:
            self.unschedulable[pod.uid] = Status(Code.UNSCHEDULABLE, (why,), plugin)

    def run_unit(self, unit: list[PodSpec], admission: Admission | None = None) -> list[Placement]:
        if unit[0].pod_group is None:
            return self.run_single(unit[0], admission)
        return self.run_gang(unit, admission)

    def _try(self, pod: PodSpec, admission: Admission | None) -> Placement | Status:
        denied = admission.admit(pod) if admission is not None else None
        if denied is not None:
            return denied
        result = self.statement.place(pod)
        if admission is not None:
            if isinstance(result, Placement):
                admission.placed(result)
            else:
                result = admission.explain(pod, result)
        return result

    def run_single(self, pod: PodSpec, admission: Admission | None = None) -> list[Placement]:
        result = self._try(pod, admission)
        if isinstance(result, Placement):
            self.binds.append(result)
            return [result]
        self.unschedulable[pod.uid] = result
        return []

    def run_gang(self, members: list[PodSpec], admission: Admission | None = None) -> list[Placement]:
        """Each member is admitted and placed in turn, counting the members placed before it,
        so an elastic gang takes extra members only while its admission (queue limits) allows."""
        group_key = members[0].pod_group or ""
        group = self.statement.snapshot.pod_groups.get(group_key)
        running = self.running_members(group_key)
        # Without a PodGroup object the gang is the pending members themselves: all of them.
        need = group.min_member - running if group else len(members)
        failures: dict[PodUid, Status] = {}
        if group is not None and group.max_member is not None:
            room = max(group.max_member - running, 0)
            for pod in members[room:]:
                failures[pod.uid] = Status(Code.UNSCHEDULABLE, (
                    f"pod group {group_key} already has maxMember {group.max_member} pods running or placed",), "Gang")
            members = members[:room]
        plan = self.statement.gangs.plan(group_key, group)
        if plan.problem is not None:
            self.fail(members, plan.problem, topology.NAME)
            self.unschedulable.update(failures)
            return []
        if plan.ladder and members:
            done = self._in_one_domain(group_key, members, need, plan, admission)
            if not isinstance(done, str):
                self.binds.extend(done[0])
                self.unschedulable.update({**failures, **done[1]})
                return done[0]
            if plan.required is not None:
                self.fail(members, done, topology.NAME)
                self.unschedulable.update(failures)
                return []
        mark = self.statement.checkpoint()
        placed, tried = self._attempt(members, admission)
        failures.update(tried)
        if len(placed) >= need:
            self.binds.extend(placed)
            self.unschedulable.update(failures)
            return placed
        self._undo(mark, admission)
        why = (f"pod group {group_key}: only {len(placed) + running} of minMember "
               f"{need + running} pods could be placed together")
        self.unschedulable.update(failures)  # members beyond maxMember keep their own reason
        for pod in members:
            inner = failures.get(pod.uid)
            reasons = (why,) + (inner.reasons if inner else ())
            self.unschedulable[pod.uid] = Status(Code.UNSCHEDULABLE, reasons, "Gang")
        return []

    def _attempt(self, members: list[PodSpec], admission: Admission | None
                 ) -> tuple[list[Placement], dict[PodUid, Status]]:
        placed: list[Placement] = []
        failures: dict[PodUid, Status] = {}
        for pod in members:
            result = self._try(pod, admission)
            if isinstance(result, Placement):
                placed.append(result)
            else:
                failures[pod.uid] = result
        return placed, failures

    def _undo(self, mark: int, admission: Admission | None) -> None:
        for change in self.statement.rollback(mark):
            if admission is not None:
                admission.removed(change.placement)

    def _in_one_domain(self, group_key: str, members: list[PodSpec], need: int, plan: GangPlan,
                       admission: Admission | None) -> tuple[list[Placement], dict[PodUid, Status]] | str:
        """The gang placed inside one domain of the plan's levels, lowest first, with the
        members that did not fit; else why not (naming the levels tried). A required level
        takes a domain that holds minMember (extra members that do not fit there wait); a
        preferred one only a domain that holds every member, so an elastic gang is not cut
        down to what one domain holds."""
        statement, gangs = self.statement, self.statement.gangs
        fits = statement.feasible_unmasked(members[0])
        levels = [statement.profile.topology.levels[k] for k in plan.ladder]
        want = max(need, 1) if plan.required is not None else max(need, len(members))
        for level in plan.ladder:
            for domain in gangs.candidates(group_key, level, members, want, statement.view.usage, fits):
                statement.confine(gangs.mask(level, domain), ("confined", level, domain))
                mark = statement.checkpoint()
                placed, failures = self._attempt(members, admission)
                statement.confine(None)
                if len(placed) >= want:
                    return placed, failures
                self._undo(mark, admission)
        running = self.running_members(group_key)
        return (f"pod group {group_key}: no domain of {' or '.join(levels)} has room for its "
                f"{want + running} pods together (topology level {levels[0]})")
