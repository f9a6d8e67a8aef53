"""Prometheus metrics of the agent, on a registry of its own (tests create many agents)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.devices = Gauge("gpufleet_agent_devices", "Advertised device IDs by resource and health",
                             ["resource", "health"], registry=self.registry)
        self.allocations = Counter("gpufleet_agent_allocations", "Allocate container requests by resource and result",
                                   ["resource", "result"], registry=self.registry)
        self.health_events = Counter("gpufleet_agent_health_events", "GPU health events by kind",
                                     ["kind"], registry=self.registry)
        self.config_errors = Counter("gpufleet_agent_config_errors", "Rejected config reloads",
                                     registry=self.registry)
        self.mps_up = Gauge("gpufleet_agent_mps_daemon_up", "1 while the MPS control daemon of a resource answers",
                            ["resource"], registry=self.registry)
        self.mps_restarts = Counter("gpufleet_agent_mps_daemon_restarts", "MPS control daemon starts after the first",
                                    ["resource"], registry=self.registry)
        self.assignments_rejected = Counter(
            "gpufleet_agent_assignments_rejected", "Pods whose GPU assignment the agent refused, by why its "
            "signature failed (missing, malformed, unknown-key, mismatch)", ["reason"], registry=self.registry)
        self._server: Any = None

    def set_devices(self, resource: str, healthy: int, unhealthy: int) -> None:
        self.devices.labels(resource, "Healthy").set(healthy)
        self.devices.labels(resource, "Unhealthy").set(unhealthy)

    def clear_devices(self) -> None:
        self.devices.clear()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve /metrics on `port` in a daemon thread (0 = do not serve)."""
        if port:
            self._server, _thread = start_http_server(port, addr, registry=self.registry)

    def shutdown(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.shutdown()
            server.server_close()

    def text(self) -> str:
        return generate_latest(self.registry).decode()
