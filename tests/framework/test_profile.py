"""Profiles: KubeSchedulerConfiguration-like YAML, errors that name the offending key path, and building."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

from gpufleet.framework.plugins.fgd import FragScorePlugin
from gpufleet.framework.plugins.fragmentation import TypicalTask, typical_tasks
from gpufleet.framework.plugins.gpu_fit import GpuFit
from gpufleet.framework.plugins.topology import Topology, TopologyArgs
from gpufleet.framework.profile import (DEFAULT_FILTERS, MIX_DRIFT, Profile, ProfileError, ProfileForMix,
                                        ProfileSettings, ScoreRef, build_for, build_profile, load_profiles, mix_drift)
from gpufleet.framework.profiles import builtin
from gpufleet.framework.registry import Entry, default_registry
from gpufleet.model import PodSpec
from gpufleet.testing import make_pod

FULL = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: gpufleet-pack
    plugins:
      filter: {enabled: [{name: NodeResourcesFit}, {name: GpuFit}]}
      score:  {enabled: [{name: MostAllocated, weight: 2}, {name: Topology, weight: 0.5}]}
    pluginConfig:
      - name: Topology
        args: {rackLabels: [example.com/rack, example.com/row]}
  - schedulerName: gpufleet-spread
    plugins:
      score: {enabled: [{name: LeastAllocated}]}
"""


def test_a_full_document_loads_into_profile_settings() -> None:
    pack, spread = load_profiles(FULL)
    assert pack == ProfileSettings("gpufleet-pack", ("NodeResourcesFit", "GpuFit"),
                                   (ScoreRef("MostAllocated", 2.0), ScoreRef("Topology", 0.5)),
                                   {"Topology": TopologyArgs(("example.com/rack", "example.com/row"))})
    assert spread == ProfileSettings("gpufleet-spread", DEFAULT_FILTERS, (ScoreRef("LeastAllocated", 1.0),), {})


def test_a_minimal_document_gets_the_default_filters_and_no_scores() -> None:
    (only,) = load_profiles("profiles: [{}]")
    assert only == ProfileSettings("gpufleet", DEFAULT_FILTERS, (), {})
    assert DEFAULT_FILTERS == ("NodeResourcesFit", "TaintToleration", "NodeAffinity", "GpuFit")


def test_a_loaded_profile_builds_plugins_for_each_extension_point() -> None:
    profile = build_profile(load_profiles(FULL)[0])
    assert profile.name == "gpufleet-pack"
    assert [p.name for p in profile.filters] == ["NodeResourcesFit", "GpuFit"]
    assert [(p.name, w) for p, w in profile.scores] == [("MostAllocated", 2.0), ("Topology", 0.5)]
    assert [p.name for p in profile.reserves] == ["Topology"]
    assert isinstance(profile.device_picker, GpuFit)        # MostAllocated and Topology pick no devices
    topology = profile.scores[1][0]
    assert isinstance(topology, Topology) and topology.args.rack_labels == ("example.com/rack", "example.com/row")


def test_the_first_scorer_that_picks_devices_picks_them() -> None:
    profile = build_profile(ProfileSettings(scores=(ScoreRef("MostAllocated"), ScoreRef("Random"), ScoreRef("BestFit"))))
    assert profile.device_picker is not None and profile.device_picker.name == "Random"


ERRORS: list[tuple[str, str, str]] = [
    ("an unknown score plugin names its list entry",
     "profiles: [{plugins: {score: {enabled: [{name: MostAllocated}, {name: Nope}]}}}]",
     "conf.yaml: profiles[0].plugins.score.enabled[1].name: unknown plugin 'Nope'; known: BestFit, "),
    ("an unknown filter plugin names its list entry",
     "profiles: [{plugins: {filter: {enabled: [{name: GPUFit}]}}}]",
     "conf.yaml: profiles[0].plugins.filter.enabled[0].name: unknown plugin 'GPUFit'"),
    ("a negative weight is rejected",
     "profiles: [{plugins: {score: {enabled: [{name: MostAllocated, weight: -1}]}}}]",
     "conf.yaml: profiles[0].plugins.score.enabled[0].weight: must be a non-negative number, got -1"),
    ("a string weight is rejected",
     "profiles: [{plugins: {score: {enabled: [{name: MostAllocated, weight: '2'}]}}}]",
     "conf.yaml: profiles[0].plugins.score.enabled[0].weight: must be a non-negative number, got '2'"),
    ("a boolean weight is rejected",
     "profiles: [{plugins: {score: {enabled: [{name: MostAllocated, weight: true}]}}}]",
     "conf.yaml: profiles[0].plugins.score.enabled[0].weight: must be a non-negative number, got True"),
    ("a filter takes no weight",
     "profiles: [{plugins: {filter: {enabled: [{name: GpuFit, weight: 1}]}}}]",
     "conf.yaml: profiles[0].plugins.filter.enabled[0]: unknown key 'weight'; allowed: name"),
    ("an unknown argument names itself and lists the known ones",
     "profiles: [{pluginConfig: [{name: Topology, args: {rackLabel: [r]}}]}]",
     "conf.yaml: profiles[0].pluginConfig[0].args.rackLabel: unknown argument; known: rack_labels"),
    ("an argument of the wrong type names itself",
     "profiles: [{pluginConfig: [{name: Topology, args: {rackLabels: rack}}]}]",
     "conf.yaml: profiles[0].pluginConfig[0].args.rackLabels: must be a list"),
    ("a list item of the wrong type names its index",
     "profiles: [{pluginConfig: [{name: Topology, args: {rackLabels: [rack, 7]}}]}]",
     "conf.yaml: profiles[0].pluginConfig[0].args.rackLabels[1]: expected str, got 7"),
    ("arguments for a plugin that takes none are rejected",
     "profiles: [{pluginConfig: [{name: MostAllocated, args: {x: 1}}]}]",
     "conf.yaml: profiles[0].pluginConfig[0].args: this plugin takes no arguments, got ['x']"),
    ("config for an unknown plugin is rejected",
     "profiles: [{pluginConfig: [{name: Nope}]}]",
     "conf.yaml: profiles[0].pluginConfig[0].name: unknown plugin 'Nope'"),
    ("text that is not YAML is rejected",
     "profiles: [", "conf.yaml:1:12: not valid YAML: "),
    ("a document that is not a mapping is rejected",
     "- a\n- b", "conf.yaml: must be a mapping, got list"),
    ("a document without profiles is rejected",
     "apiVersion: v1", "conf.yaml: profiles: must be a non-empty list"),
    ("an empty profile list is rejected",
     "profiles: []", "conf.yaml: profiles: must be a non-empty list"),
    ("an empty document is rejected",
     "", "conf.yaml: the file holds no YAML document"),
    ("an unknown top-level key is rejected",
     "profile: []", "conf.yaml: unknown key 'profile'; allowed: apiVersion, kind, profiles"),
    ("an unknown profile key is rejected",
     "profiles: [{plugin: {}}]", "conf.yaml: profiles[0]: unknown key 'plugin'; allowed: pluginConfig, plugins, "
                                 "queueing, schedulerName"),
    ("an unknown queue order is rejected with the choices",
     "profiles: [{queueing: {order: drf}}]",
     "conf.yaml: profiles[0].queueing.order: must be one of fifo, priority, fair, las, got 'drf'"),
    ("a misspelt queueing knob is rejected",
     "profiles: [{queueing: {preempt: true}}]", "conf.yaml: profiles[0].queueing.preempt: unknown argument"),
    ("a negative minimum runtime is rejected",
     "profiles: [{queueing: {minRuntimeSeconds: -1}}]",
     "conf.yaml: profiles[0].queueing.minRuntimeSeconds: must not be negative"),
    ("an extension point gpufleet does not configure is rejected",
     "profiles: [{plugins: {permit: {enabled: []}}}]",
     "conf.yaml: profiles[0].plugins: unknown key 'permit'; allowed: filter, score"),
    ("disabled lists are not supported and say so",
     "profiles: [{plugins: {score: {disabled: []}}}]",
     "conf.yaml: profiles[0].plugins.score: unknown key 'disabled'; allowed: enabled"),
    ("an enabled entry that is not a list is rejected",
     "profiles: [{plugins: {score: {enabled: MostAllocated}}}]",
     "conf.yaml: profiles[0].plugins.score.enabled: must be a list"),
    ("an empty scheduler name is rejected",
     "profiles: [{schedulerName: ''}]", "conf.yaml: profiles[0].schedulerName: must be a non-empty string"),
    ("the second profile's mistakes name the second profile",
     "profiles: [{}, {plugins: {score: {enabled: [{name: X}]}}}]",
     "conf.yaml: profiles[1].plugins.score.enabled[0].name: unknown plugin 'X'"),
    ("pluginConfig must be a list",
     "profiles: [{pluginConfig: {name: Topology}}]", "conf.yaml: profiles[0].pluginConfig: must be a list"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_profile_errors_name_the_offending_key(text: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profiles(textwrap.dedent(text), source="conf.yaml")
    assert str(err.value).startswith(message)


BUILD_ERRORS: list[tuple[str, ProfileSettings, str]] = [
    ("an unknown score plugin is rejected when building",
     ProfileSettings(scores=(ScoreRef("Nope"),)), "score Nope: unknown plugin 'Nope'; known: "),
    ("an unknown filter plugin is rejected when building",
     ProfileSettings(filters=("Nope",)), "filter Nope: unknown plugin 'Nope'"),
    ("a scorer listed as a filter is rejected",
     ProfileSettings(filters=("MostAllocated",)), "filter MostAllocated: plugin has no filter extension point"),
    ("a filter listed as a scorer is rejected",
     ProfileSettings(scores=(ScoreRef("GpuFit"),)), "score GpuFit: plugin has no score extension point"),
]


@pytest.mark.parametrize(("settings", "message"), [c[1:] for c in BUILD_ERRORS], ids=[c[0] for c in BUILD_ERRORS])
def test_build_errors_name_the_plugin(settings: ProfileSettings, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        build_profile(settings)
    assert str(err.value).startswith(message)


@dataclass(frozen=True, slots=True)
class _ShapeArgs:
    factor: float = 1.0
    spread: bool = False
    limit: int = 0


class _Shape:
    name = "Shape"

    def __init__(self, args: _ShapeArgs) -> None:
        self.args = args

    def score(self, state: object, pod: object, view: object, nodes: object) -> object:
        raise AssertionError("not called")


def _registry() -> dict[str, Entry]:
    reg = dict(default_registry())
    reg["Shape"] = Entry(lambda args, ctx: _Shape(args), _ShapeArgs)  # type: ignore[arg-type,return-value]
    return reg


def test_an_out_of_tree_plugin_gets_typed_args_from_yaml() -> None:
    text = "profiles: [{plugins: {score: {enabled: [{name: Shape}]}}, " \
           "pluginConfig: [{name: Shape, args: {factor: 2, spread: true, limit: 3}}]}]"
    (settings,) = load_profiles(text, registry=_registry())
    assert settings.plugin_args == {"Shape": _ShapeArgs(2.0, True, 3)}
    profile = build_profile(settings, registry=_registry())
    plugin = profile.scores[0][0]
    assert isinstance(plugin, _Shape) and plugin.args == _ShapeArgs(2.0, True, 3)


@pytest.mark.parametrize(("args", "message"), [
    ("{limit: 1.5}", "p: profiles[0].pluginConfig[0].args.limit: expected int, got 1.5"),
    ("{spread: 1}", "p: profiles[0].pluginConfig[0].args.spread: expected bool, got 1"),
    ("{factor: yes}", "p: profiles[0].pluginConfig[0].args.factor: expected float, got True"),
    ("[1]", "p: profiles[0].pluginConfig[0].args: must be a mapping, got list"),
], ids=["an int argument rejects a float", "a bool argument rejects an int", "a float argument rejects a bool",
        "args must be a mapping"])
def test_typed_args_reject_wrong_types(args: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profiles(f"profiles: [{{pluginConfig: [{{name: Shape, args: {args}}}]}}]", source="p",
                      registry=_registry())
    assert str(err.value) == message


def test_an_unknown_plugin_is_unknown_in_a_registry_that_lacks_it() -> None:
    with pytest.raises(ProfileError) as err:
        load_profiles("profiles: [{plugins: {score: {enabled: [{name: Shape}]}}}]")
    assert "unknown plugin 'Shape'" in str(err.value)
    assert "known: BestFit, DotProduct" in str(err.value)


def test_malformed_yaml_is_one_line_naming_file_line_and_column() -> None:
    from gpufleet.framework.profile import ProfileError, load_profiles

    with pytest.raises(ProfileError) as info:
        load_profiles("profiles: [\n", "bad.yaml")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("bad.yaml:2:1: not valid YAML:")


def _pods(whole: int, shares: int) -> list[PodSpec]:
    return ([make_pod(f"w{i}").cpu(4000).gpus(1).build() for i in range(whole)]
            + [make_pod(f"s{i}").cpu(1000).fraction(500).build() for i in range(shares)])


def _tasks_of(profile: Profile) -> tuple[TypicalTask, ...]:
    return next(p.scorer.tasks for p, _ in profile.scores if isinstance(p, FragScorePlugin))


def test_mix_drift_is_the_total_variation_distance_between_two_mixes() -> None:
    a, b = typical_tasks(_pods(50, 50)), typical_tasks(_pods(60, 40))
    assert mix_drift(a, a) == 0.0
    assert mix_drift(a, b) == pytest.approx(0.1)
    assert mix_drift(a, typical_tasks(_pods(10, 0))) == pytest.approx(0.5)   # the shares' task leaves: counted in full


def test_build_for_gives_the_default_profile_the_mix_of_the_pods_and_bestfit_none() -> None:
    pods = _pods(3, 1)
    assert _tasks_of(build_for(builtin("default"), pods)) == typical_tasks(pods)
    assert not builtin("bestfit").needs_typical_tasks
    assert not any(isinstance(p, FragScorePlugin) for p, _ in build_for(builtin("bestfit"), pods).scores)


def test_a_profile_for_the_pods_seen_is_rebuilt_only_when_their_mix_drifts_past_the_bound() -> None:
    kept = ProfileForMix(builtin("default"))
    first = kept.get(lambda: _pods(50, 50))
    assert kept.get(lambda: _pods(51, 50)) is first                  # about 0.005 of drift: the memos stay
    assert mix_drift(typical_tasks(_pods(50, 50)), typical_tasks(_pods(62, 38))) > MIX_DRIFT
    again = kept.get(lambda: _pods(62, 38))
    assert again is not first and _tasks_of(again) == typical_tasks(_pods(62, 38))
    calls: list[int] = []

    def pods() -> list[PodSpec]:
        calls.append(1)
        return []
    plain = ProfileForMix(builtin("bestfit"))
    assert plain.get(pods) is plain.get(pods)
    assert calls == []                                               # a profile without the mix never asks for pods
