"""The object store: one global resourceVersion counter, a bounded event history, watchers.

Like etcd behind kube-apiserver, every write takes the next resourceVersion from one counter
shared by all resources, and is appended to a history of events (the watch cache). A watch
from resourceVersion N replays the retained events after N and then follows live ones; when
N is older than the history holds, the watch is answered 410 Expired and the client must
relist. `history` bounds the events kept, so a test can force that case with a small value.

Stored objects are plain dicts that are never modified after they are stored: a write stores
a new dict. Readers may therefore share them without copying (the HTTP layer only encodes
them); the Python API hands out deep copies. Each watcher owns a queue that writers feed
under the store lock (O(watchers of that resource) per write; selectors are evaluated by the
watcher's own thread), so a slow client never slows the writers down.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

Obj = dict[str, Any]
ObjKey = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""


@dataclass(slots=True)
class Event:
    """One change. `prev` is the object before a MODIFIED (for selector transitions)."""

    rv: int
    type: str
    storage_key: str
    obj: Obj
    prev: Obj | None = None
    encoded: dict[str, bytes] = field(default_factory=dict)
    """Encodings of this event per (version, format), shared by the watchers that send it."""


STOP = object()
"""Put into a watcher's queue when the server stops."""


class Watcher:
    """A subscription to one storage key (optionally one namespace) fed by the store."""

    def __init__(self, storage_key: str, namespace: str | None) -> None:
        self.storage_key = storage_key
        self.namespace = namespace
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def wants(self, ev: Event) -> bool:
        return self.namespace is None or _namespace(ev.obj) == self.namespace


class Expired(Exception):
    """A watch or continue from a resourceVersion older than the retained history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.rv = 1
        self._history_limit = max(1, history)
        self._history: deque[Event] = deque()
        self._floor = 1
        """Every event with rv > floor is still in the history."""
        self._objects: dict[str, dict[ObjKey, Obj]] = {}
        self._watchers: dict[str, set[Watcher]] = {}
        self.listeners: list[Callable[[Event], None]] = []
        """Called under the lock after each write (the kubelet simulation); must be quick."""

    # --- reads ------------------------------------------------------------------------------

    def get(self, storage_key: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(storage_key, {}).get((namespace, name))

    def list(self, storage_key: str, namespace: str | None = None) -> tuple[int, list[Obj]]:
        """The current resourceVersion and the objects, sorted by (namespace, name) as etcd keys are."""
        with self.lock:
            objects = self._objects.get(storage_key, {})
            keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
            return self.rv, [objects[k] for k in keys]

    def count(self, storage_key: str) -> int:
        return len(self._objects.get(storage_key, {}))

    def iter_objects(self, storage_key: str) -> Iterator[Obj]:
        """All objects of a key, unordered; the caller holds the lock."""
        return iter(list(self._objects.get(storage_key, {}).values()))

    # --- writes (callers hold the lock for read-modify-write) ------------------------------

    def put(self, storage_key: str, obj: Obj, *, created: bool) -> Event:
        """Store `obj` (owned by the store from now on) with the next resourceVersion."""
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = (_namespace(obj), obj["metadata"]["name"])
            bucket = self._objects.setdefault(storage_key, {})
            prev = bucket.get(key)
            bucket[key] = obj
            return self._emit(Event(self.rv, "ADDED" if created else "MODIFIED", storage_key, obj, prev))

    def remove(self, storage_key: str, namespace: str, name: str) -> Event | None:
        with self.lock:
            old = self._objects.get(storage_key, {}).pop((namespace, name), None)
            if old is None:
                return None
            self.rv += 1
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.rv)}}
            return self._emit(Event(self.rv, "DELETED", storage_key, gone, old))

    def _emit(self, ev: Event) -> Event:
        self._history.append(ev)
        while len(self._history) > self._history_limit:
            self._floor = self._history.popleft().rv
        for w in self._watchers.get(ev.storage_key, ()):
            if w.wants(ev):
                w.queue.put(ev)
        for listener in self.listeners:
            listener(ev)
        return ev

    # --- watches ----------------------------------------------------------------------------

    def watch(self, storage_key: str, namespace: str | None, since: int | None) -> tuple[Watcher, int]:
        """Subscribe; returns the watcher and the resourceVersion its backlog ends at.

        `since` None: synthetic ADDED events for every current object first ("get state and
        start at most recent"). Otherwise the retained events after `since`, or Expired.
        """
        with self.lock:
            w = Watcher(storage_key, namespace)
            if since is None:
                for obj in self._objects.get(storage_key, {}).values():
                    if namespace is None or _namespace(obj) == namespace:
                        w.queue.put(Event(int(obj["metadata"]["resourceVersion"]), "ADDED", storage_key, obj))
            else:
                if since < self._floor:
                    raise Expired(since, self._floor + 1)
                backlog = []
                for ev in reversed(self._history):
                    if ev.rv <= since:
                        break
                    if ev.storage_key == storage_key and w.wants(ev):
                        backlog.append(ev)
                for ev in reversed(backlog):
                    w.queue.put(ev)
            self._watchers.setdefault(storage_key, set()).add(w)
            return w, self.rv

    def unwatch(self, w: Watcher) -> None:
        with self.lock:
            self._watchers.get(w.storage_key, set()).discard(w)

    def idle_rv(self, w: Watcher) -> int | None:
        """The current resourceVersion if `w` has nothing queued (a safe bookmark), else None."""
        with self.lock:
            return self.rv if w.queue.empty() else None

    def stop_watchers(self) -> None:
        with self.lock:
            for watchers in self._watchers.values():
                for w in watchers:
                    w.queue.put(STOP)

    def check_rv(self, rv: int) -> None:
        """Raise Expired when events after `rv` are no longer all retained."""
        if rv < self._floor:
            raise Expired(rv, self._floor + 1)


def _namespace(obj: Obj) -> str:
    ns: str = obj["metadata"].get("namespace") or ""
    return ns
