"""Where the agent's config comes from, and which one applies to this node.

`--config` names either one YAML file, or a directory holding several (a mounted ConfigMap,
one file per key), in which case the node label `nvidia.com/device-plugin.config` picks the
file by name, as with NVIDIA's config manager; without the label the `--config-default`
name applies, or the only file when there is just one.

`ConfigSource.poll()` is cheap and called periodically: it re-reads the chosen file and
returns a new config only when its name or content changed. A bad new config raises
`ConfigError`; the caller keeps serving the last good one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import yaml

from gpufleet.agent import config as cfg
from gpufleet.model import ModelError, documents, read_text

NODE_CONFIG_LABEL = "nvidia.com/device-plugin.config"


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: cfg.AgentConfig
    name: str
    """The config's name (file name), reported in logs and metrics."""
    fingerprint: str


def load_text(text: str, source: str) -> cfg.AgentConfig:
    try:
        data = documents.safe_load(text)
    except yaml.YAMLError as exc:
        raise cfg.ConfigError(f"config {source}", f"is not valid YAML: {cfg.yaml_problem(exc)}") from None
    return cfg.parse_config(data, source)


class ConfigSource:
    """One config file, or a directory of named configs chosen by a node label."""

    def __init__(self, path: Path | None, default_name: str | None = None,
                 node_labels: Callable[[], Mapping[str, str]] = dict) -> None:
        self._path = path
        self._default = default_name
        self._node_labels = node_labels
        self._current: str | None = None

    def poll(self) -> LoadedConfig | None:
        """The chosen config if it differs from the last one returned; raises ConfigError."""
        name, text = self._read()
        fingerprint = f"{name}:{hashlib.sha256(text.encode()).hexdigest()}"
        if fingerprint == self._current:
            return None
        loaded = LoadedConfig(load_text(text, name), name, fingerprint)
        self._current = fingerprint
        return loaded

    def _read(self) -> tuple[str, str]:
        if self._path is None:
            return "(defaults)", ""
        if not self._path.is_dir():
            return self._path.name, _read_file(self._path)
        configs = {p.name: p for p in sorted(self._path.iterdir())
                   if p.is_file() and not p.name.startswith(".")}
        configs.update({p.stem: p for p in configs.copy().values()})
        if not configs:
            raise cfg.ConfigError(f"config {self._path}", "is a directory holding no config files")
        wanted = self._node_labels().get(NODE_CONFIG_LABEL) or self._default
        if wanted is None:
            if len(set(configs.values())) != 1:
                raise cfg.ConfigError(f"config {self._path}",
                                      f"holds several configs; set the node label {NODE_CONFIG_LABEL} "
                                      "or --config-default to choose one")
            wanted = next(iter(configs))
        if wanted not in configs:
            raise cfg.ConfigError(f"config {self._path}",
                                  f"has no config named {wanted!r}; it has {', '.join(sorted(configs))}")
        return configs[wanted].name, _read_file(configs[wanted])


def _read_file(path: Path) -> str:
    try:
        return read_text(path)
    except OSError as exc:
        raise cfg.ConfigError(f"config {path}", f"cannot be read: {exc.strerror or exc}") from None
    except ModelError as exc:  # not UTF-8: a ConfigError, so that a running agent keeps its last good config
        raise cfg.ConfigError(f"config {exc.where}", exc.problem) from None
