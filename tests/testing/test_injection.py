"""Failure injection and the request log, for client tests."""

from __future__ import annotations

import socket
import time

from gpufleet.testing.apiserver import ApiServer

from .conftest import Client, pod

PODS = "/api/v1/namespaces/default/pods"


def test_the_next_n_matching_requests_fail_with_a_status_body(server: ApiServer, client: Client) -> None:
    server.inject("POST", r"/pods$", 500, times=2)
    results = [client.call("POST", PODS, pod(f"p{i}")) for i in range(3)]
    assert [r[0] for r in results] == [500, 500, 201]
    assert (results[0][1]["kind"], results[0][1]["reason"]) == ("Status", "InternalError")
    assert server.get("pods", "p0") is None and server.get("pods", "p2") is not None


def test_a_429_carries_retry_after(server: ApiServer, client: Client) -> None:
    server.inject("GET", r"/pods", 429, retry_after=3)
    conn = client._conn()
    conn.request("GET", PODS)
    resp = conn.getresponse()
    resp.read()
    assert (resp.status, resp.getheader("Retry-After")) == (429, "3")


def test_a_rule_can_target_watches_only(server: ApiServer, client: Client) -> None:
    server.inject(None, r"/pods$", 410, watch=True)
    assert client.call("GET", PODS)[0] == 200
    assert client.call("GET", f"{PODS}?watch=true")[0] == 410


def test_a_delay_makes_a_client_time_out(server: ApiServer) -> None:
    server.inject("GET", r"/pods$", None, delay_s=1.0)
    conn = Client(server.url)._conn(timeout_s=0.2)
    started = time.monotonic()
    conn.request("GET", PODS)
    try:
        conn.getresponse()
        raise AssertionError("expected a timeout")
    except (socket.timeout, TimeoutError):
        assert time.monotonic() - started < 0.9


def test_every_request_is_logged_with_its_status(server: ApiServer, client: Client) -> None:
    client.call("GET", f"{PODS}/missing")
    client.call("POST", PODS, pod("a"))
    assert server.requests[-2:] == [("GET", f"{PODS}/missing", 404), ("POST", PODS, 201)]
