"""The live scheduler's bench needs >= 500 binds/s through this server; check it with margin."""

from __future__ import annotations

import http.client
import json
import threading
import time

from gpufleet.testing.apiserver import ApiServer, gpu_nodes

PODS = 1000
THREADS = 4


def test_binds_through_http_exceed_500_per_second_with_a_watch_and_kubelets_running() -> None:
    with ApiServer(kubelet=True) as srv:
        for node in gpu_nodes(50, seed=1):
            srv.create(node)
        for i in range(PODS):
            srv.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
                        "spec": {"schedulerName": "gpufleet", "containers": [{"name": "m", "image": "x"}]}})
        watch = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        watch.request("GET", "/api/v1/pods?watch=true")
        stream = watch.getresponse()
        events = []

        def follow() -> None:
            try:
                for line in iter(stream.readline, b""):
                    events.append(line)
            except (OSError, ValueError, http.client.HTTPException):
                pass  # the watch is closed when the test ends
        reader = threading.Thread(target=follow, daemon=True)
        reader.start()

        def bind(first: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            for i in range(first, PODS, THREADS):
                body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"p{i}"},
                        "target": {"kind": "Node", "name": f"gpu-node-{i % 50:03d}"}}
                conn.request("POST", f"/api/v1/namespaces/default/pods/p{i}/binding", json.dumps(body),
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                assert resp.status == 201
            conn.close()
        workers = [threading.Thread(target=bind, args=(k,)) for k in range(THREADS)]
        started = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        rate = PODS / (time.perf_counter() - started)
        assert rate >= 500, f"{rate:.0f} binds/s"
        assert all(p["spec"].get("nodeName") for p in srv.list("pods"))
    reader.join(5)
    assert len(events) >= 2 * PODS  # ADDED for each pod, a MODIFIED for each bind
