"""One watch stream: events from the store, filtered, encoded, with bookmarks and timeouts.

The semantics are the watch cache's:

* `resourceVersion` unset or "0": synthetic ADDED events for the current objects, then
  changes; N: the retained changes after N, then live ones; N older than the history:
  one ERROR event carrying a 410 `Expired` Status (HTTP 200), and the stream ends.
* selectors see transitions: an object that starts matching arrives as ADDED, one that
  stops matching as DELETED (its last matching state, at the new resourceVersion).
* `allowWatchBookmarks`: a BOOKMARK (an object with only `metadata.resourceVersion`) when
  the stream has been idle for the bookmark interval, and, with `sendInitialEvents=true`,
  one annotated `k8s.io/initial-events-end` after the initial events.
* `timeoutSeconds`: the stream ends cleanly after that long.
"""

from __future__ import annotations

import json
import queue
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from gpufleet.testing.apiserver import tables
from gpufleet.testing.apiserver.errors import status_body
from gpufleet.testing.apiserver.resources import ResourceType
from gpufleet.testing.apiserver.store import STOP, Event, Expired

if TYPE_CHECKING:
    from gpufleet.testing.apiserver.api import Api

Obj = dict[str, Any]
POLL_S = 0.25
"""How often an idle stream checks for server shutdown, bookmarks and its timeout."""


@dataclass
class WatchOptions:
    since: int | None
    keep: Callable[[Obj], bool]
    bookmarks: bool = False
    bookmark_interval_s: float = 5.0
    timeout_s: float | None = None
    initial_events_end: bool = False
    table: bool = False
    include: str = "Metadata"


def stream(api: Api, rt: ResourceType, namespace: str | None, opts: WatchOptions,
           stopping: Callable[[], bool]) -> Iterator[bytes]:
    try:
        watcher, start_rv = api.store.watch(rt.storage_key, namespace, opts.since)
    except Expired as exc:
        yield _line("ERROR", status_body(410, str(exc), "Expired"))
        return
    try:
        yield from _follow(api, rt, opts, watcher, start_rv, stopping)
    finally:
        api.store.unwatch(watcher)


def _follow(api: Api, rt: ResourceType, opts: WatchOptions, watcher: Any, start_rv: int,
            stopping: Callable[[], bool]) -> Iterator[bytes]:
    deadline = time.monotonic() + opts.timeout_s if opts.timeout_s else None
    initial_pending = opts.since is None and opts.initial_events_end and opts.bookmarks
    last_sent = time.monotonic()
    while not stopping():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        if initial_pending and watcher.queue.empty():
            initial_pending = False
            yield _bookmark(rt, start_rv, initial_end=True)
            last_sent = now
        try:
            ev = watcher.queue.get(timeout=POLL_S)
        except queue.Empty:
            if opts.bookmarks and time.monotonic() - last_sent >= opts.bookmark_interval_s:
                rv = api.store.idle_rv(watcher)
                if rv is not None:
                    yield _bookmark(rt, rv)
                    last_sent = time.monotonic()
            continue
        if ev is STOP:
            return
        out = _translate(ev, opts.keep)
        if out is not None:
            yield _encode(api, rt, ev, out[0], out[1], opts)
            last_sent = time.monotonic()


def _translate(ev: Event, keep: Callable[[Obj], bool]) -> tuple[str, Obj] | None:
    """The event this watcher sends for a store event, given its selectors; None = nothing."""
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if keep(ev.obj) else None
    matches_now = keep(ev.obj)
    matched_before = ev.type == "MODIFIED" and ev.prev is not None and keep(ev.prev)
    if matches_now:
        return ("MODIFIED" if matched_before else "ADDED"), ev.obj
    if matched_before and ev.prev is not None:
        # leaving the selection: its last matching state, at the resourceVersion of the change
        rv = ev.obj["metadata"]["resourceVersion"]
        return "DELETED", {**ev.prev, "metadata": {**ev.prev["metadata"], "resourceVersion": rv}}
    return None


def _encode(api: Api, rt: ResourceType, ev: Event, kind: str, stored: Obj, opts: WatchOptions) -> bytes:
    view = api.view(rt, stored)
    if opts.table:
        return _line(kind, tables.table(rt, [view], [stored], view["metadata"]["resourceVersion"], opts.include))
    cacheable = stored is ev.obj
    key = f"{rt.api_version} {kind}"
    if cacheable and key in ev.encoded:
        return ev.encoded[key]
    data = _line(kind, view)
    if cacheable:
        ev.encoded[key] = data
    return data


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
    metadata: Obj = {"resourceVersion": str(rv)}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return _line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata})


def _line(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
