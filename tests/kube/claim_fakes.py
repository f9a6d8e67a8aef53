"""A stand-in for the few ResourceClaim requests the claim writer makes, for the unit tests.

`ClaimStore` keeps claims as kube-apiserver does for these requests: a PUT must carry the
stored resourceVersion (else 409); a PUT of the claim changes its metadata (finalizers), one of
`/status` its status; each write bumps the version. Every request is recorded in order, and a
request can be made to fail (`fail`). Bindings and events are accepted and recorded too.
Behaviour against the real server is tested in tests/live/test_scheduler_dra_live.py.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable

import httpx2
from lightkube.core.exceptions import ApiError

from gpufleet.kube import translate
from gpufleet.kube.binder import Binder
from gpufleet.kube.cache import SchedulerCache
from gpufleet.kube.events import EventRecorder
from gpufleet.kube.metrics import Metrics
from gpufleet.kube.ratelimit import TokenBucket
from gpufleet.kube.retry import Retrier, RetryPolicy

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
GPU_CLASS = {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {
    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def api_error(code: int, url: str = "http://x/") -> ApiError:
    req = httpx2.Request("PUT", url)
    return ApiError(request=req, response=httpx2.Response(code, json={"kind": "Status", "code": code, "message": "m"},
                                                          request=req))


def claim(name: str, count: int = 1, *, namespace: str = "ns", version: int = 1, **status: Any) -> Obj:
    obj: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{name}",
                             "resourceVersion": str(version)},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count}}]}}}
    if status:
        obj["status"] = status
    return obj


def gpu_slice(node: str, gpus: int, *, uuids: tuple[str, ...] = (), generation: int = 1) -> Obj:
    """A ResourceSlice as NVIDIA's DRA driver publishes whole GPUs (one pool per node)."""
    devices = [{"name": f"gpu-{i}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": uuids[i] if i < len(uuids) else f"GPU-{node}-{i}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}}} for i in range(gpus)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


class ClaimStore:
    def __init__(self, *claims: Obj) -> None:
        self.claims = {translate.key_of(c): copy.deepcopy(c) for c in claims}
        self.calls: list[tuple[str, str]] = []
        """(method, what): `PUT claim ns/c`, `PUT status ns/c`, `GET claim ns/c`, `POST binding ns/p`."""
        self.bodies: list[Obj] = []
        self.fail: dict[tuple[str, str], list[Exception]] = {}
        """(method, what) -> exceptions to raise, one per request, before it is applied."""
        self.after: dict[tuple[str, str], Callable[[], None]] = {}
        """(method, what) -> run once after that request was applied (a concurrent writer)."""
        self.version = 100

    def _what(self, method: str, url: str) -> tuple[str, str]:
        parts = url.strip("/").split("/")
        if "resourceclaims" in parts:
            i = parts.index("resourceclaims")
            kind = "status" if parts[-1] == "status" else "claim"
            return method, f"{kind} {parts[i - 1]}/{parts[i + 1]}"
        if parts[-1] == "binding":
            return method, f"binding {parts[-4]}/{parts[-2]}"
        return method, "other"

    def _enter(self, method: str, url: str) -> tuple[str, str]:
        what = self._what(method, url)
        if what[1] != "other":
            self.calls.append(what)
        failures = self.fail.get(what)
        if failures:
            raise failures.pop(0)
        return what

    def _leave(self, what: tuple[str, str]) -> None:
        hook = self.after.pop(what, None)
        if hook is not None:
            hook()

    def get(self, url: str) -> Obj:
        what = self._enter("GET", url)
        key = what[1].split(" ", 1)[1]
        if what[1].startswith("claim ") and key in self.claims:
            return copy.deepcopy(self.claims[key])
        if what[1].startswith("claim "):
            raise api_error(404, url)
        return {"spec": {"nodeName": None}}

    def put(self, url: str, body: Obj) -> Obj:
        what = self._enter("PUT", url)
        key = what[1].split(" ", 1)[1]
        stored = self.claims[key]
        if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            raise api_error(409, url)
        self.bodies.append(copy.deepcopy(body))
        if what[1].startswith("status "):
            stored["status"] = copy.deepcopy(body.get("status") or {})
        else:
            stored["metadata"]["finalizers"] = list(body["metadata"].get("finalizers") or [])
        self.bump(key)
        result = copy.deepcopy(stored)
        self._leave(what)  # a concurrent writer: after the reply was made
        return result

    def bump(self, key: str) -> None:
        self.version += 1
        self.claims[key]["metadata"]["resourceVersion"] = str(self.version)

    def post(self, url: str, body: Obj) -> Obj:
        what = self._enter("POST", url)
        self._leave(what)
        return {}

    def patch(self, url: str, body: Obj, content_type: str = "") -> Obj:
        self._enter("PATCH", url)
        return {}


def binder_for(store: ClaimStore, cache: SchedulerCache) -> tuple[Binder, EventRecorder]:
    retrier = Retrier(RetryPolicy(attempts=2, first_delay_s=0.0, budget_s=1.0), logging.getLogger("t"),
                      sleep=lambda s: None)
    events = EventRecorder(store, retrier, "me")  # type: ignore[arg-type]
    binder = Binder(store, cache, TokenBucket(0, 1), retrier, events, Metrics())  # type: ignore[arg-type]
    return binder, events


def claim_pod(name: str, *claims: str, templated: dict[str, str | None] | None = None) -> Obj:
    """A gpufleet pod using `claims` by name and, with `templated`, entries from templates
    (entry name -> the generated claim's name, None while the controller has not made it)."""
    entries: list[Obj] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    statuses = []
    for entry, generated in (templated or {}).items():
        entries.append({"name": entry, "resourceClaimTemplateName": "tmpl"})
        if generated is not None:
            statuses.append({"name": entry, "resourceClaimName": generated})
    pod: Obj = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                             "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "5"},
                "spec": {"schedulerName": "gpufleet", "resourceClaims": entries,
                         "containers": [{"name": "c", "resources": {"claims": [{"name": e["name"]} for e in entries]}}]}}
    if statuses:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod
