"""Kubeconfig and in-cluster loading: every problem is one line naming the file and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.kube import config
from gpufleet.kube.errors import KubeConfigError

from .conftest import write_kubeconfig

VALID = """\
current-context: dev
clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]
contexts: [{name: dev, context: {cluster: c, user: u}}, {name: prod, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
"""

BROKEN = [
    ("a missing file", None, "no such file"),
    ("bad YAML", "clusters: [\n  - {name: c\n", "not valid YAML"),
    ("a list instead of a mapping", "- a\n- b\n", "expected a mapping with clusters, contexts and users"),
    ("no clusters at all", "contexts: []\n", "malformed: missing key 'clusters'"),
    ("a server that is not a string", VALID.replace("'http://127.0.0.1:1'", "5"), "malformed: Expected `str`"),
    ("no current context", VALID.replace("current-context: dev\n", ""), "no current-context is set"),
    ("an unknown current context", VALID.replace("current-context: dev", "current-context: staging"),
     "current-context 'staging' is not among its contexts (dev, prod)"),
    ("a context naming an undefined cluster", VALID.replace("{cluster: c, user: u}}, {name: prod",
                                                            "{cluster: x, user: u}}, {name: prod"),
     "context 'dev' names cluster 'x', which it does not define"),
    ("a context naming an undefined user", VALID.replace("users: [{name: u,", "users: [{name: v,"),
     "context 'dev' names user 'u', which it does not define"),
]


@pytest.mark.parametrize("text, message", [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_a_broken_kubeconfig_is_one_line_naming_the_file(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    with pytest.raises(KubeConfigError) as caught:
        config.from_kubeconfig(path)
    assert str(caught.value).startswith(f"kubeconfig {path}: ")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_current_context_is_used(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(VALID)
    loaded = config.from_kubeconfig(path)
    assert loaded.single.context_name == "dev" and loaded.single.cluster.server == "http://127.0.0.1:1"
    assert loaded.source == f"kubeconfig {path} (context dev)"


def test_a_context_without_a_user_connects_without_credentials(tmp_path: Path) -> None:
    """(That no credentials go out, the real server's 401 shows: tests/live/test_node_api_live.py.)"""
    path = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1", user=False)
    with config.connect(config.from_kubeconfig(path)) as client:
        assert client.config.user is not None and client.config.user.token is None


def test_a_missing_certificate_authority_is_reported_when_connecting(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(VALID.replace("server: 'http://127.0.0.1:1'",
                                  "server: 'https://127.0.0.1:1', certificate-authority: ca.pem"))
    with pytest.raises(KubeConfigError, match=rf"^kubeconfig {path} \(context dev\): cannot load a certificate "
                                              rf"\({tmp_path}/ca.pem\): No such file"):
        config.connect(config.from_kubeconfig(path))


def _service_account(tmp_path: Path, files: tuple[str, ...] = ("token", "ca.crt")) -> Path:
    for name in files:
        (tmp_path / name).write_text("x")
    return tmp_path


def test_in_cluster_config_uses_the_service_host_and_the_token_file(tmp_path: Path) -> None:
    account = _service_account(tmp_path)
    loaded = config.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, account)
    assert loaded.single.cluster.server == "https://10.0.0.1:443"
    assert loaded.single.user is not None and loaded.single.user.token_file == str(account / "token")


def test_in_cluster_config_brackets_an_ipv6_host(tmp_path: Path) -> None:
    loaded = config.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                               _service_account(tmp_path))
    assert loaded.single.cluster.server == "https://[fd00::1]:443"


@pytest.mark.parametrize("environ, files, message", [
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ("token", "ca.crt"), "KUBERNETES_SERVICE_PORT must both be set"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, ("ca.crt",), "token: no such file"),
], ids=["without the service port", "without a mounted token"])
def test_in_cluster_problems_are_one_line(tmp_path: Path, environ: dict[str, str], files: tuple[str, ...],
                                          message: str) -> None:
    with pytest.raises(KubeConfigError, match=f"^in-cluster config: .*{message}"):
        config.in_cluster(environ, _service_account(tmp_path, files))
