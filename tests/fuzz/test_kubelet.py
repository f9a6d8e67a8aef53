"""Fuzz the device plugin's gRPC calls (`agent.servicer`): any device IDs, sizes and assignments."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.v1beta1 import api_pb2
from tests.fuzz import seeds, targets
from tests.fuzz.strategies import WEIRD_TEXT, fuzz_settings, json_texts

PLANS = targets.agent_plans()
IDS = sorted({i for plan, _, _ in PLANS for i in list(plan.by_id)[:12]})
ANNOTATIONS = [json.loads(s.split(b"\x00")[0]) for s in seeds.annotation_texts()[1:]]
device_ids = st.lists(st.one_of(st.sampled_from(IDS), st.sampled_from(WEIRD_TEXT), st.text(max_size=10)), max_size=12)
sizes = st.one_of(st.integers(min_value=-2**31, max_value=2**31 - 1), st.integers(min_value=-2, max_value=12))


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, bytes, bool, list[str]]:
    preferred = draw(st.booleans())
    containers = draw(st.integers(min_value=0, max_value=3))
    if preferred:
        message = api_pb2.PreferredAllocationRequest()
        for _ in range(containers):
            message.container_requests.add(available_deviceIDs=draw(device_ids), must_include_deviceIDs=draw(device_ids),
                                           allocation_size=draw(sizes))
    else:
        message = api_pb2.AllocateRequest()
        for _ in range(containers):
            message.container_requests.add(devices_ids=draw(device_ids))
    assignments = draw(st.lists(json_texts(ANNOTATIONS), max_size=3))
    return draw(st.integers(min_value=0, max_value=len(PLANS) - 1)), message.SerializeToString(), preferred, assignments


@fuzz_settings(250)
@given(requests())
def test_requests_are_answered_or_refused_naming_the_resource(request: tuple[int, bytes, bool, list[str]]) -> None:
    targets.check_kubelet(*request)


@fuzz_settings(100)
@given(st.binary(max_size=200))
def test_garbage_bytes_never_crash_the_servicer(data: bytes) -> None:
    targets.check_kubelet_bytes(data)
