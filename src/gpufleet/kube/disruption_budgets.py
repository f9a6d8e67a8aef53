"""PodDisruptionBudgets (policy/v1) as defragmentation sees them on a live cluster.

A budget selects pods of its own namespace by its label selector, `matchLabels` and
`matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`), as every Kubernetes label
selector does: an empty selector selects every pod of the namespace, a missing one none
(policy/v1). How many of those pods may be disrupted now is the budget's
`status.disruptionsAllowed`, which kube-controller-manager's disruption controller computes
from the pods' health and the owners' scale. It is taken as it is, and a budget with no
status yet allows nothing. Each budget becomes a `model.disruption.LiveBudget`. Defragmentation
then never plans to move more of a budget's pods than it allows; the Eviction API would
refuse them with 429 anyway, but a plan must not start moving pods it cannot finish.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from gpufleet.kube import translate
from gpufleet.model import PodUid
from gpufleet.model.disruption import LiveBudget

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]


def selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector matches `labels` (None: a budget without a selector, which selects nothing)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or ():
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or ())
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # kube-apiserver refuses other operators; never match what cannot be read
    return True


def live_budgets(pdbs: Iterable[Obj], pods: Iterable[Obj]) -> tuple[LiveBudget, ...]:
    """Each budget with the running pods it selects and the disruptions its status allows."""
    by_namespace: dict[str, list[tuple[PodUid, Mapping[str, str]]]] = {}
    for pod in pods:
        m = translate.meta(pod)
        by_namespace.setdefault(str(m.get("namespace") or "default"), []).append(
            (PodUid(str(m.get("uid", ""))), m.get("labels") or {}))
    out = []
    for pdb in pdbs:
        m = translate.meta(pdb)
        namespace = str(m.get("namespace") or "default")
        selector = (pdb.get("spec") or {}).get("selector")
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
        if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
            allowed = 0
        chosen = frozenset(uid for uid, labels in by_namespace.get(namespace, ()) if selects(selector, labels))
        out.append(LiveBudget(f"{namespace}/{m.get('name', '')}", chosen, allowed))
    return tuple(out)
