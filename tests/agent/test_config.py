"""NVIDIA's config format plus gpufleet's keys; errors name the key; per-node config selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.agent import config as cfg
from gpufleet.agent import configsource as cs

NVIDIA_EXAMPLE = """
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: index
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      rename: ignored-by-nvidia-too
"""


def test_an_nvidia_config_file_is_read_as_is() -> None:
    c = cs.load_text(NVIDIA_EXAMPLE, "nvidia.yaml")
    assert c.flags.mig_strategy is cfg.MigStrategy.MIXED
    assert c.flags.plugin == cfg.PluginFlags(True, ("envvar", "cdi-annotations"), "index")
    assert c.sharing == cfg.Sharing(cfg.SharingStrategy.TIME_SLICING, True, True,
                                    (cfg.ReplicatedResource("nvidia.com/gpu", 4),))
    assert any("nvidiaDriverRoot" in w for w in c.warnings)
    assert any("rename" in w for w in c.warnings)


def test_an_empty_config_means_nvidia_defaults_and_gpufleet_defaults() -> None:
    c = cs.load_text("", "empty.yaml")
    assert c == cfg.AgentConfig()
    assert c.gpufleet.health.ignored_xids == frozenset({13, 31, 43, 45, 68, 109})


def test_mps_fails_requests_greater_than_one_by_default_and_wins_over_time_slicing() -> None:
    c = cs.load_text("sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 3}]},"
                     " timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 9}]}}", "c.yaml")
    assert c.sharing.strategy is cfg.SharingStrategy.MPS and c.sharing.fail_requests_greater_than_one
    assert c.sharing.replicas_for("nvidia.com/gpu") == 3
    assert any("timeSlicing is ignored" in w for w in c.warnings)


def test_gpufleet_keys_set_fractions_health_and_metrics() -> None:
    c = cs.load_text("gpufleet: {fractions: true, metricsPort: 0, health: {ignoredXids: [13], "
                     "recoverableXids: [94, 74], quietPeriodS: 60, taintEffect: NoSchedule}}", "c.yaml")
    assert c.gpufleet.fractions and c.gpufleet.metrics_port == 0
    assert c.gpufleet.health == cfg.HealthSettings(True, frozenset({13}), frozenset({74, 94}), 60.0, "NoSchedule")


@pytest.mark.parametrize("text, where", [
    ("version: v2", "version: only v1 is supported"),
    ("flags: {migStrategy: some}", "flags.migStrategy: must be one of none, single, mixed"),
    ("flags: {plugin: {deviceListStrategy: [envvar, files]}}", "flags.plugin.deviceListStrategy"),
    ("flags: {plugin: {passDeviceSpecs: 'yes'}}", "flags.plugin.passDeviceSpecs: must be bool"),
    ("sharing: {timeSlicing: {resources: []}}", "sharing.timeSlicing.resources: must be a non-empty list"),
    ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}",
     "sharing.timeSlicing.resources[0].replicas: must be at least 2"),
    ("sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}", "sharing.mps.resources[0].name"),
    ("sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\nflags: {migStrategy: mixed}",
     "sharing.mps: MPS sharing cannot be combined with migStrategy mixed"),
    ("gpufleet: {health: {quietPeriodS: 0}}", "gpufleet.health.quietPeriodS: must be positive"),
    ("gpufleet: {health: {ignoredXids: [79], recoverableXids: [79]}}", "gpufleet.health.recoverableXids"),
    ("gpufleet: {health: {ignoredXids: [-1]}}", "gpufleet.health.ignoredXids: must be a list of XID numbers"),
    ("gpufleet: {metricsPort: 70000}", "gpufleet.metricsPort: must be a port"),
    ("gpufleet: {fraction: true}", "gpufleet.fraction: unknown key"),
    ("sharing: [1]", "sharing: must be a mapping"),
    ("flags: {migStrategy: [", "is not valid YAML"),
    ("gpufleet: {dra: {driver: GPU.Example.com}}", "gpufleet.dra.driver: must be a lowercase DNS subdomain"),
    ("gpufleet: {dra: {driver: " + "a" * 64 + "}}", "of at most 63 characters"),
    ("gpufleet: {dra: {mig: mixed}}", "gpufleet.dra.mig: must be one of static, dynamic"),
    ("gpufleet: {dra: {publsh: true}}", "gpufleet.dra.publsh: unknown key"),
], ids=["a future version", "an unknown MIG strategy", "an unknown device-list strategy", "a string for a flag",
        "empty sharing resources", "a single replica", "a resource outside nvidia.com", "MPS with mixed MIG",
        "a zero quiet period", "an XID both ignored and recoverable", "a negative XID", "a port out of range",
        "a misspelt gpufleet key", "a list where a mapping belongs", "broken YAML", "an upper-case DRA driver",
        "a DRA driver name too long", "an unknown DRA MIG mode", "a misspelt DRA key"])
def test_bad_config_is_an_error_naming_the_file_and_key(text: str, where: str) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        cs.load_text(text, "node.yaml")
    assert str(info.value).startswith("config node.yaml")
    assert where in str(info.value)


def _config_dir(tmp_path: Path) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    (d / "default").write_text("")
    (d / "a100-mig.yaml").write_text("flags: {migStrategy: mixed}")
    (d / "..data").mkdir()  # what a ConfigMap mount also holds
    return d


@pytest.mark.parametrize("labels, default, expected", [
    ({cs.NODE_CONFIG_LABEL: "a100-mig"}, "default", "a100-mig.yaml"),
    ({cs.NODE_CONFIG_LABEL: "a100-mig.yaml"}, None, "a100-mig.yaml"),
    ({}, "default", "default"),
], ids=["the node label picks a config by name", "the label may name the file", "without a label the default applies"])
def test_the_node_label_chooses_the_config(tmp_path: Path, labels: dict[str, str], default: str | None,
                                           expected: str) -> None:
    loaded = cs.ConfigSource(_config_dir(tmp_path), default, lambda: labels).poll()
    assert loaded is not None and loaded.name == expected


@pytest.mark.parametrize("labels, default, problem", [
    ({}, None, "holds several configs"),
    ({cs.NODE_CONFIG_LABEL: "h200"}, "default", "has no config named 'h200'"),
], ids=["several configs need a choice", "a label naming no config is an error"])
def test_config_choice_errors_are_clear(tmp_path: Path, labels: dict[str, str], default: str | None,
                                        problem: str) -> None:
    with pytest.raises(cfg.ConfigError, match=problem):
        cs.ConfigSource(_config_dir(tmp_path), default, lambda: labels).poll()


def test_poll_returns_a_config_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("flags: {migStrategy: single}")
    source = cs.ConfigSource(path)
    assert source.poll() is not None
    assert source.poll() is None
    path.write_text("flags: {migStrategy: mixed}")
    loaded = source.poll()
    assert loaded is not None and loaded.config.flags.mig_strategy is cfg.MigStrategy.MIXED


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(cfg.ConfigError, match="cannot be read"):
        cs.ConfigSource(tmp_path / "nope.yaml").poll()
