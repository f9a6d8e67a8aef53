"""Node agent latency: an injected XID to `Unhealthy` in ListAndWatch, and re-registration after a kubelet restart.

The agent runs with its default options (`AgentOptions`: supervisor poll 0.25 s, health poll
1 s) on the fake backend's `h100-sxm-8` fixture, against the kubelet peer of
`tests/agent/kubelet.py` over real unix sockets, as the unit tests do. The unit tests check that
these things happen; this script measures how fast, against the bounds of docs/health.md
(XID to Unhealthy: 1 s) and docs/agent.md (re-registration after a kubelet restart: 2 s).

- xid: from `inject_xid(gpu, 79)` to the kubelet peer receiving the list with that GPU
  `Unhealthy` (each trial on a fresh agent);
- register: from the start of the kubelet's restart (its sockets deleted, a new
  `kubelet.sock`) to the agent's Register call arriving at the new kubelet.

Prints a table and exits 1 if a trial passed its bound; with --json the last line is one
JSON object.

    .venv/bin/python bench/agent_latency.py [--trials 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for tests.agent

from gpufleet.agent import configsource, fake  # noqa: E402
from gpufleet.agent.kube import FakeNodeApi  # noqa: E402
from gpufleet.agent.runtime import Agent, AgentOptions  # noqa: E402
from tests.agent.kubelet import FakeKubelet  # noqa: E402

RESOURCE = "nvidia.com/gpu"
BOUNDS_S = {"xid": 1.0, "register": 2.0}
WAIT_S = 10.0


def _trial(kind: str) -> float:
    sock_dir = Path(tempfile.mkdtemp(prefix="gf-", dir="/tmp"))  # unix socket paths stay short
    config = sock_dir / "config.yaml"
    config.write_text("")
    kubelet = FakeKubelet(sock_dir)
    kubelet.start()
    backend = fake.load_fixture("h100-sxm-8")
    agent = Agent(lambda: backend, FakeNodeApi(), configsource.ConfigSource(config),
                  AgentOptions("bench-node", sock_dir, metrics_port=0))
    agent.start()
    try:
        ep = kubelet.endpoint(RESOURCE, timeout_s=WAIT_S)
        first = ep.next_list(timeout_s=WAIT_S)
        if kind == "xid":
            gpu = first.devices[3].ID
            start = time.monotonic()
            backend.inject_xid(gpu, 79)
            ep.wait_list(lambda u: any(d.ID == gpu and d.health == "Unhealthy" for d in u.devices), timeout_s=WAIT_S)
            return time.monotonic() - start
        restarted = time.monotonic()
        kubelet.restart()
        return kubelet.endpoint(RESOURCE, timeout_s=WAIT_S, after=restarted).registered_at - restarted
    finally:
        agent.stop()
        kubelet.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("gpufleet").setLevel(logging.ERROR)  # each trial's injected XID is logged as a warning
    results: dict[str, Any] = {}
    print(f"{'what':<10}{'trials':>8}{'median ms':>12}{'max ms':>10}{'bound ms':>10}")
    for kind, bound in BOUNDS_S.items():
        times = [_trial(kind) for _ in range(args.trials)]
        results[kind] = {"trials": len(times), "median_s": statistics.median(times), "max_s": max(times),
                         "bound_s": bound, "within_bound": max(times) < bound}
        print(f"{kind:<10}{len(times):>8}{statistics.median(times) * 1000:>12.1f}{max(times) * 1000:>10.1f}"
              f"{bound * 1000:>10.0f}")
    ok = all(r["within_bound"] for r in results.values())
    if args.json:
        print(json.dumps({"results": results, "python": platform.python_version(), "machine": platform.node()}))
    if not ok:
        print("a trial passed its bound", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
