"""Agent configuration: NVIDIA's device-plugin config v1 plus a `gpufleet:` section.

An existing NVIDIA config file works unchanged (`version`, `flags`, `sharing`, ...). Keys
that NVIDIA's plugin accepts but gpufleet does not act on (GDS, MOFED, IMEX, GFD's own
flags) are accepted with a warning; unknown keys are errors, so a typo is never silently
ignored. Every error names the file and the key: `config node.yaml: sharing.mps.resources[0].replicas: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, TypeVar

import yaml

from gpufleet.agent import xids
from gpufleet.model import ModelError, documents

T = TypeVar("T")


class ConfigError(ModelError):
    """A bad config value; `where` is `config <source>: <key path>`."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML syntax error in one line with its place ("line 3, column 7: ..."), not PyYAML's
    several lines that quote the text and name it "<unicode string>"."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return str(exc).splitlines()[0]


class MigStrategy(str, Enum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class SharingStrategy(str, Enum):
    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


MAX_REPLICAS = 1000
"""Replicas of one device: each becomes a device ID the kubelet tracks, and a fuzzed config with
10**9 of them took the agent minutes and gigabytes to plan. 1000 is one per GPU-milli."""
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "none")


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    name: str
    replicas: int


@dataclass(frozen=True, slots=True)
class Sharing:
    strategy: SharingStrategy = SharingStrategy.NONE
    rename_by_default: bool = False
    """Advertise replicated resources as `<name>.shared`."""
    fail_requests_greater_than_one: bool = False
    """Reject a container asking for more than one replica (default true for MPS)."""
    resources: tuple[ReplicatedResource, ...] = ()

    def replicas_for(self, resource: str) -> int:
        return next((r.replicas for r in self.resources if r.name == resource), 1)


@dataclass(frozen=True, slots=True)
class PluginFlags:
    pass_device_specs: bool = False
    """Also return /dev/nvidia* device nodes (for runtimes without the NVIDIA hook)."""
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    """`uuid` or `index`: what device IDs and NVIDIA_VISIBLE_DEVICES name."""
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    shared_devices_allocation_policy: str = "distributed"
    """Preferred replicas: `distributed` (least-used GPU first) or `packed`."""


@dataclass(frozen=True, slots=True)
class Flags:
    mig_strategy: MigStrategy = MigStrategy.NONE
    fail_on_init_error: bool = True
    """False: on a node without a usable GPU driver, idle instead of exiting."""
    nvidia_dev_root: str = "/"
    mps_root: str = "/run/nvidia/mps"
    plugin: PluginFlags = field(default_factory=PluginFlags)


@dataclass(frozen=True, slots=True)
class HealthSettings:
    enabled: bool = True
    ignored_xids: frozenset[int] = frozenset(xids.APPLICATION_XIDS)
    recoverable_xids: frozenset[int] = frozenset(xids.RECOVERABLE_XIDS)
    quiet_period_s: float = 300.0
    """A recoverable device is healthy again after this long without a new fault."""
    taint_effect: str = "PreferNoSchedule"
    """Effect of the per-device taint, or `none` for no taint (the condition is always set)."""


@dataclass(frozen=True, slots=True)
class MpsSettings:
    manage_daemon: bool = True
    """Start and supervise one MPS control daemon per MPS-shared resource (false: run NVIDIA's beside us)."""
    exclusive_process: bool = True
    """Put the daemon's GPUs in EXCLUSIVE_PROCESS compute mode, so that only the MPS server
    holds a context there and a container cannot bypass the limits by leaving MPS out."""
    control_binary: str = "nvidia-cuda-mps-control"
    """Name on PATH or absolute path (the NVIDIA container toolkit mounts it with the driver)."""


@dataclass(frozen=True, slots=True)
class DraSettings:
    publish: bool = False
    """Publish the node's GPUs as DRA ResourceSlices (`agent/resourceslices.py`)."""
    driver: str = "gpu.gpufleet.io"
    mig: str = "static"
    """`static`: the carved MIG instances; `dynamic`: every placement, as partitionable devices."""


@dataclass(frozen=True, slots=True)
class GpufleetSettings:
    fractions: bool = False
    """Advertise `gpufleet.io/gpu-milli` (and node capacity `gpufleet.io/gpu-memory`)."""
    health: HealthSettings = field(default_factory=HealthSettings)
    metrics_port: int = 9402
    """Prometheus port; 0 turns the endpoint off."""
    mps: MpsSettings = field(default_factory=MpsSettings)
    dra: DraSettings = field(default_factory=DraSettings)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    flags: Flags = field(default_factory=Flags)
    sharing: Sharing = field(default_factory=Sharing)
    gpufleet: GpufleetSettings = field(default_factory=GpufleetSettings)
    warnings: tuple[str, ...] = ()
    """Keys accepted but not acted on, for the log."""


_IGNORED_FLAGS = ("nvidiaDriverRoot", "gdrcopyEnabled", "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI",
                  "deviceDiscoveryStrategy", "gfd")
_IGNORED_PLUGIN = ("nvidiaCTKPath", "containerDriverRoot")


class _Section:
    """One mapping of the YAML tree with its key path, for error messages and unknown-key checks."""

    def __init__(self, data: object, path: str, source: str, warnings: list[str]) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config {source}: {path or '(top level)'}", "must be a mapping")
        self.data: Mapping[str, Any] = data
        self.path, self.source, self.warnings = path, source, warnings

    def where(self, key: str) -> str:
        return f"config {self.source}: {self.path + '.' if self.path else ''}{documents.printable(key)}"

    def check_keys(self, known: tuple[str, ...], ignored: tuple[str, ...] = ()) -> None:
        for key in self.data:
            if key in ignored:
                self.warnings.append(f"{self.where(key)} is accepted but gpufleet does not act on it")
            elif key not in known:
                raise ConfigError(self.where(key), f"unknown key; known keys here: {', '.join(known + ignored)}")

    def sub(self, key: str) -> _Section:
        return _Section(self.data.get(key), f"{self.path}.{key}" if self.path else key, self.source, self.warnings)

    def get(self, key: str, kind: type[T], default: T, check: Callable[[T], str | None] = lambda v: None) -> T:
        value = self.data.get(key, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(self.where(key), f"must be {kind.__name__}, got {value!r}")
        problem = check(value)
        if problem:
            raise ConfigError(self.where(key), problem)
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        return self.get(key, str, default, lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}")


def parse_config(data: object, source: str) -> AgentConfig:
    """Validate a loaded YAML document into an AgentConfig; raises ConfigError."""
    warnings: list[str] = []
    top = _Section(data, "", source, warnings)
    top.check_keys(("version", "flags", "sharing", "gpufleet"), ("resources", "imex"))
    top.get("version", str, "v1", lambda v: None if v in ("", "v1") else f"only v1 is supported, got {v!r}")
    config = AgentConfig(_flags(top.sub("flags")), _sharing(top.sub("sharing")), _gpufleet(top.sub("gpufleet")))
    if config.sharing.strategy is SharingStrategy.MPS and config.flags.mig_strategy is MigStrategy.MIXED:
        raise ConfigError(f"config {source}: sharing.mps", "MPS sharing cannot be combined with migStrategy mixed")
    return AgentConfig(config.flags, config.sharing, config.gpufleet, tuple(warnings))


def _flags(s: _Section) -> Flags:
    s.check_keys(("migStrategy", "failOnInitError", "nvidiaDevRoot", "mpsRoot", "plugin"), _IGNORED_FLAGS)
    p = s.sub("plugin")
    p.check_keys(("passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix",
                  "sharedDevicesAllocationPolicy"), _IGNORED_PLUGIN)
    strategies = p.data.get("deviceListStrategy", "envvar")
    strategies = [strategies] if isinstance(strategies, str) else strategies
    if not isinstance(strategies, list) or not strategies or any(x not in DEVICE_LIST_STRATEGIES for x in strategies):
        raise ConfigError(p.where("deviceListStrategy"),
                          f"must be one or a list of {', '.join(DEVICE_LIST_STRATEGIES)}, got {strategies!r}")
    plugin = PluginFlags(p.get("passDeviceSpecs", bool, False), tuple(strategies),
                         p.choice("deviceIDStrategy", ("uuid", "index"), "uuid"),
                         p.get("cdiAnnotationPrefix", str, "cdi.k8s.io/"),
                         p.choice("sharedDevicesAllocationPolicy", ("distributed", "packed"), "distributed"))
    return Flags(MigStrategy(s.choice("migStrategy", tuple(m.value for m in MigStrategy), "none")),
                 s.get("failOnInitError", bool, True), s.get("nvidiaDevRoot", str, "/"),
                 s.get("mpsRoot", str, "/run/nvidia/mps"), plugin)


def _sharing(s: _Section) -> Sharing:
    s.check_keys(("timeSlicing", "mps"))
    key = "mps" if "mps" in s.data else "timeSlicing" if "timeSlicing" in s.data else None
    if key is None:
        return Sharing()
    if "mps" in s.data and "timeSlicing" in s.data:
        s.warnings.append(f"{s.where('timeSlicing')} is ignored because sharing.mps is also set")
    section = s.sub(key)
    section.check_keys(("renameByDefault", "failRequestsGreaterThanOne", "resources"))
    items = section.data.get("resources")
    if not isinstance(items, list) or not items:
        raise ConfigError(section.where("resources"), "must be a non-empty list of {name, replicas}")
    resources = tuple(_replicated(section, i, item) for i, item in enumerate(items))
    strategy = SharingStrategy.MPS if key == "mps" else SharingStrategy.TIME_SLICING
    return Sharing(strategy, section.get("renameByDefault", bool, False),
                   section.get("failRequestsGreaterThanOne", bool, strategy is SharingStrategy.MPS), resources)


def _replicated(section: _Section, i: int, item: object) -> ReplicatedResource:
    r = _Section(item, f"{section.path}.resources[{i}]", section.source, section.warnings)
    r.check_keys(("name", "replicas"), ("rename", "devices"))
    name = r.get("name", str, "", lambda v: None if v.startswith("nvidia.com/") else
                 f"must be an nvidia.com/ resource (nvidia.com/gpu or nvidia.com/mig-<profile>), got {v!r}")
    replicas = r.get("replicas", int, 0, lambda v: f"must be at least 2, got {v}" if v < 2 else
                     f"must be at most {MAX_REPLICAS}, got {v}" if v > MAX_REPLICAS else None)
    return ReplicatedResource(name, replicas)


def _gpufleet(s: _Section) -> GpufleetSettings:
    s.check_keys(("fractions", "health", "metricsPort", "mps", "dra"))
    h = s.sub("health")
    h.check_keys(("enabled", "ignoredXids", "recoverableXids", "quietPeriodS", "taintEffect"))
    ignored = _xid_set(h, "ignoredXids", xids.APPLICATION_XIDS)
    recoverable = _xid_set(h, "recoverableXids", xids.RECOVERABLE_XIDS)
    if ignored & recoverable:
        raise ConfigError(h.where("recoverableXids"), f"XIDs {sorted(ignored & recoverable)} are also in ignoredXids")
    health = HealthSettings(h.get("enabled", bool, True), ignored, recoverable,
                            h.get("quietPeriodS", float, 300.0, lambda v: None if v > 0 else "must be positive"),
                            h.choice("taintEffect", TAINT_EFFECTS, "PreferNoSchedule"))
    port = s.get("metricsPort", int, 9402, lambda v: None if 0 <= v <= 65535 else "must be a port, 0..65535")
    m = s.sub("mps")
    m.check_keys(("manageDaemon", "exclusiveProcess", "controlBinary"))
    mps = MpsSettings(m.get("manageDaemon", bool, True), m.get("exclusiveProcess", bool, True),
                      m.get("controlBinary", str, "nvidia-cuda-mps-control",
                            lambda v: None if v.strip() else "must name the program"))
    d = s.sub("dra")
    d.check_keys(("publish", "driver", "mig"))
    dra = DraSettings(d.get("publish", bool, False), d.get("driver", str, "gpu.gpufleet.io", _driver_name),
                      d.choice("mig", ("static", "dynamic"), "static"))
    return GpufleetSettings(s.get("fractions", bool, False), health, port, mps, dra)


def _driver_name(name: str) -> str | None:
    """A DRA driver name is a DNS subdomain of at most 63 characters (`DriverNameMaxLength`)."""
    labels = name.split(".")
    if len(name) > 63 or not all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", label) for label in labels):
        return f"must be a lowercase DNS subdomain of at most 63 characters, like gpu.gpufleet.io, got {name!r}"
    return None


def _xid_set(h: _Section, key: str, default: tuple[int, ...]) -> frozenset[int]:
    value = h.data.get(key, list(default))
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in value):
        raise ConfigError(h.where(key), f"must be a list of XID numbers, got {value!r}")
    return frozenset(value)
