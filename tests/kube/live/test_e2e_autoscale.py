"""End to end: the scheduler (a process, `--karpenter`) with simulated Karpenter and node agents.

A gang of 8 pods of 8 GPUs fits nowhere in a cluster of two one-T4 nodes. gpufleet makes one
plan for all 8 members and creates its 8 NodeClaims once, however many cycles pass while
they launch; the simulated cloud provider turns each into an 8-GPU H100 node with the
agent's inventory; the gang is bound there. Then one GPU under the gang fails (the agent's
report, written as the agent writes it): after the grace period the whole gang is evicted,
a job controller recreates it, and it is placed again without the failed GPU, on fresh
capacity gpufleet provisions for the member that no longer fits. Every Binding the server
accepted is checked: none ever names the failed GPU after it failed.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

from gpufleet.testing.apiserver import ApiServer
from gpufleet.testing.apiserver.karpenter import SimulatedKarpenter
from gpufleet.testing.apiserver.node_faults import set_gpu_health
from gpufleet.testing.gpu_nodes import SHAPES, gpu_node

from .gpu_cluster import H100_SHAPE, Bindings, JobController, cluster, events, nodepool, pod, podgroup, wait_until
from .harness import Scheduler, create_via_api

GANG = [f"train-{k}" for k in range(8)]


def claims_created(srv: ApiServer) -> int:
    return sum(1 for r in srv.requests if r.method == "POST" and r.path.endswith("/nodeclaims") and r.status == 201)


def bound(srv: ApiServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in srv.list("pods") if p["spec"].get("nodeName")}


def test_a_gang_that_fits_nowhere_gets_one_plan_and_survives_a_gpu_fault(tmp_path: Path) -> None:
    with ApiServer(kubelet_start_delay_s=0.05) as srv:
        cluster(srv)
        t4 = next(s for s in SHAPES if s.name == "g4dn.xlarge")
        for k in range(2):
            srv.create(gpu_node(f"existing-t4-{k}", t4, random.Random(k)))
        srv.create(nodepool("h100", shape=H100_SHAPE, limits={"nvidia.com/gpu": 160}))
        srv.create(podgroup("train", 8))
        binds = Bindings(srv)
        kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
        with SimulatedKarpenter(srv, launch_delay_s=1.0) as cloud, JobController(srv) as jobs, \
                Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0", "--karpenter",
                          "--device-fault-grace", "1") as sched:
            wait_until(sched.ready, 30, "the scheduler to be ready")
            started = time.monotonic()
            create_via_api(srv, [pod(name, {"nvidia.com/gpu": 8}, group="train") for name in GANG])

            # -- one plan, NodeClaims created once ------------------------------------------
            wait_until(lambda: set(GANG) <= set(bound(srv)), 60, "the gang bound on new nodes")
            took = time.monotonic() - started
            claims = srv.list("nodeclaims")
            assert claims_created(srv) == len(claims) == 8
            assert len(re.findall(r"plan for 8 pod\(s\): add 8 node\(s\)", sched.log())) == 1
            planned = sorted(n for c in claims for n in c["metadata"]["annotations"]["gpufleet.io/planned-pods"].split())
            assert planned == sorted(f"default/{n}" for n in GANG)  # one member per 8-GPU node
            assert {p["spec"]["nodeName"] for n, p in bound(srv).items() if n in GANG} == {n for _, n in cloud.launched}
            assert sched.metric("gpufleet_schedule_attempts_total") >= 16  # several cycles saw the claims in flight

            # -- a GPU under the gang fails ---------------------------------------------------
            victim = bound(srv)["train-3"]
            failed_node = victim["spec"]["nodeName"]
            gpu_index = 2
            before = len(binds.all())
            uuid = set_gpu_health(srv, failed_node, gpu_index, False)
            failed_at = time.monotonic()
            wait_until(lambda: set(GANG) <= set(jobs.recreated_from()), 60, "the whole gang evicted and recreated")
            evicted_after = time.monotonic() - failed_at
            restarted = [f"{n}-r1" for n in GANG]
            wait_until(lambda: set(restarted) <= set(bound(srv)), 60, "the restarted gang placed again")
            replaced_after = time.monotonic() - failed_at
            log = sched.log()
            assert f"GPU {uuid} on node {failed_node}: unhealthy (xid-79) for" in log
            assert sched.metric("gpufleet_fault_evictions_total") == 8

        after = binds.all()[before:]
        assert len(after) == 8 and all(a is not None and uuid not in a.gpus for _, _, a in after)
        assert failed_node not in {node for _, node, _ in after}  # 7 healthy GPUs there: no 8-GPU member fits
        assert {e["involvedObject"]["name"] for e in events(srv, "GpuFault")} == set(GANG)
        extra = claims_created(srv) - 8
        assert extra >= 1  # fresh capacity for the member that lost its node
        print(f"\ngang of 8 x 8 GPUs: 8 NodeClaims in one plan, bound {took:.1f} s after creation "
              f"(launch delay 1 s); GPU fault -> whole gang evicted after {evicted_after:.2f} s (grace 1 s), "
              f"placed again after {replaced_after:.1f} s with {extra} more NodeClaim(s)")
