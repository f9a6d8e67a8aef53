"""The Dockerfile agrees with the manifests (no image is built here: there is no docker)."""

from __future__ import annotations

import json
import re

import yaml

from tests.deploy import manifests

DOCKERFILE = (manifests.ROOT / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    joined = DOCKERFILE.replace("\\\n", " ")
    return [line.split(None, 1)[1].strip() for line in joined.splitlines() if line.upper().startswith(name + " ")]


def test_base_image_entrypoint_and_install() -> None:
    assert all(base.split()[0] == "python:3.11-slim" for base in instructions("FROM"))
    assert json.loads(instructions("ENTRYPOINT")[-1]) == ["gpufleet"]
    (install,) = [r for r in instructions("RUN") if "pip install" in r]
    assert re.search(r"pip install -c constraints\.txt \.$", install), "runtime dependencies only, pinned"


def test_the_image_user_is_the_uid_the_scheduler_runs_as() -> None:
    deployment = yaml.safe_load((manifests.DEPLOY / "scheduler/deployment.yaml").read_text())
    psc = deployment["spec"]["template"]["spec"]["securityContext"]
    assert instructions("USER")[-1] == f"{psc['runAsUser']}:{psc['runAsGroup']}"
    assert psc["runAsUser"] != 0


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [ln for ln in (manifests.ROOT / ".dockerignore").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "*"
    assert {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")} == {"pyproject.toml", "constraints.txt",
                                                                        "README.md", "src"}
    copied = {part for c in instructions("COPY") if not c.startswith("--from") for part in c.split()[:-1]}
    assert copied == {"pyproject.toml", "constraints.txt", "README.md", "src"}
