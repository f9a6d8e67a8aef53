"""Where the API server is and how to authenticate: a kubeconfig file, or the pod's service account.

lightkube can load both, but its failures are a KeyError for a context that names a missing
user, an AssertionError for a context without a user, or a message without the file's name.
Here every problem is one `KubeConfigError` line that names the file and what is wrong, so
the CLI can print it instead of a traceback. Only what the agent needs is supported: the
`current-context` of one file (no merging of a `KUBECONFIG` list), or in-cluster config.
A context without a user is allowed and sends no credentials, as kubectl does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import httpx2
import lightkube
import msgspec
import yaml
from lightkube.config import client_adapter
from lightkube.config.models import Cluster, Context, User

from gpufleet.kube.errors import KubeConfigError
from gpufleet.kube.tls import settle
from gpufleet.model import documents

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
FIELD_MANAGER = "gpufleet-agent"
"""Recorded in the node's managedFields, so `kubectl get node -o yaml --show-managed-fields`
shows which labels, taints and conditions the agent owns."""
SCHEDULER_FIELD_MANAGER = "gpufleet-scheduler"
"""The scheduler's writes (pod conditions, PodGroup status, leases) under its own name."""


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """A resolved server, credentials and TLS settings, and where they came from."""

    single: lightkube.SingleConfig
    source: str
    """For messages: "kubeconfig /path (context ctx)" or "in-cluster config"."""


def from_kubeconfig(path: Path) -> ApiConfig:
    """The current context of the kubeconfig at `path`; raises KubeConfigError."""
    where = f"kubeconfig {path}"
    data = _read_yaml(path, where)
    try:
        loaded = lightkube.KubeConfig.from_dict(data, fname=path)
    except (KeyError, TypeError, AttributeError, msgspec.ValidationError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise KubeConfigError(f"{where}: malformed: {detail}") from None
    name = loaded.current_context
    if not name:
        raise KubeConfigError(f"{where}: no current-context is set")
    context = loaded.contexts.get(name)
    if context is None:
        known = ", ".join(sorted(loaded.contexts)) or "none"
        raise KubeConfigError(f"{where}: current-context {name!r} is not among its contexts ({known})")
    cluster = loaded.clusters.get(context.cluster)
    if cluster is None:
        raise KubeConfigError(f"{where}: context {name!r} names cluster {context.cluster!r}, which it does not define")
    user = loaded.users.get(context.user) if context.user else User()
    if user is None:
        raise KubeConfigError(f"{where}: context {name!r} names user {context.user!r}, which it does not define")
    single = lightkube.SingleConfig(context_name=name, context=context, cluster=cluster, user=user, fname=path)
    return ApiConfig(single, f"{where} (context {name})")


def in_cluster(environ: Mapping[str, str] = os.environ, account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiConfig:
    """The pod's service account; raises KubeConfigError. The token file is re-read when it rotates."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError("in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set")
    token, ca = account_dir / "token", account_dir / "ca.crt"
    for needed in (token, ca):
        if not needed.is_file():
            raise KubeConfigError(f"in-cluster config: {needed}: no such file "
                                  "(is the service account token mounted into the pod?)")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    single = lightkube.SingleConfig(context_name="in-cluster", context=Context(cluster="in-cluster"),
                                    cluster=Cluster(server=server, certificate_auth=str(ca)),
                                    user=User(token_file=str(token)))
    return ApiConfig(single, "in-cluster config")


def connect(config: ApiConfig, timeout_s: float = 5.0) -> lightkube.Client:
    """A client for `config`, every request bounded by `timeout_s`; raises KubeConfigError.

    Building the client reads the CA and client certificates, so a missing or broken
    certificate is reported here, once, rather than on every call.
    """
    try:
        single = config.single
        # the TLS context settled before the client's threads share it (kube/tls.py)
        context = settle(client_adapter.verify_cluster(single.cluster, single.user or User(), single.abs_file))
        return lightkube.Client(single, timeout=httpx2.Timeout(timeout_s), field_manager=FIELD_MANAGER,
                                transport=httpx2.HTTPTransport(verify=context))
    except OSError as exc:  # ssl.SSLError included; its messages do not name the file
        raise KubeConfigError(f"{config.source}: cannot load a certificate ({_cert_files(config.single)}): "
                              f"{exc.strerror or exc}") from None
    except (lightkube.ConfigError, ValueError) as exc:  # ValueError: bad base64 in *-data
        raise KubeConfigError(f"{config.source}: {exc}") from None


def _cert_files(single: lightkube.SingleConfig) -> str:
    user = single.user or User()
    named = [f for f in (single.cluster.certificate_auth, user.client_cert, user.client_key) if f]
    return ", ".join(str(single.abs_file(f)) for f in named) or "inline certificate data"


def _read_yaml(path: Path, where: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KubeConfigError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KubeConfigError(f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = documents.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"{where}: not valid YAML: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise KubeConfigError(f"{where}: expected a mapping with clusters, contexts and users")
    return data


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())
