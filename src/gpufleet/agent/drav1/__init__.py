"""The kubelet's DRA (v1) and plugin-registration gRPC APIs, generated from their protos."""
