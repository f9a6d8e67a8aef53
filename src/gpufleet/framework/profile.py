"""Scheduling profiles: which plugins run at each extension point, with what weights and args.

The YAML follows kube-scheduler's `KubeSchedulerConfiguration` profile shape, so it reads
familiar:

    profiles:
      - schedulerName: gpufleet
        plugins:
          filter: {enabled: [{name: NodeResourcesFit}, {name: GpuFit}]}
          score:  {enabled: [{name: FragAware, weight: 2}, {name: Topology, weight: 1}]}
        pluginConfig:
          - name: Topology
            args: {rackLabels: [topology.gpufleet.io/rack]}

Every mistake is a `ProfileError` naming the offending key path (`profiles[0].plugins.score.enabled[1].weight`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, get_args, get_origin, get_type_hints

import yaml

from gpufleet.framework.interfaces import (KEEPS_FIRST_MAX, DevicePicker, FilterPlugin, NormalizeScorePlugin,
                                           PermitPlugin, Plugin, PreFilterPlugin, ReservePlugin, ScorePlugin,
                                           UniformScorePlugin)
from gpufleet.framework.plugins.fragmentation import TypicalTask, typical_tasks
from gpufleet.framework.queueing import QueueingConfig
from gpufleet.framework.registry import NEEDS_TYPICAL_TASKS, BuildContext, Entry, NoArgs, default_registry
from gpufleet.framework.topology_levels import TopologyConfig
from gpufleet.model import PodSpec
from gpufleet.model import documents

DEFAULT_FILTERS = ("NodeResourcesFit", "TaintToleration", "NodeAffinity", "GpuFit")


class ProfileError(ValueError):
    """A profile that cannot be loaded; the message names the key path."""


@dataclass(frozen=True, slots=True)
class ScoreRef:
    name: str
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """A profile as configured (names and arguments), before plugins are built."""

    name: str = "gpufleet"
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scores: tuple[ScoreRef, ...] = ()
    plugin_args: Mapping[str, Any] = field(default_factory=dict)
    """Validated `Args` dataclass per plugin name."""
    queueing: QueueingConfig = QueueingConfig()
    topology: TopologyConfig = TopologyConfig()

    @property
    def needs_typical_tasks(self) -> bool:
        """Whether a scorer reads the typical-task mix (`BuildContext`), so drivers must pass one."""
        return any(s.name in NEEDS_TYPICAL_TASKS for s in self.scores)


@dataclass(frozen=True, slots=True)
class Profile:
    """A built profile: plugin instances classified by extension point."""

    name: str
    pre_filters: tuple[PreFilterPlugin, ...]
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]
    device_picker: DevicePicker | None
    reserves: tuple[ReservePlugin, ...]
    permits: tuple[PermitPlugin, ...] = ()
    normalizing: tuple[bool, ...] = ()
    """Per entry of `scores`: whether it normalises (classified once here, not per cycle)."""
    queueing: QueueingConfig = QueueingConfig()
    uniform: tuple[bool, ...] = ()
    """Per entry of `scores`: whether it can say it has no preference for a pod (`UniformScorePlugin`)."""
    keeps_first_max: tuple[bool, ...] = ()
    """Per entry of `scores`: whether its normalisation keeps the first highest raw score first
    (`interfaces.KEEPS_FIRST_MAX`)."""
    topology: TopologyConfig = TopologyConfig()
    """Topology levels for gangs and the default level of a gang that declares none."""


_MAX_WEIGHT = 1e300
"""Weights at or above this are refused: a 400-digit integer would not even convert to a float."""


def build_for(settings: ProfileSettings, pods: Iterable[PodSpec]) -> Profile:
    """`build_profile` with the typical-task mix of `pods` (FGD's rule, `typical_tasks`) when a
    scorer of the profile reads one, as the live scheduler does with the pods it sees."""
    if not settings.needs_typical_tasks:
        return build_profile(settings)
    return build_profile(settings, BuildContext(typical_tasks(pods)))


MIX_DRIFT = 0.05
"""How far the typical-task mix of the pods seen may drift (total variation distance: half the
sum of the probability changes, tasks that enter or leave counting in full) before
`ProfileForMix` rebuilds the profile. Every pod that arrives or leaves moves the mix a little;
rebuilding on each move would throw away the scorers' memos every cycle."""


def mix_drift(old: tuple[TypicalTask, ...], new: tuple[TypicalTask, ...]) -> float:
    """Total variation distance between two typical-task mixes."""
    def key(t: TypicalTask) -> tuple[object, ...]:
        return (t.cpu_milli, t.gpu_milli, t.num_gpu, t.models)
    p = {key(t): t.probability for t in old}
    q = {key(t): t.probability for t in new}
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in p.keys() | q.keys())


class ProfileForMix:
    """A profile kept built for the pods a long-running driver sees (the live scheduler, a
    simulated autoscaler): built once, or, when a scorer reads the typical-task mix, rebuilt
    when the mix of the pods has drifted more than `MIX_DRIFT` from the one it was built with."""

    def __init__(self, settings: ProfileSettings) -> None:
        self.settings = settings
        self._profile: Profile | None = None
        self._tasks: tuple[TypicalTask, ...] = ()

    def get(self, pods: Callable[[], Iterable[PodSpec]]) -> Profile:
        """The profile for the pods `pods()` gives (called only if the profile reads the mix)."""
        return self.get_for(lambda: typical_tasks(pods()))

    def get_for(self, mix: Callable[[], tuple[TypicalTask, ...]]) -> Profile:
        """The profile for the typical-task mix `mix()` gives (called only if the profile reads it)."""
        if not self.settings.needs_typical_tasks:
            if self._profile is None:
                self._profile = build_profile(self.settings)
            return self._profile
        tasks = mix()
        if self._profile is None or mix_drift(self._tasks, tasks) > MIX_DRIFT:
            self._profile = build_profile(self.settings, BuildContext(tasks))
            self._tasks = tasks
        return self._profile


def build_profile(settings: ProfileSettings, context: BuildContext = BuildContext(),
                  registry: Mapping[str, Entry] | None = None) -> Profile:
    reg = default_registry() if registry is None else registry
    instances: dict[str, Plugin] = {}

    def get(name: str, where: str) -> Plugin:
        if name not in reg:
            raise ProfileError(f"{where}: unknown plugin {name!r}; known: {', '.join(sorted(reg))}")
        if name not in instances:
            entry = reg[name]
            args = settings.plugin_args.get(name) or entry.args_type()
            instances[name] = entry.factory(args, context)
        return instances[name]

    filters = [get(n, f"filter {n}") for n in settings.filters]
    scores = [(get(s.name, f"score {s.name}"), s.weight) for s in settings.scores]
    for plugin in filters:
        if not isinstance(plugin, FilterPlugin):
            raise ProfileError(f"filter {plugin.name}: plugin has no filter extension point")
    for plugin, _ in scores:
        if not isinstance(plugin, ScorePlugin):
            raise ProfileError(f"score {plugin.name}: plugin has no score extension point")
    picker = next((p for p, _ in scores if isinstance(p, DevicePicker)), None)
    if picker is None:
        picker = next((p for p in filters if isinstance(p, DevicePicker)), None)
    every = list(instances.values())
    return Profile(settings.name,
                   tuple(p for p in every if isinstance(p, PreFilterPlugin)),
                   tuple(p for p in filters if isinstance(p, FilterPlugin)),
                   tuple((p, w) for p, w in scores if isinstance(p, ScorePlugin)),
                   picker,
                   tuple(p for p in every if isinstance(p, ReservePlugin)),
                   tuple(p for p in every if isinstance(p, PermitPlugin)),
                   tuple(isinstance(p, NormalizeScorePlugin) for p, _ in scores),
                   settings.queueing,
                   tuple(isinstance(p, UniformScorePlugin) for p, _ in scores),
                   tuple(isinstance(p, NormalizeScorePlugin) and getattr(p, KEEPS_FIRST_MAX, False) is True
                         for p, _ in scores),
                   settings.topology)


# -- YAML -------------------------------------------------------------------------------------

def load_profiles(text: str, source: str = "profile", registry: Mapping[str, Entry] | None = None
                  ) -> tuple[ProfileSettings, ...]:
    """Parse a KubeSchedulerConfiguration-like YAML document into profile settings."""
    try:
        doc = documents.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{where}: not valid YAML: {problem}") from None
    if doc is None:
        raise ProfileError(f"{source}: the file holds no YAML document")
    reg = default_registry() if registry is None else registry
    root = _mapping(doc, source)
    _only(root, {"apiVersion", "kind", "profiles"}, source)
    profiles = root.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise ProfileError(f"{source}: profiles: must be a non-empty list")
    return tuple(_profile(p, f"{source}: profiles[{i}]", reg) for i, p in enumerate(profiles))


def _profile(raw: object, where: str, reg: Mapping[str, Entry]) -> ProfileSettings:
    body = _mapping(raw, where)
    _only(body, {"schedulerName", "plugins", "pluginConfig", "queueing", "topology"}, where)
    name = body.get("schedulerName", "gpufleet")
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{where}.schedulerName: must be a non-empty string")
    plugins = _mapping(body.get("plugins", {}), f"{where}.plugins")
    _only(plugins, {"filter", "score"}, f"{where}.plugins")
    filters: tuple[str, ...] = DEFAULT_FILTERS
    if "filter" in plugins:
        filters = tuple(_ref(r, f"{where}.plugins.filter.enabled[{i}]", reg, weighted=False).name
                        for i, r in enumerate(_enabled(plugins["filter"], f"{where}.plugins.filter")))
    scores = tuple(_ref(r, f"{where}.plugins.score.enabled[{i}]", reg, weighted=True)
                   for i, r in enumerate(_enabled(plugins.get("score", {"enabled": []}), f"{where}.plugins.score")))
    args: dict[str, Any] = {}
    config = body.get("pluginConfig", [])
    if not isinstance(config, list):
        raise ProfileError(f"{where}.pluginConfig: must be a list")
    for i, item in enumerate(config):
        w = f"{where}.pluginConfig[{i}]"
        entry = _mapping(item, w)
        _only(entry, {"name", "args"}, w)
        pname = entry.get("name")
        if not isinstance(pname, str) or pname not in reg:
            raise ProfileError(f"{w}.name: unknown plugin {pname!r}")
        args[str(pname)] = parse_args(reg[str(pname)].args_type, entry.get("args", {}), f"{w}.args")
    queueing = parse_args(QueueingConfig, body.get("queueing", {}), f"{where}.queueing")
    problem = queueing.problem()
    if problem is not None:
        raise ProfileError(f"{where}.queueing.{problem[0]}: {problem[1]}")
    topology = parse_args(TopologyConfig, body.get("topology", {}), f"{where}.topology")
    problem = topology.problem()
    if problem is not None:
        raise ProfileError(f"{where}.topology.{problem[0]}: {problem[1]}")
    return ProfileSettings(name, filters, scores, args, queueing, topology)


def _enabled(raw: object, where: str) -> list[object]:
    body = _mapping(raw, where)
    _only(body, {"enabled"}, where)
    items = body.get("enabled", [])
    if not isinstance(items, list):
        raise ProfileError(f"{where}.enabled: must be a list")
    return items


def _ref(raw: object, where: str, reg: Mapping[str, Entry], *, weighted: bool) -> ScoreRef:
    body = _mapping(raw, where)
    _only(body, {"name", "weight"} if weighted else {"name"}, where)
    name = body.get("name")
    if not isinstance(name, str) or name not in reg:
        raise ProfileError(f"{where}.name: unknown plugin {name!r}; known: {', '.join(sorted(reg))}")
    weight = body.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < math.inf:
        raise ProfileError(f"{where}.weight: must be a non-negative number, got {weight!r}")
    if weight >= _MAX_WEIGHT:
        raise ProfileError(f"{where}.weight: must be below 1e300, got a number of {len(str(int(weight)))} digits")
    return ScoreRef(str(name), float(weight))


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def parse_args(args_type: type, raw: object, where: str) -> Any:
    """Validate a plugin's YAML args (camelCase keys) into its frozen Args dataclass."""
    body = _mapping(raw, where)
    if args_type is NoArgs:
        if body:
            raise ProfileError(f"{where}: this plugin takes no arguments, got {sorted(map(str, body))}")
        return NoArgs()
    hints = get_type_hints(args_type)
    fields = {f.name for f in dataclasses.fields(args_type)}
    values: dict[str, Any] = {}
    for key, value in body.items():
        attr = _snake(str(key))
        if attr not in fields:
            raise ProfileError(f"{where}.{documents.printable(key)}: unknown argument; "
                               f"known: {', '.join(sorted(fields))}")
        values[attr] = _typed(value, hints[attr], f"{where}.{key}")
    try:
        return args_type(**values)
    except ValueError as e:  # an Args dataclass's own range checks
        raise ProfileError(f"{where}: {e}") from None


def _typed(value: object, hint: Any, where: str) -> Any:
    origin = get_origin(hint)
    if origin is tuple:
        item = get_args(hint)[0]
        if not isinstance(value, list):
            raise ProfileError(f"{where}: must be a list")
        return tuple(_typed(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):  # .nan passes every range check an Args class makes
            raise ProfileError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ProfileError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def _mapping(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a mapping, got {type(raw).__name__}")
    return raw


def _only(body: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted((k for k in body if k not in allowed), key=str)  # YAML keys may be numbers too
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
