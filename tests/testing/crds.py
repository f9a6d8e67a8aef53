"""The two CRDs gpufleet installs, reduced to what the tests exercise (the full ones live in deploy/)."""

from __future__ import annotations

from typing import Any

QUANTITY = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}

PODGROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io", "scope": "Namespaced",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup",
                  "shortNames": ["pg", "pgs"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                    "spec": {"type": "object", "properties": {
                        "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                        "minResources": {"type": "object", "additionalProperties": QUANTITY},
                        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 1, "default": 60}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Pending", "Scheduling", "Running", "Unknown",
                                                             "Finished", "Failed"]},
                        "running": {"type": "integer"}, "succeeded": {"type": "integer"},
                        "failed": {"type": "integer"}}}}}}}]}}

QUEUE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "queues.gpufleet.io"},
    "spec": {
        "group": "gpufleet.io", "scope": "Cluster",
        "names": {"kind": "Queue", "listKind": "QueueList", "plural": "queues", "singular": "queue"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                    "spec": {"type": "object", "required": ["weight"], "properties": {
                        "parent": {"type": "string"},
                        "weight": {"type": "integer", "minimum": 1},
                        "guaranteed": {"type": "object", "additionalProperties": QUANTITY},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def podgroup(name: str, min_member: Any = 2, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min_member, **spec}}


def queue(name: str, weight: Any = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": weight, **spec}}
