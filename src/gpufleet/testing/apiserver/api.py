"""The API's verbs over the store: get, list, create, update, patch, delete, bind, evict.

Both the HTTP layer and the Python fixture API call these; each raises `ApiError` with the
Status the real server would send. Every read-modify-write runs under the store lock, so
optimistic concurrency is exact: an update whose `metadata.resourceVersion` is not the
stored one is a 409, and concurrent writers are serialised as by etcd's compare-and-swap.

Objects come in and go out in the version of the request (`view`/`unview`): events.k8s.io
events are converted to and from the stored core/v1 shape, custom resources get the
apiVersion of the path. A write that changes nothing keeps the resourceVersion (no event),
as kube-apiserver does for no-op updates.
"""

from __future__ import annotations

import builtins
import copy
from typing import Any

from gpufleet.testing.apiserver import crd, events, meta, patch, pods
from gpufleet.testing.apiserver.errors import (ApiError, already_exists, bad_request, invalid, not_found,
                                               stale, success_body)
from gpufleet.testing.apiserver.resources import Registry, ResourceType
from gpufleet.testing.apiserver.selectors import label_selector_matches
from gpufleet.testing.apiserver.store import Event, Obj, Store

CORE_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"
PDB_KEY = "poddisruptionbudgets.policy"
_RETURNS_OBJECT = frozenset({"pods", "namespaces"})
"""Resources whose DELETE answers with the object (others answer a Status), like the real stores."""


class Api:
    def __init__(self, store: Store, registry: Registry | None = None) -> None:
        self.store = store
        self.registry = registry or Registry()
        ns = self.registry.resolve("namespaces")
        for name in CORE_NAMESPACES:
            self.create(ns, None, {"metadata": {"name": name}})

    # --- conversion between the request's version and storage -------------------------------

    def view(self, rt: ResourceType, obj: Obj) -> Obj:
        """The stored object as `rt`'s version shows it (shared when unchanged: do not modify)."""
        if rt.storage_key == "events" and rt.group:
            return events.to_events_v1(obj)
        if rt.crd and obj.get("apiVersion") != rt.api_version:
            return {**obj, "apiVersion": rt.api_version}
        return obj

    def _unview(self, rt: ResourceType, obj: Obj) -> Obj:
        if rt.storage_key == "events" and rt.group:
            return events.from_events_v1(obj)
        return obj

    # --- reads ----------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, namespace or "", name)
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return self.view(rt, obj)

    def list(self, rt: ResourceType, namespace: str | None) -> tuple[int, builtins.list[Obj]]:
        rv, items = self.store.list(rt.storage_key, namespace if rt.namespaced else None)
        return rv, [self.view(rt, o) for o in items]

    # --- writes ---------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, body: Any, *, trusted: bool = False,
               strict: bool = False, dry_run: bool = False) -> Obj:
        """POST a collection. `trusted` (fixtures) keeps status and creates a missing namespace."""
        obj = self._decode(rt, body)
        m = obj["metadata"]
        self._check_namespace(rt, m, namespace)
        meta.assign_name(m, rt.kind, rt.group)
        meta.check_name(m["name"], rt.kind, rt.group, label=rt.plural == "namespaces")
        with self.store.lock:
            if rt.namespaced:
                self._require_namespace(m["namespace"], create=trusted)
            if self.store.get(rt.storage_key, m.get("namespace", ""), m["name"]) is not None:
                raise already_exists(rt.group, rt.plural, m["name"])
            meta.stamp_new(m)
            obj = self._admit_new(rt, obj, trusted=trusted, strict=strict)
            if dry_run:
                return self.view(rt, obj)
            ev = self.store.put(rt.storage_key, obj, created=True)
            self._after(rt, ev)
            return self.view(rt, ev.obj)

    def update(self, rt: ResourceType, namespace: str | None, name: str, body: Any, *,
               subresource: str | None = None, strict: bool = False, dry_run: bool = False,
               force: bool = False) -> Obj:
        """PUT an object or its status; `force` (fixtures) skips the resourceVersion check."""
        new = self._decode(rt, body)
        with self.store.lock:
            old = self._stored(rt, namespace, name)
            if force:
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if not new["metadata"].get("resourceVersion") and rt.crd:
                raise invalid(rt.kind, rt.group, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                                         "Invalid value: 0: must be specified for an update")])
            return self._replace(rt, old, new, subresource, strict=strict, dry_run=dry_run)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, content_type: str, body: Any, *,
              subresource: str | None = None, strict: bool = False, dry_run: bool = False) -> Obj:
        with self.store.lock:
            old = self._stored(rt, namespace, name)
            patched = patch.apply_patch(content_type, self.view(rt, old), body, custom=rt.crd)
            new = self._decode(rt, patched)
            return self._replace(rt, old, new, subresource, strict=strict, dry_run=dry_run)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: Any = None,
               *, dry_run: bool = False) -> Obj:
        with self.store.lock:
            old = self._stored(rt, namespace, name)
            pre = (options.get("preconditions") or {}) if isinstance(options, dict) else {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise ApiError(409, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                    f"UID in object meta: {old['metadata']['uid']}", "Conflict")
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise stale(rt.group, rt.plural, name)
            if dry_run:
                return self.view(rt, old)
            ev = self.store.remove(rt.storage_key, old["metadata"].get("namespace", ""), name)
            assert ev is not None
            self._after(rt, ev)
            if rt.crd or rt.plural in _RETURNS_OBJECT and not rt.group:
                return self.view(rt, ev.obj)
            return {**success_body(200), "details": {"name": name, "group": rt.group, "kind": rt.plural,
                                                       "uid": old["metadata"]["uid"]}}

    def delete_collection(self, rt: ResourceType, namespace: str | None, keep: Any) -> builtins.list[Obj]:
        """Delete the objects `keep(obj)` selects; returns them."""
        with self.store.lock:
            _, items = self.list(rt, namespace)
            chosen = [o for o in items if keep(o)]
            for o in chosen:
                self.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"])
            return chosen

    # --- pod subresources ----------------------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Any) -> Obj:
        if not isinstance(binding, dict):
            raise bad_request("a Binding must be a JSON object")
        pod_type = self.registry.resolve("pods")
        with self.store.lock:
            pod = self._stored(pod_type, namespace, name)
            rv = (binding.get("metadata") or {}).get("resourceVersion")
            if rv and rv != pod["metadata"]["resourceVersion"]:
                raise stale("", "pods", name)
            bound = pods.bind(pod, binding)
            self.store.put("pods", bound, created=False)
        return success_body(201)

    def evict(self, namespace: str, name: str, eviction: Any) -> Obj:
        pod_type = self.registry.resolve("pods")
        with self.store.lock:
            pod = self._stored(pod_type, namespace, name)
            options = (eviction or {}).get("deleteOptions") if isinstance(eviction, dict) else None
            _, budgets = self.store.list(PDB_KEY, namespace)
            _, neighbours = self.store.list("pods", namespace)
            budget_status = pods.check_eviction(pod, budgets, neighbours)
            self.delete(pod_type, namespace, name, options)
            if budget_status is not None:
                budget = next(b for b in budgets if label_selector_matches(
                    (b.get("spec") or {}).get("selector"), pod["metadata"].get("labels") or {}))
                self.store.put(PDB_KEY, {**budget, "metadata": dict(budget["metadata"]), "status": budget_status},
                               created=False)
        return success_body(201)

    # --- internals ------------------------------------------------------------------------

    def _decode(self, rt: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of a {rt.kind} must be a JSON object")
        obj = copy.deepcopy(body)
        if obj.get("kind") not in (None, rt.kind) or obj.get("apiVersion") not in (None, rt.api_version):
            raise bad_request(f"the API version in the data ({obj.get('apiVersion')}) does not match the expected "
                              f"API version ({rt.api_version})" if obj.get("kind") in (None, rt.kind) else
                              f"the kind in the data ({obj.get('kind')}) does not match {rt.kind}")
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        if rt.storage_key == "events":
            if rt.group:
                events.validate_events_v1(obj)
            obj = self._unview(rt, obj)
        return obj

    def _check_namespace(self, rt: ResourceType, m: Obj, namespace: str | None) -> None:
        if not rt.namespaced:
            m.pop("namespace", None)
            return
        body_ns = m.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        m["namespace"] = namespace or body_ns or "default"

    def _require_namespace(self, namespace: str, *, create: bool) -> None:
        if self.store.get("namespaces", "", namespace) is not None:
            return
        if not create:
            raise not_found("", "namespaces", namespace)
        self.create(self.registry.resolve("namespaces"), None, {"metadata": {"name": namespace}})

    def _stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, (namespace or "") if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return obj

    def _admit_new(self, rt: ResourceType, obj: Obj, *, trusted: bool, strict: bool) -> Obj:
        if rt.crd:
            if "status" in rt.subresources and not trusted:
                obj.pop("status", None)
            return crd.admit(rt, obj, strict=strict)
        key = rt.storage_key
        if key == "pods":
            pods.default_pod(obj, trusted=trusted)
            pods.validate_pod(obj)
        elif key == "namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif key == "events":
            events.default_core_event(obj)
        elif key == "leases.coordination.k8s.io":
            self._check_lease(obj)
        elif key == CRD_KEY:
            crd.validate_crd(obj)
            crd.with_status(obj)
        return obj

    def _check_lease(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        for field in ("acquireTime", "renewTime"):
            meta.check_micro_time(spec.get(field), "Lease", "coordination.k8s.io/v1")

    def _replace(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None, *,
                 strict: bool, dry_run: bool) -> Obj:
        name = old["metadata"]["name"]
        if new["metadata"].get("name", name) != name:
            raise bad_request(f"the name of the object ({new['metadata']['name']}) does not match the name on the "
                              f"URL ({name})")
        wanted = new["metadata"].get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise stale(rt.group, rt.plural, name)
        if subresource == "status":
            new = {**old, "status": new.get("status"), "metadata": old["metadata"]}
            if new["status"] is None:
                new.pop("status")
        elif "status" in rt.subresources:
            new = {**new, "status": old.get("status")} if "status" in old else \
                {k: v for k, v in new.items() if k != "status"}
        meta.keep_owned(new["metadata"], old["metadata"])
        new = self._admit_update(rt, old, new, strict=strict)
        if _same(old, new):
            return self.view(rt, old)
        if rt.crd or rt.group in ("apps", "policy"):
            if {k: v for k, v in new.items() if k not in ("metadata", "status")} != \
                    {k: v for k, v in old.items() if k not in ("metadata", "status")}:
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if dry_run:
            return self.view(rt, new)
        new = copy.deepcopy(new)  # the store owns what it keeps
        ev = self.store.put(rt.storage_key, new, created=False)
        self._after(rt, ev)
        return self.view(rt, ev.obj)

    def _admit_update(self, rt: ResourceType, old: Obj, new: Obj, *, strict: bool) -> Obj:
        if rt.crd:
            return crd.admit(rt, new, strict=strict)
        if rt.storage_key == "pods":
            pods.validate_pod_update(old, new)
        elif rt.storage_key == "leases.coordination.k8s.io":
            self._check_lease(new)
        elif rt.storage_key == CRD_KEY:
            crd.validate_crd(new)
            crd.with_status(new)
            if old.get("status", {}).get("conditions"):
                new["status"]["conditions"] = old["status"]["conditions"]
        return new

    def _after(self, rt: ResourceType, ev: Event) -> None:
        """Side effects of a write: CRDs (un)serve types, a namespace takes its objects along."""
        if rt.storage_key == CRD_KEY:
            spec = ev.obj["spec"]
            self.registry.remove_group_resource(spec["group"], spec["names"]["plural"])
            if ev.type != "DELETED":
                for t in crd.types_of(ev.obj):
                    self.registry.add(t)
            else:
                key = f"{spec['names']['plural']}.{spec['group']}"
                for o in list(self.store.iter_objects(key)):
                    self.store.remove(key, o["metadata"].get("namespace", ""), o["metadata"]["name"])
        elif rt.storage_key == "namespaces" and ev.type == "DELETED":
            ns = ev.obj["metadata"]["name"]
            for t in {t.storage_key: t for t in self.registry.types() if t.namespaced}.values():
                _, items = self.store.list(t.storage_key, ns)
                for o in items:
                    self.store.remove(t.storage_key, ns, o["metadata"]["name"])


def _same(old: Obj, new: Obj) -> bool:
    def strip(o: Obj) -> Obj:
        return {**o, "metadata": {k: v for k, v in o["metadata"].items() if k not in ("resourceVersion", "managedFields")}}
    return strip(old) == strip(new)
