"""Simulated kubelets: bound pods start running and, when told to, finish.

A pod bound to a node that exists (through `pods/binding`, or created with `spec.nodeName`)
becomes Running `start_delay_s` after the kubelet sees it: phase, startTime, hostIP/podIP,
the Initialized/ContainersReady/Ready conditions and one running containerStatus per
container. With the annotation `gpufleet.io/sim-duration-seconds: "<s>"` it then finishes
after that many seconds: Succeeded, or Failed when `gpufleet.io/sim-exit-code` is non-zero.
Without the annotation it runs until deleted. Status writes go through the store like any
client's, so watchers see them as MODIFIED events.

The kubelet reacts to store events through a listener (called under the store lock, so it
only queues work) and does the work on its own thread; it never blocks a writer.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from gpufleet.testing.apiserver import meta
from gpufleet.testing.apiserver.pods import set_condition
from gpufleet.testing.apiserver.store import Event, Store
from gpufleet.testing.apiserver.timers import Timers

DURATION_ANNOTATION = "gpufleet.io/sim-duration-seconds"
EXIT_CODE_ANNOTATION = "gpufleet.io/sim-exit-code"
Obj = dict[str, Any]


class Kubelets:
    def __init__(self, store: Store, *, start_delay_s: float = 0.05) -> None:
        self._store = store
        self._start_delay_s = start_delay_s
        self._timers = Timers("gpufleet-test-kubelets")
        self._started: set[str] = set()
        self._ips = itertools.count(1)
        store.listeners.append(self._on_event)

    def start(self) -> None:
        self._timers.start()

    def stop(self) -> None:
        self._timers.stop()

    def _on_event(self, ev: Event) -> None:
        if ev.storage_key != "pods":
            return
        m = ev.obj["metadata"]
        uid = m["uid"]
        if ev.type == "DELETED":
            self._started.discard(uid)
            return
        if uid in self._started or not ev.obj["spec"].get("nodeName"):
            return
        if (ev.obj.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        self._started.add(uid)
        self._schedule(self._start_delay_s, "start", m.get("namespace", ""), m["name"], uid)

    def _schedule(self, delay_s: float, action: str, namespace: str, name: str, uid: str) -> None:
        self._timers.after(delay_s, lambda: self._act(action, namespace, name, uid))

    def _act(self, action: str, namespace: str, name: str, uid: str) -> None:
        with self._store.lock:  # on the timer thread: writers call _on_event under this lock
            pod = self._store.get("pods", namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            if action == "start":
                self._start(pod)
            else:
                self._finish(pod)

    def _start(self, pod: Obj) -> None:
        node = self._store.get("nodes", "", pod["spec"]["nodeName"])
        if node is None or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        now = meta.now_rfc3339()
        running = copy.deepcopy(pod)
        status = running.setdefault("status", {})
        host_ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), "10.0.0.1")
        n = next(self._ips)
        pod_ip = f"172.16.{n // 250 % 250}.{n % 250 + 1}"
        status.update({"phase": "Running", "startTime": now, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                       "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]})
        for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"):
            set_condition(status, {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
        status["containerStatuses"] = [
            {"name": c["name"], "image": c.get("image", ""), "imageID": f"docker.io/library/{c.get('image', '')}",
             "containerID": f"containerd://{pod['metadata']['uid'].replace('-', '')}{i}", "ready": True,
             "started": True, "restartCount": 0, "state": {"running": {"startedAt": now}}}
            for i, c in enumerate(running["spec"].get("containers") or [])]
        self._store.put("pods", running, created=False)
        duration = _float((pod["metadata"].get("annotations") or {}).get(DURATION_ANNOTATION))
        if duration is not None:
            m = pod["metadata"]
            self._schedule(duration, "finish", m.get("namespace", ""), m["name"], m["uid"])

    def _finish(self, pod: Obj) -> None:
        if (pod.get("status") or {}).get("phase") != "Running":
            return
        code = int(_float((pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION)) or 0)
        now = meta.now_rfc3339()
        done = copy.deepcopy(pod)
        status = done["status"]
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        reason = "PodCompleted" if code == 0 else "PodFailed"
        for kind in ("ContainersReady", "Ready"):
            set_condition(status, {"type": kind, "status": "False", "reason": reason, "lastProbeTime": None,
                                   "lastTransitionTime": now})
        for c in status.get("containerStatuses") or []:
            started = ((c.get("state") or {}).get("running") or {}).get("startedAt", now)
            c.update({"ready": False, "started": False, "state": {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": started,
                "finishedAt": now, "containerID": c.get("containerID", "")}}})
        self._store.put("pods", done, created=False)


def _float(text: Any) -> float | None:
    try:
        return float(text) if text is not None else None
    except (TypeError, ValueError):
        return None
