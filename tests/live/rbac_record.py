"""What the scheduler and the agent asked of the API server, on every control plane a test
session started: the calls as RBAC judges them, per component, with the answers.

A call is (scope, apiGroup, resource[/subresource], verb), read from kube-apiserver's audit log
(`Cluster.iter_audit`) when each cluster stops (`add_stop_listener`, registered by
tests/live/conftest.py). The scope is the request's namespace, or "cluster" for a cluster-scoped
resource or a request across all namespaces; a ClusterRoleBinding grants a namespaced call in
every namespace, a RoleBinding only in its own (`grant_of`). Requests to non-resource URLs (the
discovery documents under /api and /apis) have no resource: they are kept apart, by path, and
are granted to every authenticated user by Kubernetes' default ClusterRole system:discovery,
not by gpufleet's RBAC.

Every answer is kept, and each 403 with the test that was running when its cluster stopped, so
that a refusal can be told apart from what a test provoked on purpose
(tests/live/test_rbac_recorded_live.py). `LiveRun` says whether the session ran the whole live
suite: only then does a grant that no request used mean anything.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from gpufleet.testing.cluster import AuditRecord, Cluster

from .cluster_kit import AGENT_SA, SCHEDULER_SA, service_account_user

CLUSTER = "cluster"
"""The scope of a call to a cluster-scoped resource or across all namespaces (tests/deploy/test_rbac.py's name)."""
COMPONENTS = {service_account_user(SCHEDULER_SA): "scheduler", service_account_user(AGENT_SA): "agent"}
"""The audit log's user name of each component's ServiceAccount (deploy/'s, also the chart's)."""
LIVE = Path(__file__).parent
"""tests/live: its test_*.py modules are the whole live suite."""
Grant = tuple[str, str, str, str]
"""(scope, apiGroup, resource[/subresource], verb), as `tests.deploy.test_rbac.granted` gives them."""


@dataclass(frozen=True, order=True, slots=True)
class Call:
    """One kind of request, as RBAC judges it."""

    scope: str
    """The request's namespace, or CLUSTER."""
    api_group: str
    resource: str
    """`pods`, `pods/binding`; for a non-resource URL its path (`/apis/karpenter.sh/v1`)."""
    verb: str

    @property
    def non_resource(self) -> bool:
        return self.resource.startswith("/")

    @classmethod
    def of(cls, record: AuditRecord) -> Call:
        if not record.resource:
            return cls(CLUSTER, "", record.uri.split("?", 1)[0], record.verb)
        resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
        return cls(record.namespace or CLUSTER, record.api_group, resource, record.verb)


@dataclass
class Seen:
    """The requests of one call: how many, their answers, the tests that made them."""

    requests: int = 0
    codes: Counter[int] = field(default_factory=Counter)
    tests: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A 403 a component was answered."""

    component: str
    call: Call
    path: str
    test: str
    """The test (node id) running when the cluster stopped: the one whose cluster it was."""


@dataclass
class Recording:
    """Every call per component over the session; filled from several threads' clusters at most
    one at a time (the lock)."""

    calls: dict[str, dict[Call, Seen]] = field(default_factory=lambda: {c: {} for c in COMPONENTS.values()})
    refusals: list[Refusal] = field(default_factory=list)
    clusters: int = 0
    errors: list[str] = field(default_factory=list)
    """Clusters whose audit log could not be read: the record is incomplete."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def listener(self, cluster: Cluster) -> None:
        """For `add_stop_listener`: never raises, so a cluster always stops; a failure is kept in `errors`."""
        test = current_test()
        try:
            records = list(cluster.iter_audit(stages=("ResponseStarted", "ResponseComplete")))
        except Exception as exc:  # noqa: BLE001 - reported by the RBAC test, not lost in a teardown
            with self._lock:
                self.errors.append(f"{test}: reading {cluster.logs / 'audit.log'}: {exc!r}")
            return
        with self._lock:
            self.clusters += 1
            self.add(records, test)

    def add(self, records: Iterable[AuditRecord], test: str) -> None:
        for r in records:
            component = COMPONENTS.get(r.user)
            if component is None:
                continue
            call = Call.of(r)
            seen = self.calls[component].setdefault(call, Seen())
            seen.tests.add(test)
            if r.stage != "ResponseComplete":
                continue  # a watch still open when the cluster stopped: its call is known, not its end
            seen.requests += 1
            seen.codes[r.code] += 1
            if r.code == 403:
                self.refusals.append(Refusal(component, call, r.path or r.uri, test))


def current_test() -> str:
    """The node id of the test pytest is running (setup, call or teardown), from the variable pytest sets."""
    return os.environ.get("PYTEST_CURRENT_TEST", "(outside a test)").rsplit(" (", 1)[0]


def grant_of(call: Call, grants: set[Grant]) -> Grant | None:
    """The grant that allows `call`: a Role's in the call's namespace, else a ClusterRole's; None if none does."""
    for scope in ((call.scope, CLUSTER) if call.scope != CLUSTER else (CLUSTER,)):
        grant = (scope, call.api_group, call.resource, call.verb)
        if grant in grants:
            return grant
    return None


@dataclass
class LiveRun:
    """The live tests of this session, as collection left them and as they ended."""

    args: list[str] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)
    """File names of the live test modules collected (with at least one test left in)."""
    deselected: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def incomplete(self) -> list[str]:
        """Why this session is not a run of the whole live suite (empty when it is)."""
        why = []
        missing = sorted({p.name for p in LIVE.glob("test_*.py")} - self.modules)
        if missing:
            why.append(f"live modules not collected: {', '.join(missing)}")
        if any("::" in a for a in self.args):
            why.append(f"tests chosen by node id: {' '.join(a for a in self.args if '::' in a)}")
        if self.deselected:
            why.append(f"{len(self.deselected)} live tests deselected (e.g. {self.deselected[0]})")
        if self.skipped:
            why.append(f"{len(self.skipped)} live tests skipped: {', '.join(self.skipped[:5])}")
        return why
