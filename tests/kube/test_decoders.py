"""Threads decoding lightkube's models for the first time at once do not crash the process.

msgspec 0.22.0 builds a type's decoding info on first use and crashes (SIGSEGV) when threads
race to do it. Each check runs in fresh processes, since the info is built once per process:
eight threads decode the same model at once, with a 1 µs GIL switch interval to make the
race likely (without `build_decoders`, 32 of 40 such processes crashed for `Status`, 18 of 20
for `Node`).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

RACE = """
import sys, threading
{setup}
sys.setswitchinterval(1e-6)
start = threading.Barrier(8)

def decode():
    start.wait()
    for _ in range(50):
        {decode}

threads = [threading.Thread(target=decode) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""

CASES = {
    "the scheduler's ApiError (a Status)": (
        "import gpufleet.kube.rest\nfrom lightkube.models import meta_v1",
        "meta_v1.Status.from_dict({'kind': 'Status', 'status': 'Failure', 'reason': 'NotFound', 'code': 404, "
        "'details': {'kind': 'queues'}, 'metadata': {}})"),
    "the agent's node list": (
        "import gpufleet.kube.node_api\nfrom lightkube.core import decoders\nfrom lightkube.resources.core_v1 import Node",
        "decoders.decode_list(b'{\"items\": [{\"metadata\": {\"name\": \"n\", \"labels\": {\"a\": \"b\"}}, "
        "\"status\": {\"capacity\": {\"nvidia.com/gpu\": \"8\"}, \"conditions\": [{\"type\": \"Ready\", "
        "\"status\": \"True\"}]}}]}', Node)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_threads_decoding_a_model_first_at_once_do_not_crash(case: str) -> None:
    setup, decode = CASES[case]
    code = textwrap.dedent(RACE).format(setup=setup, decode=decode)
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{case}: exit {done.returncode}\n{done.stderr[-2000:]}"
