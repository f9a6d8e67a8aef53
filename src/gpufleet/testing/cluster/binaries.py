"""Where the pinned control-plane binaries are, and what to do when they are not there.

`make kube` (hack/kube/build.sh) builds kube-apiserver, kube-controller-manager,
kube-scheduler, etcd, kwok and Karpenter's KWOK provider from their Go modules into
`~/.cache/gpufleet/kube/<versions>/bin` (or `$GPUFLEET_KUBE_CACHE/<versions>/bin`), the
versions being those of `hack/kube/versions.env`. `GPUFLEET_KUBE_BIN` names another
directory holding the same binaries (for an installed gpufleet, without the checkout).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parents[4]
VERSIONS_FILE = REPO / "hack" / "kube" / "versions.env"
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "karpenter-kwok")


class MissingBinaries(RuntimeError):
    """A binary of the control plane is not built: the message says how to build it."""


@dataclass(frozen=True, slots=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str
    karpenter: str

    @property
    def key(self) -> str:
        """The cache directory's name, as hack/kube/build.sh spells it."""
        return (f"k8s-v{self.kubernetes}_etcd-v{self.etcd}_kwok-v{self.kwok}_karpenter-v{self.karpenter}")

    def as_dict(self) -> dict[str, str]:
        return {"kubernetes": f"v{self.kubernetes}", "etcd": f"v{self.etcd}", "kwok": f"v{self.kwok}",
                "karpenter": f"v{self.karpenter}"}


def _read_env(path: Path) -> dict[str, str]:
    """The NAME=value lines of versions.env."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def read_versions(path: Path = VERSIONS_FILE) -> Versions:
    values = _read_env(path)
    try:
        return Versions(values["KUBERNETES_VERSION"], values["ETCD_VERSION"], values["KWOK_VERSION"],
                        values["KARPENTER_VERSION"])
    except KeyError as exc:
        raise MissingBinaries(f"{path}: no {exc.args[0]}= line") from None


def bin_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The directory the binaries are expected in (it may not exist yet)."""
    if environ.get("GPUFLEET_KUBE_BIN"):
        return Path(environ["GPUFLEET_KUBE_BIN"])
    if not VERSIONS_FILE.is_file():
        raise MissingBinaries("the Kubernetes binaries are found through hack/kube/versions.env in a gpufleet "
                              "checkout, which this installation lacks: set GPUFLEET_KUBE_BIN to a directory "
                              f"holding {', '.join(NAMES)}")
    cache = Path(environ.get("GPUFLEET_KUBE_CACHE") or Path.home() / ".cache" / "gpufleet" / "kube")
    return cache / read_versions().key / "bin"


def binary(name: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The path of one binary; raises MissingBinaries saying how to build it."""
    where = bin_dir(environ)
    path = where / name
    if not os.access(path, os.X_OK):
        raise MissingBinaries(f"{name} is not built: expected {path}. Build the pinned control plane with "
                              f"`make kube` in the gpufleet checkout ({REPO}); it needs Go and the Go module "
                              "proxy and takes about 25 minutes on 2 cores the first time")
    return path


def helm(environ: Mapping[str, str] = os.environ) -> Path:
    """helm for the chart tests: `make kube` builds it into `<cache>/helm-v<HELM_VERSION>/bin`
    (`GPUFLEET_HELM` names another binary); raises MissingBinaries saying how to build it."""
    if environ.get("GPUFLEET_HELM"):
        path = Path(environ["GPUFLEET_HELM"])
    else:
        version = _read_env(VERSIONS_FILE).get("HELM_VERSION")
        if version is None:
            raise MissingBinaries(f"{VERSIONS_FILE}: no HELM_VERSION= line")
        cache = Path(environ.get("GPUFLEET_KUBE_CACHE") or Path.home() / ".cache" / "gpufleet" / "kube")
        path = cache / f"helm-v{version}" / "bin" / "helm"
    if not os.access(path, os.X_OK):
        raise MissingBinaries(f"helm is not built: expected {path}. Build it with `make kube` in the gpufleet "
                              f"checkout ({REPO}), which builds it from its Go module after the control plane")
    return path
