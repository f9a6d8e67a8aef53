"""`ApiServer`: the local Kubernetes API test server, started in a background thread.

    with ApiServer(port=0, kubelet=True, history=10_000) as srv:
        srv.write_kubeconfig(path)          # then point any client (or kubectl) at it
        srv.create(node_dict)               # fixtures go straight into the store
        srv.inject("POST", r"/binding$", 500, times=2)

It is test infrastructure, not a production server: no authentication, no admission
chain, no persistence. Python-API calls (`create`, `get`, `list`, `delete`) take the same
locks as HTTP requests and return deep copies, so tests may call them from any thread.
"""

from __future__ import annotations

import builtins
import copy
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpufleet.testing.apiserver.api import Api
from gpufleet.testing.apiserver.errors import ApiError
from gpufleet.testing.apiserver.http import HttpServer
from gpufleet.testing.apiserver.injection import RequestRecord, Rule, Rules
from gpufleet.testing.apiserver.kubelet import Kubelets
from gpufleet.testing.apiserver.resources import ResourceType
from gpufleet.testing.apiserver.routes import Context
from gpufleet.testing.apiserver.store import Store

Obj = dict[str, Any]


class ApiServer:
    """The server. `port=0` picks a free port; `history` bounds the watch history (410 beyond)."""

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1", kubelet: bool = True, history: int = 10_000,
                 bookmark_interval_s: float = 5.0, kubelet_start_delay_s: float = 0.05) -> None:
        self.store = Store(history)
        self.api = Api(self.store)
        self.rules = Rules()
        self._stopping = threading.Event()
        self._kubelets = Kubelets(self.store, start_delay_s=kubelet_start_delay_s) if kubelet else None
        ctx = Context(self.api, self._address, bookmark_interval_s, self._stopping.is_set)
        self._http = HttpServer((host, port), ctx, self.rules, self._stopping)
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="gpufleet-test-apiserver", daemon=True)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> ApiServer:
        if self._kubelets is not None:
            self._kubelets.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.store.stop_watchers()
        self._http.shutdown()
        self._http.server_close()
        self._http.drop_connections()
        if self._kubelets is not None:
            self._kubelets.stop()
        self._thread.join(5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- where -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._http.server_address[0]!s}:{self.port}"

    def _address(self) -> str:
        return f"{self._http.server_address[0]!s}:{self.port}"

    def kubeconfig(self, *, namespace: str = "default") -> Obj:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "gpufleet-test",
                "clusters": [{"name": "gpufleet-test", "cluster": {"server": self.url}}],
                "users": [{"name": "gpufleet-test", "user": {}}],
                "contexts": [{"name": "gpufleet-test", "context": {"cluster": "gpufleet-test", "user": "gpufleet-test",
                                                                   "namespace": namespace}}],
                "preferences": {}}

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig whose current context is this server, without credentials."""
        target = Path(path)
        target.write_text(yaml.safe_dump(self.kubeconfig(namespace=namespace), sort_keys=False))
        return target

    # --- direct store access for fixtures ------------------------------------------------

    def resource(self, plural: str) -> ResourceType:
        """`pods`, `leases`, `leases.coordination.k8s.io`, `podgroups`, ... (KeyError if unknown)."""
        return self.api.registry.resolve(plural)

    def create(self, obj: Obj) -> Obj:
        """Store `obj` as a client's create would, keeping its status; its namespace is created if missing."""
        rt = self.api.registry.for_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise ApiError(404, f"no resource serves {obj.get('apiVersion')} {obj.get('kind')}", "NotFound")
        return copy.deepcopy(self.api.create(rt, (obj.get("metadata") or {}).get("namespace"), obj, trusted=True))

    def get(self, plural: str, name: str, namespace: str | None = None) -> Obj | None:
        """A deep copy of the object, or None; a namespaced resource's namespace defaults to "default"."""
        rt = self.resource(plural)
        obj = self.store.get(rt.storage_key, (namespace or "default") if rt.namespaced else "", name)
        return copy.deepcopy(self.api.view(rt, obj)) if obj is not None else None

    def list(self, plural: str, namespace: str | None = None) -> builtins.list[Obj]:
        """All objects of a resource, in every namespace unless `namespace` is given."""
        rt = self.resource(plural)
        _, items = self.api.list(rt, namespace)
        return copy.deepcopy(items)

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        """Delete as a client would (a DELETED event; 404 ApiError when missing); namespace as in `get`."""
        rt = self.resource(plural)
        self.api.delete(rt, (namespace or "default") if rt.namespaced else None, name)

    def update(self, obj: Obj, *, status: bool = False) -> Obj:
        """Replace a stored object (or, with `status`, its status) without the resourceVersion check."""
        rt = self.api.registry.for_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise ApiError(404, f"no resource serves {obj.get('apiVersion')} {obj.get('kind')}", "NotFound")
        m = obj["metadata"]
        return copy.deepcopy(self.api.update(rt, m.get("namespace"), m["name"], obj,
                                             subresource="status" if status else None, force=True))

    @property
    def resource_version(self) -> int:
        return self.store.rv

    # --- failure injection ----------------------------------------------------------------

    def inject(self, method: str | None, path_regex: str, status: int | None, *, times: int = 1,
               retry_after: int | None = None, delay_s: float = 0.0, watch: bool | None = None,
               message: str | None = None) -> Rule:
        """Fail the next `times` matching requests; see `injection` for the matching rules."""
        return self.rules.inject(method, path_regex, status, times=times, retry_after=retry_after,
                                 delay_s=delay_s, watch=watch, message=message)

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        """(method, path, status) of every request served so far, in order."""
        return self.rules.log()
