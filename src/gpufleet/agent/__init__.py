"""The node agent: GPU discovery, the kubelet device-plugin servers, health and node labels.

See docs/agent.md. Modules are imported by name (`gpufleet.agent.runtime`, ...); this
package re-exports nothing, so importing a pure module does not load grpc or NVML.
"""
