"""Least privilege, measured: deploy/'s RBAC against every request the scheduler and the agent
made during the live suite (issue 24, item 2).

tests/live/conftest.py records, on every control plane the session started, each call of the
two ServiceAccounts (`rbac_record.py`) and runs this module after every other test. Two checks:

* every call was granted by deploy/'s RBAC, and none was refused with 403. The tests that check
  403 answers use ServiceAccounts of their own, and FaultProxy's 403 replies never reach
  kube-apiserver, so neither shows here. Some tests provoke real 403s for granted calls: a
  kube-apiserver restarted in the middle of a run answers 403 for about 2 s while its RBAC
  cache fills (docs/control-plane.md), and the admission policy gpufleet-agent-own-node
  refuses an agent's writes to another node. Those, and only for calls deploy/ grants (so RBAC
  did not refuse them), are accepted (`PROVOKED`) and listed as such in the report;
* every grant was used at least once. This half means something only when the whole live suite
  ran; otherwise it is skipped, saying what was left out. A grant that kube-apiserver checks
  inside another request, and that no request names (`IMPLIED`), counts as used when that
  request succeeded.

The table of calls per component is written to reports/rbac-calls.md; docs/security.md
("What each component calls") gives the reason for each, and tests/deploy/test_rbac.py pins the
same grants statically.
"""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path

import pytest

from tests.deploy.test_rbac import granted

from .cluster_kit import AGENT_SA, ROOT, SCHEDULER_SA, manifests
from .rbac_record import CLUSTER, Call, Grant, LiveRun, Recording, Refusal, grant_of

ACCOUNTS = {"scheduler": SCHEDULER_SA, "agent": AGENT_SA}
RBAC_FILES = ("deploy/scheduler/rbac.yaml", "deploy/agent/rbac.yaml")
"""What `install_gpufleet` installs (the chart renders the same rules: tests/deploy/test_chart.py)."""
REPORT = ROOT / "reports" / "rbac-calls.md"
PROVOKED = {
    "tests/live/test_api_faults_live.py::test_kube_apiserver_restarted_in_the_middle_of_a_run":
        "a restarted kube-apiserver answers 403 while its RBAC cache fills",
    "tests/live/test_agent_own_node_live.py::test_the_agent_writes_its_own_node_and_not_another":
        "the admission policy gpufleet-agent-own-node refuses the agent's writes to another node (403)",
    "tests/live/test_agent_own_node_live.py::test_the_agent_publishes_and_deletes_only_its_own_nodes_slices":
        "the admission policy gpufleet-agent-own-node refuses another node's ResourceSlices (403)",
    "tests/live/test_agent_own_node_live.py::test_a_token_not_bound_to_a_pod_on_a_node_writes_no_node":
        "the admission policy gpufleet-agent-own-node refuses a token bound to no node (403)",
}
"""Tests that provoke 403s on purpose (test node id -> why): accepted there for calls deploy/ grants."""
IMPLIED = {("resource.k8s.io", "resourceclaims/binding", "update"): ("resource.k8s.io", "resourceclaims/status", "update")}
"""Synthetic subresources (apiGroup, resource, verb) -> the request that needs them. From Kubernetes
1.36 (DRAResourceClaimGranularStatusAuthorization, on in the pinned v1.37.2) kube-apiserver refuses a
claim status update that changes `allocation` or `reservedFor` unless the caller may also
`update resourceclaims/binding`; that check is no request of its own, so the audit log never names
it. Every status update of the scheduler's changes one of the two (kube/claims.py), so one that
succeeded used the grant."""


@pytest.fixture(scope="module")
def grants() -> dict[str, set[Grant]]:
    objs = manifests(*RBAC_FILES)
    return {component: granted(objs, account) for component, account in ACCOUNTS.items()}


@pytest.fixture(scope="module", autouse=True)
def report(rbac_recording: Recording, grants: dict[str, set[Grant]], live_run: LiveRun) -> Path:
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(render(rbac_recording, grants, live_run))
    return REPORT


def test_every_call_of_the_scheduler_and_the_agent_was_granted_and_none_refused(
        rbac_recording: Recording, grants: dict[str, set[Grant]]) -> None:
    assert rbac_recording.errors == [], "audit logs not read: the record is incomplete"
    if not any(rbac_recording.calls.values()):
        pytest.skip("no live test of this session ran the scheduler or the agent: nothing to check")
    not_granted = [f"{component}: {call}" for component, calls in rbac_recording.calls.items() for call in calls
                   if not call.non_resource and grant_of(call, grants[component]) is None]
    assert not_granted == [], f"calls deploy/'s RBAC does not grant (see {REPORT})"
    refused = [r for r in rbac_recording.refusals if not provoked(r, grants)]
    assert refused == [], f"requests refused with 403 (see {REPORT})"


def test_every_grant_of_deploys_rbac_was_used_by_the_live_suite(
        rbac_recording: Recording, grants: dict[str, set[Grant]], live_run: LiveRun) -> None:
    if why := live_run.incomplete():
        pytest.skip("'every grant used' is judged on the whole live suite only; this run is not: " + "; ".join(why))
    unused = {component: sorted(grants[component] - used(rbac_recording, component, grants[component]))
              for component in ACCOUNTS}
    failed = f" (these live tests failed: {', '.join(live_run.failed)})" if live_run.failed else ""
    assert unused == {c: [] for c in ACCOUNTS}, f"granted but never used during the live suite{failed}"


def provoked(refusal: Refusal, grants: dict[str, set[Grant]]) -> bool:
    return refusal.test in PROVOKED and grant_of(refusal.call, grants[refusal.component]) is not None


def used(recording: Recording, component: str, grants: set[Grant]) -> set[Grant]:
    direct = {g for call in recording.calls[component] if (g := grant_of(call, grants)) is not None}
    return direct | implied(recording, component, grants)


def implied(recording: Recording, component: str, grants: set[Grant]) -> set[Grant]:
    """The `IMPLIED` grants that a successful request of the component used."""
    out = set()
    for call, seen in recording.calls[component].items():
        for (group, resource, verb), needed_by in IMPLIED.items():
            if (call.api_group, call.resource, call.verb) == needed_by and any(200 <= c < 300 for c in seen.codes):
                grant = grant_of(Call(call.scope, group, resource, verb), grants)
                if grant is not None:
                    out.add(grant)
    return out


# -- the report --------------------------------------------------------------------------------

def render(recording: Recording, grants: dict[str, set[Grant]], run: LiveRun) -> str:
    why = run.incomplete()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# API calls per component, recorded during the live tests", "",
             f"Written by `tests/live/test_rbac_recorded_live.py` at {now} from the audit logs of "
             f"{recording.clusters} control planes. "
             + ("The whole live suite ran." if not why else "Not the whole live suite: " + "; ".join(why) + "."),
             "", "Scope: the grant's (`cluster` for a ClusterRole, a namespace for a Role); the namespaces column "
             "says where the requests went (`-`: cluster-scoped or across all namespaces).", ""]
    for component in ACCOUNTS:
        lines += _component(component, recording, grants[component])
    if recording.refusals:
        lines += ["## Requests refused with 403", ""]
        lines += [f"- {_refusal(r)}" + (f" (provoked: {PROVOKED[r.test]})" if provoked(r, grants) else "")
                  for r in recording.refusals]
        lines.append("")
    if recording.errors:
        lines += ["## Audit logs not read", "", *(f"- {e}" for e in recording.errors), ""]
    return "\n".join(lines)


def _component(component: str, recording: Recording, grants: set[Grant]) -> list[str]:
    rows: dict[Grant, tuple[int, Counter[int], set[str]]] = {}
    other: list[str] = []
    for call, seen in sorted(recording.calls[component].items()):
        grant = grant_of(call, grants)
        if grant is None:
            kind = "non-resource URL (system:discovery)" if call.non_resource else "NOT GRANTED"
            other.append(f"- {call.verb} `{call.resource}` ({kind}{_ns(call)}): {_codes(seen.codes)}")
            continue
        n, codes, namespaces = rows.get(grant, (0, Counter(), set()))
        rows[grant] = (n + seen.requests, codes + seen.codes, namespaces | ({call.scope} - {CLUSTER}))
    lines = [f"## {component}", "", "| verb | API group | resource | scope | requests | answers | namespaces |",
             "|---|---|---|---|---:|---|---|"]
    for (scope, group, resource, verb), (n, codes, namespaces) in sorted(rows.items(), key=lambda r: r[0][1:]):
        lines.append(f"| {verb} | {group or 'core'} | {resource} | {scope} | {n} | {_codes(codes)} | "
                     f"{', '.join(sorted(namespaces)) or '-'} |")
    checked = implied(recording, component, grants)
    unused = sorted(grants - set(rows) - checked)
    lines += [*(f"| {v} | {g or 'core'} | {r} | {s} | - | checked inside {IMPLIED[(g, r, v)][2]} {IMPLIED[(g, r, v)][1]} | - |"
                for s, g, r, v in sorted(checked - set(rows)))]
    lines += ["", "Granted and not used: " + (", ".join(f"{v} {g or 'core'} {r} ({s})" for s, g, r, v in unused)
                                               or "none") + ".", ""]
    if other:
        lines += ["Other requests:", "", *other, ""]
    return lines


def _ns(call: Call) -> str:
    return f", namespace {call.scope}" if call.scope != CLUSTER else ""


def _codes(codes: Counter[int]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())) or "(watch open at the end)"


def _refusal(r: Refusal) -> str:
    return f"{r.component}: {r.call.verb} {r.call.api_group or 'core'} {r.call.resource} {r.path} in {r.test}"
