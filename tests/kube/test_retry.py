"""Error translation, retries with bounded backoff, the write cool-down, and logging once per kind."""

from __future__ import annotations

import logging
import random
import socket
from pathlib import Path

import httpx2
import lightkube
import pytest

from gpufleet.kube import config
from gpufleet.kube.errors import KubeError, PermanentError, TemporaryError
from gpufleet.kube.node_api import KubeNodeApi
from gpufleet.kube.retry import Retrier, RetryPolicy

from .apiserver import FakeApiServer
from .conftest import NODE, POLICY, TIMEOUT_S, VirtualTime, make_api, write_kubeconfig

PODS = "/api/v1/pods"
NODE_PATH = f"/api/v1/nodes/{NODE}"
LOGGER = "gpufleet.kube.node_api"

STATUSES = [(409, TemporaryError), (410, TemporaryError), (429, TemporaryError), (500, TemporaryError),
            (503, TemporaryError), (400, PermanentError), (401, PermanentError), (403, PermanentError),
            (404, PermanentError), (422, PermanentError)]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("code, kind", STATUSES, ids=[f"{c} is {k.__name__}" for c, k in STATUSES])
def test_a_status_code_becomes_an_error_whose_type_says_whether_to_retry(
        server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime, code: int, kind: type[KubeError]) -> None:
    server.fail(code)
    with pytest.raises(KubeError) as caught:
        make_api(client, vtime, RetryPolicy(attempts=1)).pods_on_node()
    assert type(caught.value) is kind and caught.value.kind == f"HTTP {code}"
    assert str(caught.value).startswith(f"list pods on node {NODE}: {code} ")
    assert isinstance(caught.value.__cause__, lightkube.ApiError), "the library's exception is chained"


def test_a_500_then_success_is_retried_and_logged_once(
        server: FakeApiServer, api: KubeNodeApi, vtime: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    server.add_pod("ns", "p", NODE)
    server.fail(500, path=PODS)
    with caplog.at_level(logging.INFO, LOGGER):
        assert [p.name for p in api.pods_on_node()] == ["p"]
        assert server.count("GET", PODS) == 2 and vtime.sleeps == [0.25]
        assert _warnings(caplog) == [f"list pods on node {NODE}: 500 InternalError: injected 500; retrying with backoff"]
        assert "works again" not in caplog.records[-1].getMessage(), "0.25 s after a failure: not over yet"
        vtime.now += POLICY.episode_quiet_s
        api.pods_on_node()
    assert caplog.records[-1].getMessage() == f"list pods on node {NODE}: works again"


def test_an_episode_ends_only_after_a_quiet_time_so_interleaved_failures_warn_once(
        server: FakeApiServer, api: KubeNodeApi, vtime: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    """Concurrent calls during a partial outage: failures and successes alternate."""
    with caplog.at_level(logging.INFO, LOGGER):
        for _ in range(5):
            server.fail(500, times=POLICY.attempts, path=PODS)
            with pytest.raises(TemporaryError):
                api.pods_on_node()
            api.pods_on_node()
            vtime.now += 1.0
        assert len(_warnings(caplog)) == 1 and "works again" not in caplog.text
        vtime.now += POLICY.episode_quiet_s
        api.pods_on_node()
    assert caplog.records[-1].getMessage() == f"list pods on node {NODE}: works again"


def test_an_outage_is_logged_once_not_once_per_pod(
        server: FakeApiServer, api: KubeNodeApi, caplog: pytest.LogCaptureFixture) -> None:
    server.fail(503, times=12, path=PODS)
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(3):  # three pods' Allocate calls during the outage
            with pytest.raises(TemporaryError):
                api.pods_on_node()
    assert server.count("GET", PODS) == 12, "reads are not cooled down: each call really tries"
    assert len(_warnings(caplog)) == 1


def test_a_403_is_permanent_not_retried_and_says_which_permission_is_missing(
        server: FakeApiServer, api: KubeNodeApi, caplog: pytest.LogCaptureFixture) -> None:
    denied = ('pods is forbidden: User "system:serviceaccount:gpufleet:agent" cannot list resource "pods" '
              'in API group "" at the cluster scope')
    server.fail(403, path=PODS, message=denied)
    with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(PermanentError) as caught:
        api.pods_on_node()
    assert str(caught.value) == (f"list pods on node {NODE}: 403 Forbidden: {denied} (the agent's service account "
                                 "needs get/list/watch on pods and get/patch on nodes and nodes/status "
                                 "(docs/agent.md))")
    assert server.count("GET", PODS) == 1 and len(_warnings(caplog)) == 1


def test_a_429_waits_as_long_as_the_server_asks(server: FakeApiServer, api: KubeNodeApi, vtime: VirtualTime) -> None:
    server.fail(429, path=PODS, retry_after="2")
    api.pods_on_node()
    assert vtime.sleeps == [2.0]


def test_retries_are_bounded_in_attempts(server: FakeApiServer, api: KubeNodeApi, vtime: VirtualTime) -> None:
    server.fail(500, times=10, path=PODS)
    with pytest.raises(TemporaryError):
        api.pods_on_node()
    assert server.count("GET", PODS) == POLICY.attempts == 4 and vtime.sleeps == [0.25, 0.5, 1.0]


def test_retries_are_bounded_in_time(server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime) -> None:
    server.fail(500, times=10, path=PODS)
    with pytest.raises(TemporaryError):
        make_api(client, vtime, RetryPolicy(budget_s=0.7, jitter=0.0)).pods_on_node()
    assert vtime.sleeps == [0.25], "a second wait of 0.5 s would start a try 0.75 s after the first"


def test_backoff_is_jittered_so_that_nodes_do_not_retry_in_step(
        server: FakeApiServer, client: lightkube.Client, vtime: VirtualTime) -> None:
    server.fail(500, times=10, path=PODS)
    retrier = Retrier(RetryPolicy(jitter=0.2), logging.getLogger(LOGGER), sleep=vtime.sleep, clock=vtime.clock,
                      rng=random.Random(7))
    with pytest.raises(TemporaryError):
        KubeNodeApi(client, NODE, retrier).pods_on_node()
    nominal = [0.25, 0.5, 1.0]
    assert vtime.sleeps != nominal
    assert all(0.8 * n <= s <= 1.2 * n for s, n in zip(vtime.sleeps, nominal, strict=True))


def test_a_timeout_is_retried(server: FakeApiServer, api: KubeNodeApi, caplog: pytest.LogCaptureFixture) -> None:
    server.delay(10 * TIMEOUT_S, path=PODS)
    with caplog.at_level(logging.WARNING, LOGGER):
        assert api.pods_on_node() == []
    assert _warnings(caplog) == [f"list pods on node {NODE}: ReadTimeout: timed out; retrying with backoff"]


def test_an_unreachable_server_is_a_temporary_error(tmp_path: Path, vtime: VirtualTime) -> None:
    with socket.socket() as s:  # a loopback port with nothing listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with config.connect(config.from_kubeconfig(write_kubeconfig(tmp_path / "k", url)), TIMEOUT_S) as client:
        with pytest.raises(TemporaryError, match=f"^get node {NODE}: ConnectError") as caught:
            make_api(client, vtime).node_labels()
    assert isinstance(caught.value.__cause__, httpx2.ConnectError) and len(vtime.sleeps) == 3


def test_an_error_reply_without_a_content_type_is_still_translated(server: FakeApiServer, api: KubeNodeApi) -> None:
    server.fail(502, times=10, path=PODS, content_type=False)  # a load balancer's bare reply
    with pytest.raises(TemporaryError, match=f"^list pods on node {NODE}: 502 Bad Gateway$") as caught:
        api.pods_on_node()
    assert isinstance(caught.value.__cause__, httpx2.HTTPStatusError)


def test_a_failed_node_write_is_not_sent_again_until_its_cool_down_has_passed(
        server: FakeApiServer, api: KubeNodeApi, vtime: VirtualTime, caplog: pytest.LogCaptureFixture) -> None:
    from gpufleet.agent.kube import NodePatch

    server.fail(500, times=8, method="GET", path=NODE_PATH)
    patch = NodePatch(labels={"a": "b"})
    with caplog.at_level(logging.WARNING, LOGGER):
        with pytest.raises(TemporaryError):
            api.patch_node(patch)
        assert server.count("GET", NODE_PATH) == 4
        with pytest.raises(TemporaryError, match=r"\(not sent again for 4.0 s\)$"):
            api.patch_node(patch)  # the agent asks again 0.25 s later
        assert server.count("GET", NODE_PATH) == 4, "nothing was sent during the cool-down"
        vtime.now += 4.0
        with pytest.raises(TemporaryError):
            api.patch_node(patch)
        vtime.now += 4.0
        with pytest.raises(TemporaryError, match=r"not sent again for 8.0 s"):
            api.patch_node(patch)  # the cool-down doubled
        vtime.now += 4.0
        api.patch_node(patch)
    assert server.node(NODE)["metadata"]["labels"] == {"a": "b"}
    assert len(_warnings(caplog)) == 1
