"""Pod semantics: defaults, validation, spec immutability, binding, eviction and PDBs.

These follow kube-apiserver's pod strategy and subresources:

* create: `status` is reset to Pending (unless a trusted fixture sets it), schedulerName,
  restartPolicy and the QoS class are defaulted, containers need a name and an image;
* update: the spec is immutable except container images, activeDeadlineSeconds,
  tolerations (additions) and schedulingGates (removals); `spec.nodeName` is set only
  through `pods/binding`;
* binding: 409 when the pod is already bound or has scheduling gates, 409 when the
  Binding's uid precondition names another pod; sets nodeName, copies the Binding's
  annotations, sets PodScheduled=True;
* eviction: Pending, Succeeded and Failed pods are deleted without looking at budgets;
  otherwise the one PodDisruptionBudget selecting the pod must allow a disruption (else
  429), and more than one matching budget is a 500, as in the real eviction subresource.
  The disruption controller is not simulated: allowed disruptions are computed at the
  moment of the eviction from the healthy (Running and Ready) pods the budget selects.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from gpufleet.testing.apiserver import meta
from gpufleet.testing.apiserver.errors import ApiError, conflict, invalid
from gpufleet.testing.apiserver.selectors import label_selector_matches

Obj = dict[str, Any]


def default_pod(pod: Obj, *, trusted: bool) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("priority", 0)
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            c.setdefault("imagePullPolicy", "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("resources", {})
    given = pod.get("status")
    status: Obj = given if trusted and isinstance(given, dict) and given else {"phase": "Pending"}
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", qos_class(spec))
    pod["status"] = status


def qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    requests = [c.get("resources", {}).get("requests") or {} for c in containers]
    limits = [c.get("resources", {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(lim.get(r) is not None and (req.get(r, lim.get(r)) == lim.get(r))
                     for req, lim in zip(requests, limits) for r in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


def validate_pod(pod: Obj) -> None:
    name = pod["metadata"]["name"]
    containers = (pod.get("spec") or {}).get("containers")
    causes: list[tuple[str, str, str]] = []
    if not isinstance(containers, list) or not containers:
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    else:
        seen: set[str] = set()
        for i, c in enumerate(containers):
            where = f"spec.containers[{i}]"
            if not isinstance(c, dict) or not c.get("name"):
                causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
                continue
            if c["name"] in seen:
                causes.append((f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{c["name"]}"'))
            seen.add(c["name"])
            if not c.get("image"):
                causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
    if causes:
        raise invalid("Pod", "", name, causes)


_MUTABLE_NOTE = ("pod updates may not change fields other than `spec.containers[*].image`,"
                 "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                 "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                 "(allow it to be set to 1 if it was previously negative)")


def validate_pod_update(old: Obj, new: Obj) -> None:
    """The spec may change only where the real pod strategy allows it."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    allowed = copy.deepcopy(old_spec)
    for field in ("containers", "initContainers"):
        for mine, theirs in zip(allowed.get(field) or [], new_spec.get(field) or []):
            if isinstance(mine, dict) and isinstance(theirs, dict) and "image" in theirs:
                mine["image"] = theirs["image"]
    for field in ("activeDeadlineSeconds", "tolerations"):
        if field in new_spec:
            allowed[field] = new_spec[field]
        else:
            allowed.pop(field, None)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    gates_old = old_spec.get("schedulingGates") or []
    gates_new = new_spec.get("schedulingGates") or []
    if all(g in gates_old for g in gates_new):
        if gates_new:
            allowed["schedulingGates"] = gates_new
        else:
            allowed.pop("schedulingGates", None)
    if allowed != new_spec or not all(t in new_tolerations for t in old_tolerations):
        raise invalid("Pod", "", new["metadata"]["name"], [("spec", "FieldValueForbidden", f"Forbidden: {_MUTABLE_NOTE}")])


def set_condition(status: Obj, condition: Obj) -> None:
    """Replace the condition of the same type; lastTransitionTime changes only with status."""
    conditions = [c for c in status.get("conditions") or []]
    for i, c in enumerate(conditions):
        if c.get("type") == condition["type"]:
            if c.get("status") == condition["status"] and "lastTransitionTime" in c:
                condition = {**condition, "lastTransitionTime": c["lastTransitionTime"]}
            conditions[i] = condition
            break
    else:
        conditions.append(condition)
    status["conditions"] = conditions


def bind(pod: Obj, binding: Obj) -> Obj:
    """The pod after a Binding: raises 409/422 as pods/binding does."""
    name = pod["metadata"]["name"]
    target = binding.get("target") or {}
    if target.get("kind") not in (None, "", "Node") or not target.get("name"):
        raise invalid("Binding", "", name, [("target", "FieldValueInvalid",
                                              "Invalid value: must name a Node (target.kind Node, target.name)")])
    want_uid = (binding.get("metadata") or {}).get("uid")
    if want_uid and want_uid != pod["metadata"]["uid"]:
        raise conflict("", "pods/binding", name, f"Precondition failed: UID in precondition: {want_uid}, "
                                                 f"UID in object meta: {pod['metadata']['uid']}")
    if pod["spec"].get("nodeName"):
        raise conflict("", "pods/binding", name,
                       f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
    if pod["spec"].get("schedulingGates"):
        raise conflict("", "pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates")
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = target["name"]
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    if annotations:
        bound["metadata"]["annotations"] = {**(bound["metadata"].get("annotations") or {}), **annotations}
    set_condition(bound["status"], {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                    "lastTransitionTime": meta.now_rfc3339()})
    return bound


# --- eviction ------------------------------------------------------------------------------

def is_healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def check_eviction(pod: Obj, pdbs: list[Obj], namespace_pods: list[Obj]) -> Obj | None:
    """Raise 429 or 500 when the eviction API would refuse to evict `pod` now.

    Returns the budget's status after the eviction (None when no budget applies), as the
    disruption controller would keep it: `expectedPods` never shrinks below what it was,
    because a controller would replace an evicted pod.
    """
    if (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed"):
        return None
    labels = pod["metadata"].get("labels") or {}
    matching = [p for p in pdbs if label_selector_matches((p.get("spec") or {}).get("selector"), labels)]
    if len(matching) > 1:
        raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                            "does not support.", "InternalError")
    if not matching:
        return None
    pdb = matching[0]
    selector = (pdb.get("spec") or {}).get("selector")
    selected = [p for p in namespace_pods if label_selector_matches(selector, p["metadata"].get("labels") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    healthy = sum(1 for p in selected if is_healthy(p))
    expected = max(len(selected), int((pdb.get("status") or {}).get("expectedPods") or 0))
    desired = desired_healthy(pdb.get("spec") or {}, expected)
    if is_healthy(pod) and healthy - desired <= 0:
        name = pdb["metadata"]["name"]
        raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.", "TooManyRequests",
                       details={"causes": [{"reason": "DisruptionBudget", "message":
                                            f"The disruption budget {name} needs {desired} healthy pods and "
                                            f"has {healthy} currently"}]})
    after = healthy - 1 if is_healthy(pod) else healthy
    return {**(pdb.get("status") or {}), "expectedPods": expected, "currentHealthy": after,
            "desiredHealthy": desired, "disruptionsAllowed": max(0, after - desired),
            "observedGeneration": pdb["metadata"].get("generation", 1)}


def desired_healthy(spec: Obj, expected: int) -> int:
    """minAvailable / maxUnavailable (ints or percentages, rounded up) as a count of pods."""
    if "minAvailable" in spec:
        return _scaled(spec["minAvailable"], expected)
    if "maxUnavailable" in spec:
        return max(0, expected - _scaled(spec["maxUnavailable"], expected))
    return 0


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)
