"""The dashboard served by `gpufleet scheduler --dashboard-port` on the real control plane, read
in headless Chromium: 200 KWOK GPU nodes in two pools, whole-GPU and fractional pods in two
namespaces and two queues, pods that cannot fit. Every number the page shows is held against
what the API server says (the pods' bindings and GPU assignments, the nodes' GPU inventories,
the Queue status), unfiltered and filtered; a new pod and a GPU fault reach the open page
without a reload. The screenshot in the README is the one this test takes."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

from gpufleet.model import annotations as ann
from gpufleet.testing.cluster import Cluster
from gpufleet.testing.gpu_nodes import gpu_nodes
from gpufleet.web.fleet import reason_group

from web.browser import chromium, open_page, screenshot, text, wait_js

from .cluster_kit import (Scheduler, agent_kubeconfig, bound, gpufleet_pods, install_gpufleet,
                          scheduler_kubeconfig, wait_for)
from .node_faults import set_gpu_health

Obj = dict[str, Any]
NODES = 200


def pod(name: str, namespace: str, queue: str, limits: dict[str, int]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"gpufleet.io/queue": queue}},
            "spec": {"schedulerName": "gpufleet", "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {k: str(v) for k, v in limits.items()}}}]}}


def queue(name: str, spec: Obj) -> Obj:
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def inventory(node: Obj) -> tuple[ann.InventoryGpu, ...]:
    return ann.decode_inventory(node["metadata"]["annotations"][ann.INVENTORY_ANNOTATION])


def truth(c: Cluster, *, pool: str | None = None, namespace: str | None = None) -> dict[str, str]:
    """The dashboard's cards, computed from the API server's objects alone."""
    nodes = [n for n in c.admin.list("nodes") if pool is None or n["metadata"]["labels"].get("karpenter.sh/nodepool") == pool]
    names = {n["metadata"]["name"] for n in nodes}
    pods = [p for p in c.admin.list("pods") if (p["status"].get("phase") not in ("Succeeded", "Failed"))
            and not p["metadata"].get("deletionTimestamp")]
    on = [p for p in pods if p["spec"].get("nodeName") in names and (namespace is None or p["metadata"]["namespace"] == namespace)]
    held: dict[tuple[str, str], int] = {}
    for p in on:
        text_ = (p["metadata"].get("annotations") or {}).get(ann.ASSIGNMENT_ANNOTATION)
        if text_:
            a = ann.decode_assignment(text_)
            for uuid in a.gpus:
                held[(a.node, uuid)] = held.get((a.node, uuid), 0) + a.milli
    gpus = [(n, g) for n in nodes for g in inventory(n)]
    whole = [(n, g) for n, g in gpus if not g.mig]
    allocated = sum(held.get((n["metadata"]["name"], g.uuid), 0) for n, g in whole) / 1000
    pending = [p for p in pods if p["spec"].get("schedulerName") == "gpufleet" and not p["spec"].get("nodeName")
               and (namespace is None or p["metadata"]["namespace"] == namespace)]
    free = sum(1 for n, g in whole if g.healthy and not held.get((n["metadata"]["name"], g.uuid)))
    return {"sum-nodes": str(len(nodes)), "sum-gpus": str(len(gpus)), "sum-allocated": f"{allocated:g}",
            "sum-unhealthy": str(sum(1 for _, g in gpus if not g.healthy)), "sum-running": str(len(on)),
            "sum-pending": str(len(pending)), **({} if namespace else {"sum-free": str(free)})}


def cards(page: Any, keys: dict[str, str]) -> dict[str, str]:
    return {k: text(page, k) for k in keys}


def test_the_dashboard_shows_what_the_api_server_holds(tmp_path: Path) -> None:
    rng = random.Random(0)
    nodes = gpu_nodes(NODES, seed=0)
    for i, n in enumerate(nodes):
        n["metadata"]["labels"]["karpenter.sh/nodepool"] = "train" if i % 2 == 0 else "infer"
    with Cluster(tmp_path / "cluster") as c:
        install_gpufleet(c)
        c.admin.create_all(nodes)
        c.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        c.admin.create_all([queue("team-a", {"guaranteed": {"nvidia.com/gpu": 64}}),
                            queue("team-b", {"limit": {"nvidia.com/gpu": 12}})])
        work = ([pod(f"train-{i}", "default", "team-a", {"nvidia.com/gpu": rng.choice((1, 2, 4, 8))}) for i in range(150)]
                + [pod(f"infer-{i}", "ml", "team-b", {"gpufleet.io/gpu-milli": rng.choice((250, 500))}) for i in range(60)]
                + [pod(f"huge-{i}", "default", "team-a", {"nvidia.com/gpu": 16}) for i in range(5)])
        kubeconfig = scheduler_kubeconfig(c, tmp_path / "scheduler.kubeconfig")
        with Scheduler(kubeconfig, tmp_path / "scheduler.log", "--qps", "0", "--dashboard-port", "0",
                       "--device-fault-grace", "2") as s:
            wait_for(s.ready, 60, "the scheduler")
            match = re.search(r"dashboard (http://\S+)", s.log())
            assert match, s.log()[-2000:]
            url = match.group(1)
            c.admin.create_all(work)

            def decided() -> bool:
                pods = gpufleet_pods(c.admin)
                return len(pods) == len(work) and all(
                    p["spec"].get("nodeName") or any(x.get("type") == "PodScheduled" and x.get("status") == "False"
                                                     for x in p["status"].get("conditions", [])) for p in pods)
            wait_for(decided, 120, "every pod bound or told why not")
            with chromium() as browser:
                page = open_page(browser, url, width=1400, height=1100)

                def agrees(**filters: str) -> bool:
                    want = truth(c, **filters)  # type: ignore[arg-type]
                    return cards(page, want) == want
                # the scheduler's status writes and the page's 1 s refresh settle within seconds
                wait_for(agrees, 30, "the page's cards equal the API's")
                want = truth(c)
                assert int(want["sum-pending"]) >= 5 and float(want["sum-allocated"]) > 100, want
                assert text(page, "sum-ready") == str(NODES)

                # why the huge pods wait: the page groups them under their condition's message
                huge = next(p for p in gpufleet_pods(c.admin) if p["metadata"]["name"] == "huge-0")
                message = next(x["message"] for x in huge["status"]["conditions"] if x["type"] == "PodScheduled")
                assert reason_group(message) in page.locator("#pending").inner_text()

                # the queues as the scheduler writes their status (at most every resync, 5 s)
                def queue_agrees() -> bool:
                    status = c.admin.get("queues", "team-a").get("status") or {}
                    row = next((r for r in page.locator("#queues tbody tr").all_inner_texts() if r.startswith("team-a\t")),
                               None)
                    if row is None or not {"allocated", "fairShare", "pending"} <= status.keys():
                        return False  # not on the page, or not written, yet: a loaded machine's CI took a moment
                    cells = row.split("\t")
                    return (cells[2], cells[3], cells[6]) == (
                        f"{int(status['allocated']['nvidia.com/gpu'].rstrip('m')) / 1000:g}",
                        f"{int(status['fairShare']['nvidia.com/gpu'].rstrip('m')) / 1000:g}", str(status["pending"]))
                wait_for(queue_agrees, 20, "team-a's row equal to its status")

                # filters: a pool, then a namespace
                page.select_option("#f-pool", "infer")
                want = truth(c, pool="infer")
                assert cards(page, want) == want and int(want["sum-nodes"]) < NODES
                page.select_option("#f-pool", "")
                page.select_option("#f-namespace", "ml")
                want = truth(c, namespace="ml")
                assert cards(page, want) == want and float(want["sum-allocated"]) > 0
                page.select_option("#f-namespace", "")

                # a node and its holders
                name, node = next(iter(sorted(bound(gpufleet_pods(c.admin)).items())))
                page.locator("#node-name").fill(node)
                page.keyboard.press("Enter")
                assert name in page.locator("#node").inner_text()

                # live: a new pod, then a GPU fault, reach the open page without a reload
                renders = page.evaluate("() => window.gpufleetDashboard.renders")
                before = int(text(page, "sum-pending")) + int(text(page, "sum-running"))
                created = time.monotonic()
                c.admin.create(pod("late", "ml", "team-b", {"gpufleet.io/gpu-milli": 250}))
                wait_js(page, f"() => Number(document.getElementById('sum-pending').textContent) + "
                              f"Number(document.getElementById('sum-running').textContent) === {before + 1}", 15)
                print(f"a new pod reached the page in {time.monotonic() - created:.2f} s")
                assert page.evaluate("() => window.gpufleetDashboard.renders") > renders
                victim = next(p for p in gpufleet_pods(c.admin) if p["metadata"]["name"].startswith("train-")
                              and p["spec"].get("nodeName"))
                a = ann.decode_assignment(victim["metadata"]["annotations"][ann.ASSIGNMENT_ANNOTATION])
                index = next(g.index for g in inventory(c.admin.get("nodes", a.node)) if g.uuid == a.gpus[0])
                set_gpu_health(c, agent_kubeconfig(c, tmp_path / "agent.kubeconfig"), a.node, index, False)
                wait_js(page, "() => document.getElementById('sum-unhealthy').textContent === '1'", 15)
                victim_name = f"default/{victim['metadata']['name']}"
                wait_for(lambda: victim_name in page.locator("#events").inner_text(), 30,
                         "the fault's eviction listed on the page")
                assert "GpuFault" in page.locator("#events").inner_text()
                wait_for(agrees, 30, "the cards equal the API's after the fault")
                page.locator("#node-name").fill("")
                page.keyboard.press("Enter")
                page.locator("#pending details").first.click()
                shot = screenshot(page, "dashboard-live-200-nodes")
                assert shot.stat().st_size > 10_000
            assert s.terminate() == 0, s.log()[-3000:]
