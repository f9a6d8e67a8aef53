"""The inputs the fuzzers found, each once: every one is now accepted or a one-line error naming the field.

Before the fixes each of these was a traceback (ValueError, AttributeError, RecursionError,
TypeError), a hang or a MemoryError, or an error message of two lines.
"""

from __future__ import annotations

import pytest

from tests.fuzz import targets

LAUGHS = ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
          "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
          "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nprofiles: [*e]\n")

YAML_TEXT = [
    pytest.param("profiles: 2001-13-45\n", "month must be in 1..12", id="a timestamp that is no date"),
    pytest.param("profiles: " + "9" * 5000 + "\n", "more than 4,300 digits", id="an integer of 5,000 digits"),
    pytest.param("profiles: 0x" + "f" * 5000 + "\n", "more than 4,300 digits", id="a hex integer too long to print"),
    pytest.param("profiles: !!timestamp 2026-01-01x\n", "as timestamp", id="an explicit tag on text it does not fit"),
    pytest.param("[" * 2000 + "]" * 2000, "nesting deeper than 100 levels", id="deep nesting"),
    pytest.param("profiles: &a [*a]\n", "an alias refers to a node that contains it", id="a recursive alias"),
    pytest.param(LAUGHS, "aliases expand the document to", id="billion laughs"),
]


@pytest.mark.parametrize("text, problem", YAML_TEXT)
def test_yaml_that_pyyaml_lets_through_is_a_one_line_error(text: str, problem: str) -> None:
    from gpufleet.agent import configsource
    from gpufleet.agent.config import ConfigError
    from gpufleet.framework.profile import ProfileError, load_profiles
    with pytest.raises(ProfileError, match="profile:1:[0-9]+: not valid YAML: ") as profile:
        load_profiles(text)
    with pytest.raises(ConfigError, match="config node.yaml: is not valid YAML: line 1, column") as config:
        configsource.load_text(text.replace("profiles", "flags"), "node.yaml")
    for exc in (profile.value, config.value):
        assert problem in str(exc) and len(str(exc).splitlines()) == 1


@pytest.mark.parametrize("data", [
    b"name: 0x" + b"f" * 5000 + b"\nnodes: []\n",  # ValueError from repr() of the name in the message
    b"name: 2026-13-45\nnodes: []\n",
    b"nodes:\n- {name: a, cpu: 1, memory: 1Gi, gpus: {model: A100, count: 2, memory: 40Gi, mig: {\xc2\xb2: [1g.5gb]}}}\n",
    b"nodes:\n- {name: a, cpu: 1e999999999, memory: 1Gi}\n",  # decimal.Overflow
], ids=["hex name", "bad timestamp", "a superscript GPU index", "a quantity past Decimal's range"])
def test_scenarios_found_by_fuzzing(data: bytes) -> None:
    assert targets.check_scenario(data) == "rejected"


def test_a_profile_arg_out_of_range_names_its_key() -> None:
    text = ("profiles:\n- plugins: {score: {enabled: [{name: FragAware}]}}\n"
            "  pluginConfig: [{name: FragAware, args: {tightnessWeight: -1}}]\n")
    from gpufleet.framework.profile import ProfileError, load_profiles
    with pytest.raises(ProfileError, match=r"profile: profiles\[0\]\.pluginConfig\[0\]\.args: tightnessWeight "
                                           r"must be in 0\.\.100, got -1"):
        load_profiles(text)


@pytest.mark.parametrize("text", [
    "profiles: [{1: a, b: c}]\n",  # sorted() of mixed int and str keys
    "profiles: [{pluginConfig: [{name: [1]}]}]\n",  # an unhashable plugin name looked up in the registry
    "profiles: [{plugins: {score: {enabled: [{name: {a: 1}}]}}}]\n",
    "profiles: [{plugins: {score: {enabled: [{name: Topology, weight: 1" + "0" * 400 + "}]}}}]\n",  # OverflowError in float()
])
def test_profiles_with_odd_keys_found_by_fuzzing(text: str) -> None:
    assert targets.check_profile(text) == "rejected"


@pytest.mark.parametrize("text", [
    "version: v1\nflags:\n  migStrategy: mixed\n? '\n\n  '\n: null\n",  # a key with a line break: two-line message
    "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 1356962546\n",  # 10**9 device IDs: MemoryError
])
def test_agent_configs_found_by_fuzzing(text: str) -> None:
    assert targets.check_agent_config(text) == "rejected"


@pytest.mark.parametrize("text", ["[" * 5000, '{"node": "n", "gpus": ["a"], "milli": ' + "9" * 5000 + "}"],
                         ids=["deep nesting", "a number of 5,000 digits"])
def test_annotations_json_that_json_lets_through(text: str) -> None:
    assert targets.check_annotations(text) == "rejected"


def test_a_node_advertising_a_billion_gpus_is_refused_not_built() -> None:
    node = {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "1000000000"}}}
    assert targets.check_api_object(node) == "rejected"


@pytest.mark.parametrize("obj", [
    {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"tolerations": [{"operator": "Sometimes"}]}},
    {"kind": "Node", "metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "NoWay"}]}},
    {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k", "operator": "In"}]}]}}}}},
    {"kind": "Queue", "metadata": {"name": "q"}, "spec": {"guaranteed": {"\n": ""}}},
    {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"resources": {"requests": {"cpu": "1e999999999"}}}]}},
], ids=["unknown toleration operator", "unknown taint effect", "In without values names the pod",
        "a resource key with a line break", "a CPU quantity past Decimal's range"])
def test_api_objects_found_by_fuzzing(obj: dict[str, object]) -> None:
    assert targets.check_api_object(obj) == "rejected"


@pytest.mark.parametrize("data", [b"node-0,1,1,1000000000,T4\n", b"node-0,1," + b"9" * 5000 + b",1,T4\n"],
                         ids=["a billion GPUs on a node", "5,000 digits"])
def test_openb_rows_found_by_fuzzing(data: bytes) -> None:
    assert targets.check_openb(b"sn,cpu_milli,memory_mib,gpu,model\n" + data) == "rejected"


@pytest.mark.parametrize("data", [
    b"ResNet-18 (batch size 16)\tx\t-n\t1\t1000\t0\t1000000000\n",
    b"ResNet-18 (batch size 16)\tx\t-n\t1\t" + b"9" * 5000 + b"\t0\t1\n",
], ids=["a gang of a billion GPUs", "5,000 digits"])
def test_philly_rows_found_by_fuzzing(data: bytes) -> None:
    assert targets.check_philly_trace(data) == "rejected"


@pytest.mark.parametrize("data", [b'{"philly": ["9999999999:0:0"]}', b"[" * 5000, b'{"a": ' + b"1" * 5000 + b"}",
                                  b'{"v100": {"(\'A\', 1)": {"null": 1' + b"0" * 400 + b'}}}',  # OverflowError in float()
                                  b'{"v100": {"(\'A\', 1)": {"null": -1}}}'],
                         ids=["a cluster of 10**10 GPUs", "deep nesting", "5,000 digits", "a rate of 400 digits",
                              "a negative rate"])
def test_philly_json_found_by_fuzzing(data: bytes) -> None:
    assert targets.check_philly_json(data) == "rejected"


def test_a_path_urlsplit_cannot_read_gets_400() -> None:
    """`\\x00//f[x`: urlsplit drops the NUL, then reads `f[x` as an unclosed IPv6 host (a ValueError)."""
    import io
    handler_type = targets.dashboard_handler()
    handler = handler_type.__new__(handler_type)
    handler.rfile, handler.wfile = io.BytesIO(b"GET \x00//f[vicon.ico HTTP/1.1\r\n\r\n"), io.BytesIO()
    handler.client_address, handler.server, handler.request = ("127.0.0.1", 0), None, None
    handler.handle_one_request()
    assert handler.wfile.getvalue().startswith(b"HTTP/1.1 400 ")


def test_a_base_60_replica_count_past_the_bound_is_refused() -> None:
    data = (b"nodes:\n- {name: a, cpu: 1, memory: 1Gi}\njobs:\n"
            b"- {name: j, replicas: 1:2:3:4, gang: true, resources: {limits: {nvidia.com/gpu: 2}}}\n")
    assert targets.check_scenario(data) == "rejected"


def test_a_negative_preferred_size_picks_no_device() -> None:
    plan = targets.agent_plans()[0][0]
    ids = list(plan.by_id)[:2]
    from gpufleet.agent.v1beta1 import api_pb2
    request = api_pb2.PreferredAllocationRequest()
    request.container_requests.add(must_include_deviceIDs=ids, allocation_size=-1)
    assert targets.check_kubelet(0, request.SerializeToString(), True, []) == "accepted"
