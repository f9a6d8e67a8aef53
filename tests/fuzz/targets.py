"""The fuzz targets: each parser of outside input, called and its outcome classified.

Shared by the Hypothesis tests beside this file (structured, near-valid inputs) and by
`hack/fuzz.py` (atheris, coverage-guided, on bytes). For every target an input either

- is accepted (the parser returns a value), or
- is rejected with the parser's documented user-facing error, whose message is one line
  (`str.splitlines()` gives one line: no `\\n`, `\\r`, `\\u2028`, ...) and names where the
  problem is, as each target's `names_field` defines it;

anything else is a `Finding`: another exception (a crash: the CLI would print a traceback, the
scheduler or the agent would fail the call or the watch), a run longer than `HANG_S` (a hang),
or an error message that is several lines or names no field.
"""

from __future__ import annotations

import atexit
import json
import re
import resource
import shutil
import signal
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from gpufleet.model import ModelError

HANG_S = 5.0
"""An input that takes longer than this is a hang: the biggest valid seed parses in 0.1 s."""

COUNTS: Counter[str] = Counter()
"""Inputs each target has tried in this process (the fuzz reports print them)."""
OUTCOMES: Counter[tuple[str, str]] = Counter()
"""(target, accepted | rejected) counts."""

_SCRATCH = Path(tempfile.mkdtemp(prefix="gpufleet-fuzz-"))
atexit.register(shutil.rmtree, _SCRATCH, True)


class Finding(AssertionError):
    """A parser bug the fuzzer found: a crash, a hang, or a rejection that is not one clear line."""


class Hang(Finding):
    pass


MEMORY_BYTES = 2 * 2**30
"""More address space than this for one input is a finding too (a MemoryError, not a swapping machine)."""


@contextmanager
def time_limit(seconds: float = HANG_S) -> Iterator[None]:
    """Raise `Hang` in the main thread if the body runs longer than `seconds` (SIGALRM), and
    make it fail with MemoryError past `MEMORY_BYTES` more address space: a hang inside C code
    (building a billion objects, a huge int) never gets to the signal handler."""
    def expire(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    memory = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + MEMORY_BYTES, memory[1]))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, memory)


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def one_line(message: str) -> bool:
    return len(message.splitlines()) == 1


def classify(target: str, call: Callable[[], object], errors: tuple[type[BaseException], ...],
             names_field: Callable[[BaseException], bool]) -> str:
    """Run `call` under the hang limit: "accepted", "rejected", or raise `Finding`."""
    COUNTS[target] += 1
    try:
        with time_limit():
            call()
    except errors as exc:
        message = str(exc)
        if not one_line(message):
            raise Finding(f"{target}: the error is not one line: {message!r}") from exc
        if not names_field(exc):
            raise Finding(f"{target}: the error names no field: {message!r}") from exc
        OUTCOMES[target, "rejected"] += 1
        return "rejected"
    OUTCOMES[target, "accepted"] += 1
    return "accepted"


def scratch_file(name: str, data: bytes) -> Path:
    path = _SCRATCH / name
    path.write_bytes(data)
    return path


def where_of(exc: BaseException) -> str:
    return exc.where if isinstance(exc, ModelError) else ""


# -- trace rows ---------------------------------------------------------------------------

def check_openb(data: bytes) -> str:
    """Both openb readers on the same file: the header decides which one accepts it."""
    from gpufleet.sim.traces import openb
    path = scratch_file("openb.csv", data)
    columns = {*openb.NODE_COLUMNS, *openb.POD_COLUMNS}

    def names(exc: BaseException) -> bool:
        # `<file>:<line>: <column>` (or `header`, or `field <n>` for an extra field); the bare
        # `<file>:<line>` only for bytes that are not UTF-8 (the place is the field).
        m = re.fullmatch(rf"{re.escape(str(path))}:(\d+)(?:: (.+))?", where_of(exc))
        if m is None:
            return False
        field = m[2]
        return (field in columns or field == "header" or re.fullmatch(r"field \d+", field or "") is not None
                or (field is None and "not UTF-8" in str(exc)))
    first = classify("openb", lambda: openb.read_nodes(path), (ModelError,), names)
    second = classify("openb", lambda: openb.read_pods(path), (ModelError,), names)
    return "accepted" if "accepted" in (first, second) else "rejected"


_THROUGHPUTS: Any = None


def philly_throughputs() -> Any:
    """Gavel's table from the trace directory when there is one, else a small table of the same shape."""
    global _THROUGHPUTS
    if _THROUGHPUTS is None:
        from gpufleet.sim.traces import TraceDirError, philly, trace_dir
        try:
            _THROUGHPUTS = philly.read_throughputs(trace_dir() / philly.SUBDIR / philly.THROUGHPUTS)
        except (TraceDirError, FileNotFoundError):
            _THROUGHPUTS = {"v100": {("ResNet-18 (batch size 16)", 1): 10.0, ("ResNet-18 (batch size 16)", 4): 35.0,
                                     ("LM (batch size 5)", 1): 3.0}}
    return _THROUGHPUTS


def check_philly_trace(data: bytes) -> str:
    from gpufleet.sim.traces import philly
    path = scratch_file("vc0.trace", data)

    def names(exc: BaseException) -> bool:
        m = re.fullmatch(rf"{re.escape(str(path))}:(\d+)(?:: (.+))?", where_of(exc))
        return m is not None and (m[2] in philly.FIELDS or re.fullmatch(r"field \d+", m[2] or "") is not None
                                  or (m[2] is None and "not UTF-8" in str(exc)))
    return classify("philly-trace", lambda: philly.read_trace(path, philly_throughputs()), (ModelError,), names)


def check_philly_json(data: bytes) -> str:
    """Gavel's throughput table and cluster spec (JSON) from the same bytes."""
    from gpufleet.sim.traces import philly
    path = scratch_file("philly.json", data)

    def names(exc: BaseException) -> bool:
        # the file, with the line of a syntax error or the key (GPU type and job key, spec and
        # GPU type); the file alone when the document's shape is wrong as a whole.
        return where_of(exc).startswith(str(path))
    first = classify("philly-json", lambda: philly.read_throughputs(path), (ModelError,), names)
    second = classify("philly-json", lambda: philly.cluster_nodes(philly.read_cluster_spec(path)), (ModelError,), names)
    return "accepted" if "accepted" in (first, second) else "rejected"


# -- YAML documents -------------------------------------------------------------------------

def check_scenario(data: bytes) -> str:
    from gpufleet.sim.traces import scenario
    path = scratch_file("scenario.yaml", data)

    def names(exc: BaseException) -> bool:
        # `<file>:<line>: <key path>` (`jobs[2].resources.limits.cpu`, `(document)` for the
        # root); `<file>:<line>` alone for YAML syntax and encoding errors, whose line is the place.
        m = re.fullmatch(rf"{re.escape(str(path))}:(\d+)(?:: (.+))?", where_of(exc))
        return m is not None and (m[2] is not None or isinstance(exc, ModelError) and exc.problem.startswith(
            ("invalid YAML", "is not UTF-8", "the file holds no YAML")))
    return classify("scenario", lambda: scenario.load(path), (ModelError,), names)


def check_profile(text: str) -> str:
    """`load_profiles`, then `build_profile` of each profile it accepts (what the CLI does next)."""
    from gpufleet.framework import profile

    def load_and_build() -> None:
        for settings in profile.load_profiles(text, "profile"):
            profile.build_profile(settings)

    def names(exc: BaseException) -> bool:
        # `profile:<line>:<column>: not valid YAML`, or `profile: <key path>: ...` (`profiles[0].plugins.
        # score.enabled[1].weight`); whole-document problems name `profile` and the key they lack.
        return re.match(r"profile(:\d+:\d+: not valid YAML: |: (profiles\S*: |[a-z]))", str(exc)) is not None \
            or re.match(r"(filter|score) \S+: ", str(exc)) is not None
    return classify("profile", load_and_build, (profile.ProfileError,), names)


_INVENTORIES: list[Any] = []


def agent_inventories() -> list[Any]:
    """Inventories of the shipped fake GPU nodes: whole GPUs with NVLink, and MIG."""
    if not _INVENTORIES:
        from gpufleet.agent import fake
        from gpufleet.agent.inventory import inventory
        for name in ("h100-sxm-8", "a100-mig"):
            backend = fake.load_fixture(name)
            _INVENTORIES.append(inventory(backend.system(), backend.devices()))
    return _INVENTORIES


def check_agent_config(text: str) -> str:
    """NVIDIA's device-plugin config as the agent reads it, then the resources it would advertise."""
    from gpufleet.agent import configsource
    from gpufleet.agent.config import ConfigError
    from gpufleet.agent.plan import PlanError, plan_resources

    def load_and_plan() -> None:
        config = configsource.load_text(text, "node.yaml")
        for inv in agent_inventories():
            try:
                plan_resources(inv, config)
            except PlanError as exc:
                if not re.match(r"config: \S", exc.where):  # `config: sharing resource nvidia.com/gpu`
                    raise Finding(f"agent-config: the plan error names no field: {exc}") from exc

    def names(exc: BaseException) -> bool:
        # `config node.yaml: <key path>` (`sharing.mps.resources[0].replicas`), or `config node.yaml`
        # with "is not valid YAML: line L, column C" / "must be a mapping" for the document.
        where, problem = where_of(exc), exc.problem if isinstance(exc, ModelError) else ""
        return where.startswith("config node.yaml: ") or (
            where == "config node.yaml" and re.match(r"is not valid YAML: (line \d+, column \d+: )?", problem)
            is not None)
    return classify("agent-config", load_and_plan, (ConfigError,), names)


# -- objects from the API server -------------------------------------------------------------

def check_api_object(obj: dict[str, Any]) -> str:
    """One object as the scheduler reads it from a watch: a Pod (pending, or bound with an
    assignment), a Node, a Queue or a PodGroup, chosen by `kind`."""
    from gpufleet.kube import translate
    kind = obj.get("kind")
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    name, ns = str(meta.get("name", "")), str(meta.get("namespace") or "default")
    if kind == "Pod":
        node_meta = obj.get("node", {}).get("metadata", {}) if isinstance(obj.get("node"), dict) else {}
        prefixes: tuple[str, ...] = (f"pod {ns}/{name}: ", "annotation gpufleet.io/gpu-assignment",
                                     f"node {node_meta.get('name', '')}: ", "annotation gpufleet.io/gpu-inventory")

        def call() -> None:
            spec = translate.pod_spec(obj)
            node = obj.get("node")  # the node the pod is bound to, for `placement`
            if isinstance(node, dict):
                translate.placement(obj, translate.node_info(node), spec)
    elif kind == "Node":
        prefixes = (f"node {name}: ", "annotation gpufleet.io/gpu-inventory")

        def call() -> None:
            translate.node_info(obj)
    elif kind == "Queue":
        prefixes = (f"queue {name}: ", "queue: ") if name else ("queue: ", "queue ")

        def call() -> None:
            translate.queue(obj)
    else:
        prefixes = (f"podgroup {ns}/{name}: ",)

        def call() -> None:
            translate.pod_group(obj)

    def names(exc: BaseException) -> bool:
        # the object (`pod ns/name`, `node name`, `queue name`, `podgroup ns/name`) and the field
        # (`containers[0]: resources.cpu`, `spec.taints[1].effect`, ...), or the annotation and its field.
        where = where_of(exc)
        return where.startswith(prefixes) or (f"{where}: ".startswith(prefixes) and where != "")
    label = {"Pod": "api-pod", "Node": "api-node"}.get(str(kind), "api-queue-podgroup")
    return classify(label, call, (ModelError,), names)


_QTY = (str, int)
"""A quantity: int-or-string in the CRDs; the API server writes those of built-in objects as strings."""
_MAP = {str: str}
_CONTAINER = {"name": str, "resources": {"requests": {str: _QTY}, "limits": {str: _QTY}}}
_META = {"name": str, "namespace": str, "uid": str, "creationTimestamp": str, "labels": _MAP, "annotations": _MAP}
_NODE = {"metadata": _META, "spec": {"taints": [{"key": str, "value": str, "effect": str}], "unschedulable": bool},
         "status": {"allocatable": {str: _QTY}, "capacity": {str: _QTY}}}
_SCHEMAS: dict[str, Any] = {
    "Pod": {"metadata": _META, "node": _NODE, "status": {"phase": str, "startTime": str}, "spec": {
        "nodeName": str, "schedulerName": str, "priority": int, "schedulingGates": [{"name": str}],
        "containers": [_CONTAINER], "initContainers": [_CONTAINER], "nodeSelector": _MAP,
        "tolerations": [{"key": str, "operator": str, "value": str, "effect": str}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": str, "operator": str, "values": [str]}]}]}}}}},
    "Node": _NODE,
    "Queue": {"metadata": _META, "spec": {"parent": str, "weight": (int, float), "borrow": bool,
                                          "guaranteed": {str: _QTY}, "limit": {str: _QTY},
                                          "gpuModels": [{"model": str, "guaranteed": _QTY, "limit": _QTY}]}},
    "PodGroup": {"metadata": _META, "spec": {"minMember": int}},
}
"""The JSON types of the fields the scheduler reads, as the API server guarantees them: the
built-in types' schemas for Pods and Nodes, the CRDs' structural schemas for Queue and
PodGroup. Values are free; `null` is allowed anywhere (optional fields)."""


def schema_types(value: Any, schema: Any) -> bool:
    """Whether `value` has the JSON types of `schema`: a type or tuple of types, `{str: item}`
    for a map, `{field: schema}` for an object (other fields free), `[item]` for a list."""
    if value is None:
        return True
    if isinstance(schema, list):
        return isinstance(value, list) and all(schema_types(v, schema[0]) for v in value)
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return False
        if str in schema:
            return all(isinstance(k, str) and schema_types(v, schema[str]) for k, v in value.items())
        return all(schema_types(value.get(k), sub) for k, sub in schema.items())
    types = schema if isinstance(schema, tuple) else (schema,)
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def check_api_json(data: bytes) -> str:
    """`check_api_object` of bytes: JSON as the watch delivers it. Objects whose fields do not
    have the types the API server guarantees (`schema_types`) cannot come from it: skipped."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return "skipped"
    if not isinstance(obj, dict) or not schema_types(obj, _SCHEMAS.get(str(obj.get("kind")), _SCHEMAS["PodGroup"])):
        return "skipped"
    return check_api_object(obj)


# -- annotations ---------------------------------------------------------------------------

_RING: Any = None


def check_annotations(text: str, signature: str = "") -> str:
    """The inventory and assignment annotations, and the assignment's signature."""
    from gpufleet.model import annotations as ann
    from gpufleet.model import assignment_auth as auth
    global _RING
    if _RING is None:
        _RING = auth.KeyRing({"k1": b"k" * 32}, "k1")

    def names(exc: BaseException) -> bool:
        # `annotation gpufleet.io/gpu-assignment: <field>` (`gpus`, `mig[0]: slice`); the bare
        # annotation for a document that is not JSON, not a list or object, or has duplicates.
        return where_of(exc).startswith(("annotation gpufleet.io/gpu-assignment", "annotation gpufleet.io/gpu-inventory"))

    def verify() -> None:
        why = auth.verify(_RING, signature or text, "uid", "ns/pod", "node-1", text)
        if why not in (None, "missing", "malformed", "unknown-key", "mismatch"):
            raise Finding(f"annotations: verify gave {why!r}")
    outcomes = [classify("annotations", lambda: ann.decode_inventory(text), (ModelError,), names),
                classify("annotations", lambda: ann.decode_assignment(text), (ModelError,), names),
                classify("annotations", verify, (), names)]
    return "accepted" if "accepted" in outcomes[:2] else "rejected"


# -- the kubelet's gRPC requests ------------------------------------------------------------

@dataclass
class Aborted(Exception):
    code: Any
    details: str


class FakeContext:
    """What grpc gives a servicer: `abort` raises, as grpc's own does."""

    def abort(self, code: Any, details: str) -> None:
        raise Aborted(code, details)

    def is_active(self) -> bool:
        return False


_AGENT_CONFIGS = {
    "whole": "version: v1\n",
    "fractions": "version: v1\ngpufleet: {fractions: true}\n",
    "time-slicing": "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n",
    "mps": "version: v1\nsharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}\n",
    "mig-mixed": "version: v1\nflags: {migStrategy: mixed}\n",
}


def agent_plans() -> list[tuple[Any, Any, Any]]:
    """(plan, config, inventory) of every resource of each config on each fake node."""
    from gpufleet.agent import configsource
    from gpufleet.agent.plan import PlanError, plan_resources
    found = []
    for text in _AGENT_CONFIGS.values():
        config = configsource.load_text(text, "fuzz")
        for inv in agent_inventories():
            try:
                found += [(plan, config, inv) for plan in plan_resources(inv, config)]
            except PlanError:
                continue
    return found


_PLANS: list[tuple[Any, Any, Any]] = []


def check_kubelet(plan_index: int, request: bytes, preferred: bool, annotations: list[str]) -> str:
    """One GetPreferredAllocation or Allocate request (protobuf bytes, as the kubelet sends them)
    to the servicer of one resource, with pods on the node carrying `annotations` as assignments.

    GetPreferredAllocation must answer (at most `allocation_size` IDs, each available or
    must-include); Allocate must answer or abort with FAILED_PRECONDITION or UNAVAILABLE and a
    one-line message naming the resource, the node or the pod."""
    import threading

    import grpc  # type: ignore[import-untyped]
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    from gpufleet.agent import assignments, servicer
    from gpufleet.agent.health import HealthBoard
    from gpufleet.agent.kube import FakeNodeApi, PodView
    from gpufleet.agent.metrics import AgentMetrics
    from gpufleet.agent.v1beta1 import api_pb2
    from gpufleet.model import annotations as ann
    if not _PLANS:
        _PLANS.extend(agent_plans())
    plan, config, inv = _PLANS[plan_index % len(_PLANS)]
    try:
        message = (api_pb2.PreferredAllocationRequest if preferred else api_pb2.AllocateRequest).FromString(request)
    except DecodeError:
        return "skipped"  # grpc answers INTERNAL before any servicer code runs
    pods = [PodView("ns", f"p{i}", f"uid-{i}", "node-1", ann.SCHEDULER_NAME, created=f"{i:04d}",
                    annotations={ann.ASSIGNMENT_ANNOTATION: text}) for i, text in enumerate(annotations)]
    ctx = servicer.PluginContext("node-1", config, inv, HealthBoard(),
                                 assignments.AssignmentBook(FakeNodeApi(pods=pods), "node-1"),
                                 _metrics(AgentMetrics), lambda path: True)
    service = servicer.DevicePluginServicer(plan, ctx, threading.Event())

    def call() -> None:
        if preferred:
            response = service.GetPreferredAllocation(message, FakeContext())
            for creq, cresp in zip(message.container_requests, response.container_responses):
                ids = list(cresp.deviceIDs)
                allowed = set(creq.available_deviceIDs) | set(creq.must_include_deviceIDs)
                if len(ids) > max(creq.allocation_size, 0) or not set(ids) <= allowed:
                    raise Finding(f"kubelet: preferred {ids[:5]} for size {creq.allocation_size}")
        else:
            service.Allocate(message, FakeContext())

    def names(exc: BaseException) -> bool:
        assert isinstance(exc, Aborted)
        return exc.code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE) and (
            plan.resource in exc.details or exc.details.startswith(("pod ", "no pod bound")))
    return classify("kubelet", call, (Aborted,), names)


_METRICS: list[Any] = []


def _metrics(factory: Callable[[], Any]) -> Any:
    if not _METRICS:
        _METRICS.append(factory())
    return _METRICS[0]


def check_kubelet_bytes(data: bytes) -> str:
    """`check_kubelet` of raw bytes: first byte picks the plan and the call, the rest is the request."""
    if not data:
        return "skipped"
    return check_kubelet(data[0] >> 1, data[1:], bool(data[0] & 1), [])


# -- the dashboard --------------------------------------------------------------------------

_HANDLER: Any = None


def dashboard_handler() -> Any:
    """The dashboard's request handler over three frames, its server stopped (so /api/stream
    answers its headers and returns rather than streaming forever)."""
    global _HANDLER
    if _HANDLER is None:
        from gpufleet.testing import make_node
        from gpufleet.web.fleet import Fleet
        from gpufleet.web.server import DashboardServer, _handler
        from gpufleet.web.sources import StaticSource
        fleets = [Fleet("replay: fuzz", 60.0 * i, (make_node("a").gpus(2).build(),), ()) for i in range(3)]
        server = DashboardServer(StaticSource(fleets), port=0)
        server.httpd.server_close()
        server._stop.set()
        _HANDLER = _handler(server)
    return _HANDLER


def check_dashboard(raw: bytes) -> str:
    """One raw HTTP request to the dashboard: any answer but a 5xx; a 400's JSON error is one line
    and names the query parameter (`frame`)."""
    import io
    handler_type = dashboard_handler()
    handler = handler_type.__new__(handler_type)
    handler.rfile, handler.wfile = io.BytesIO(raw), io.BytesIO()
    handler.client_address, handler.server, handler.request = ("127.0.0.1", 0), None, None
    handler.close_connection = True

    def call() -> None:
        handler.handle_one_request()
        reply = handler.wfile.getvalue()
        if not reply:
            return  # nothing to answer (an empty request line)
        # http.server answers a request line it cannot read as HTTP/0.9: the page alone, no status line
        code = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply) or re.search(rb"Error code: (\d{3})", reply)
        if code is None and getattr(handler, "request_version", "") == "HTTP/0.9":
            return  # `GET /path` with no version: HTTP/0.9 has no status line, only the body
        if code is None:
            raise Finding(f"dashboard: no status in {reply[:80]!r} for {raw[:80]!r}")
        status = int(code[1])
        if status >= 500 and status != 501 and status != 505:  # 501/505: http.server's own for bad methods/versions
            raise Finding(f"dashboard: {status} for {raw[:80]!r}")
        if status == 400 and b"application/json" in reply and not raw.startswith(b"HEAD"):
            error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
            if not one_line(error) or "frame" not in error:
                raise Finding(f"dashboard: 400 {error!r}")
    return classify("dashboard", call, (), lambda exc: False)


# -- the table of targets -------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    name: str
    parser: str
    """module:function of the parser under test."""
    check: Callable[[bytes], str]
    """The atheris entry: bytes in, "accepted" / "rejected" / "skipped" out, or a `Finding` (or any other exception) raised."""
    seeds: Callable[[], list[bytes]]


def _text(check: Callable[[str], str]) -> Callable[[bytes], str]:
    return lambda data: check(data.decode("utf-8", "replace"))


def _annotation_bytes(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    annotation, _, signature = text.partition("\x00")
    return check_annotations(annotation, signature)


def _targets() -> list[Target]:
    from tests.fuzz import seeds
    return [
        Target("openb", "sim.traces.openb:read_nodes, read_pods", check_openb, seeds.openb),
        Target("philly-trace", "sim.traces.philly:read_trace", check_philly_trace, seeds.philly_trace),
        Target("philly-json", "sim.traces.philly:read_throughputs, read_cluster_spec", check_philly_json,
               seeds.philly_json),
        Target("scenario", "sim.traces.scenario:load", check_scenario, seeds.scenarios),
        Target("profile", "framework.profile:load_profiles, build_profile", _text(check_profile), seeds.profiles),
        Target("agent-config", "agent.configsource:load_text, agent.plan:plan_resources", _text(check_agent_config),
               seeds.agent_configs),
        Target("api-objects", "kube.translate:pod_spec, node_info, placement, queue, pod_group", check_api_json,
               seeds.api_objects),
        Target("annotations", "model.annotations:decode_inventory, decode_assignment; model.assignment_auth:verify",
               _annotation_bytes, seeds.annotation_texts),
        Target("kubelet", "agent.servicer:GetPreferredAllocation, Allocate", check_kubelet_bytes, seeds.kubelet),
        Target("dashboard", "web.server:Handler.do_GET (query parameters, paths)", check_dashboard, seeds.dashboard),
    ]


TARGETS: dict[str, Target] = {}


def targets() -> dict[str, Target]:
    if not TARGETS:
        TARGETS.update((t.name, t) for t in _targets())
    return TARGETS
