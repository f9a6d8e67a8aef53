"""gpufleet's Kubernetes API access; the one package that imports a Kubernetes client (lightkube).

Built so far: what the node agent needs (`node_api`), with config loading (`config`), the
error tree that carries retry semantics (`errors`), retries (`retry`) and the node patches
as plain data (`node_patch`). The scheduler's informers, binder and status writer (issue 5)
will join them here.
"""
