"""Pieces shared by the fault and Karpenter tests: manifests, an in-process scheduler, a record of
every Binding, and a job controller that recreates evicted gang members."""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from gpufleet.framework.profile import load_profiles
from gpufleet.kube import config
from gpufleet.kube.rest import Rest
from gpufleet.kube.retry import RetryPolicy
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.model import annotations as ann
from gpufleet.testing.apiserver import ApiServer
from gpufleet.testing.apiserver.store import Event

from .harness import PROFILE, install_crds, wait_for

FIXTURES = Path(__file__).parent / "fixtures"
H100 = "NVIDIA-H100-80GB-HBM3"
H100_SHAPE = {"instanceType": "p5.48xlarge", "gpuProduct": H100, "gpus": 8, "gpuMemoryMiB": 81559, "cpu": "192",
              "memory": "2048Gi", "pricePerHour": 98.32, "startSeconds": 300}
Obj = dict[str, Any]


def install_karpenter_crds(srv: ApiServer) -> None:
    for f in sorted(FIXTURES.glob("karpenter.sh_*.yaml")):
        srv.create(yaml.safe_load(f.read_text()))


def cluster(srv: ApiServer, *, karpenter: bool = True) -> None:
    install_crds(srv)
    if karpenter:
        install_karpenter_crds(srv)


def nodepool(name: str, *, shape: dict[str, Any] | None = None, instance_type: str = "p5.48xlarge",
             limits: dict[str, Any] | None = None, requirements: list[Obj] | None = None) -> Obj:
    reqs = requirements if requirements is not None else [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    pool: Obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                 "spec": {"template": {"metadata": {"labels": {"team": "ml"}},
                                       "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                                 "name": "gpu"},
                                                "requirements": reqs,
                                                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                                                "expireAfter": "720h"}},
                          "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}}}
    if shape is not None:
        pool["metadata"]["annotations"] = {"gpufleet.io/node-shape": json.dumps(shape)}
    if limits is not None:
        pool["spec"]["limits"] = limits
    return pool


def pod(name: str, limits: dict[str, Any], *, group: str | None = None, tolerate_gpu: bool = True,
        namespace: str = "default") -> Obj:
    labels = {"app": "test"}
    if group:
        labels["scheduling.x-k8s.io/pod-group"] = group
    spec: Obj = {"schedulerName": "gpufleet",
                 "containers": [{"name": "c", "image": "train", "resources": {"limits": limits,
                                                                              "requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if tolerate_gpu:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec}


def podgroup(name: str, min_member: int, namespace: str = "default") -> Obj:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min_member}}


def condition(p: Obj) -> Obj:
    return next((c for c in (p.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"), {})


def assignment(p: Obj) -> ann.GpuAssignment | None:
    text = (p["metadata"].get("annotations") or {}).get(ann.ASSIGNMENT_ANNOTATION)
    return ann.decode_assignment(text) if text else None


@contextmanager
def scheduler(srv: ApiServer, tmp_path: Path, **settings: Any) -> Iterator[SchedulerService]:
    """The live scheduler in this process (a thread), against `srv`, with test-friendly timings."""
    kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
    rest = Rest(config.from_kubeconfig(kubeconfig), timeout_s=5.0)
    profile = load_profiles(PROFILE.read_text(), str(PROFILE))[0]
    defaults: dict[str, Any] = {"qps": 0, "resync_s": 0.5, "metrics_interval_s": 0.2,
                                "retry": RetryPolicy(attempts=3, first_delay_s=0.05, budget_s=1.0)}
    service = SchedulerService(rest, profile, ServiceSettings(**{**defaults, **settings}))
    thread = threading.Thread(target=service.run, name="scheduler-under-test", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(10)
        service.shutdown()
        rest.close()


class Bindings:
    """Every Binding the server accepted: (pod name, node, assignment), in order."""

    def __init__(self, srv: ApiServer) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, ann.GpuAssignment | None]] = []
        original = srv.api.bind

        def bind(namespace: str, name: str, binding: Any) -> Obj:
            result = original(namespace, name, binding)
            text = ((binding.get("metadata") or {}).get("annotations") or {}).get(ann.ASSIGNMENT_ANNOTATION)
            with self.lock:
                self.seen.append((name, binding["target"]["name"], ann.decode_assignment(text) if text else None))
            return result
        srv.api.bind = bind  # type: ignore[method-assign]

    def all(self) -> list[tuple[str, str, ann.GpuAssignment | None]]:
        with self.lock:
            return list(self.seen)


class JobController:
    """Recreates each deleted pod of a gang under a new name, as a job controller restarts a
    failed job (the PodGroup stays). Pods it recreated are named `<base>-r<n>`."""

    def __init__(self, srv: ApiServer, label: str = "app=test") -> None:
        self.srv = srv
        self.key, self.value = label.split("=")
        self.recreated: list[tuple[str, str]] = []
        """(deleted pod, its replacement), in order."""
        self._queue: list[Obj] = []
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="job-controller", daemon=True)
        srv.store.listeners.append(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.storage_key == "pods" and ev.type == "DELETED" \
                and (ev.obj["metadata"].get("labels") or {}).get(self.key) == self.value:
            with self._cv:
                self._queue.append(ev.obj)
                self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                old = self._queue.pop(0)
            name = old["metadata"]["name"]
            base, _, n = name.partition("-r")
            fresh = {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{base}-r{int(n or 0) + 1}", "namespace": old["metadata"]["namespace"],
                                  "labels": dict(old["metadata"].get("labels") or {})},
                     "spec": {k: v for k, v in old["spec"].items() if k not in ("nodeName",)}}
            try:
                self.srv.create(fresh)
                with self._cv:
                    self.recreated.append((name, fresh["metadata"]["name"]))
            except Exception:  # noqa: BLE001 (a test helper: the test sees the pod missing)
                logging.getLogger(__name__).exception("job controller: cannot recreate %s", name)

    def recreated_from(self) -> list[str]:
        """The deleted pods recreated so far."""
        with self._cv:
            return [old for old, _ in self.recreated]

    def __enter__(self) -> JobController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(5)


def events(srv: ApiServer, reason: str) -> list[Obj]:
    return [e for e in srv.list("events") if e.get("reason") == reason]


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> float:
    return wait_for(cond, timeout_s, what, interval_s=0.05)
