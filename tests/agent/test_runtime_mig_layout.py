"""The running agent applies the scheduler's MIG layout (`gpufleet.io/mig-layout`) on the fake
backend: the device plugins and the inventory follow the new instances, the outcome is written
to `gpufleet.io/mig-layout-state`, an instance a pod holds is never destroyed, and a layout is
acted on once."""

from __future__ import annotations

import json

from gpufleet.agent import mig_layout as ml
from gpufleet.agent.kube import PodView
from gpufleet.agent.runtime import Agent
from gpufleet.model import annotations as ann

from .conftest import NODE, AgentFactory

ALL_1G = "GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a02"
"""a100-mig's second GPU: seven 1g.5gb. The third is one 7g.40gb; the first is mixed; the fourth has MIG off."""
MIXED_CONFIG = "flags: {migStrategy: mixed}"


def units(agent: Agent) -> dict[str, int]:
    return {p.plan.resource: len(p.plan.units) for p in agent.plugins}


def want(generation: int, **layout: list[str]) -> str:
    return json.dumps({"generation": generation, "gpus": {ALL_1G: layout["gpu"]}})


def written_state(agent: Agent, api: object) -> dict[str, object]:
    agent.report()
    return dict(json.loads(api.node.annotations[ml.STATE_ANNOTATION]))  # type: ignore[attr-defined]


def test_a_new_layout_is_carved_and_served_and_reported(make_agent: AgentFactory) -> None:
    agent, backend, api = make_agent("a100-mig", MIXED_CONFIG)
    before = units(agent)
    assert before["nvidia.com/mig-1g.5gb"] == 9 and before["nvidia.com/mig-7g.40gb"] == 1
    api.node.annotations[ml.LAYOUT_ANNOTATION] = want(4, gpu=["7g.40gb@0"])
    assert agent.sync_mig_layout()
    after = units(agent)
    assert after["nvidia.com/mig-1g.5gb"] == 2 and after["nvidia.com/mig-7g.40gb"] == 2
    assert written_state(agent, api) == {"generation": 4, "state": "success"}
    gpus = {g.uuid: g for g in ann.decode_inventory(api.node.annotations[ann.INVENTORY_ANNOTATION])}
    assert gpus[ALL_1G].mig == ("7g.40gb",)
    backend.destroy_mig_instance(ALL_1G, backend.devices()[1].mig_devices[0].uuid)  # changed by someone else
    assert not agent.sync_mig_layout()  # a generation is acted on once: the same annotation is not applied again
    assert not backend.devices()[1].mig_devices


def test_an_instance_a_running_pod_holds_is_not_destroyed(make_agent: AgentFactory) -> None:
    held = ann.encode_assignment(ann.GpuAssignment(NODE, mig=(ann.MigSliceRef(ALL_1G, 3),)))
    pod = PodView("team-a", "infer", "uid-1", NODE, "gpufleet", "Running", "", {ann.ASSIGNMENT_ANNOTATION: held})
    agent, backend, api = make_agent("a100-mig", MIXED_CONFIG, pods=(pod,))
    before, layout_before = units(agent), [m.uuid for g in backend.devices() for m in g.mig_devices]
    api.node.annotations[ml.LAYOUT_ANNOTATION] = want(5, gpu=["7g.40gb@0"])
    assert not agent.sync_mig_layout()
    state = written_state(agent, api)
    assert state["state"] == "failed" and state["generation"] == 5
    assert "in use by a pod or a prepared claim; nothing changed" in str(state["message"])
    assert units(agent) == before
    assert [m.uuid for g in backend.devices() for m in g.mig_devices] == layout_before


def test_a_finished_pods_instance_may_go(make_agent: AgentFactory) -> None:
    held = ann.encode_assignment(ann.GpuAssignment(NODE, mig=(ann.MigSliceRef(ALL_1G, 3),)))
    pod = PodView("team-a", "done", "uid-2", NODE, "gpufleet", "Succeeded", "", {ann.ASSIGNMENT_ANNOTATION: held})
    agent, _, api = make_agent("a100-mig", MIXED_CONFIG, pods=(pod,))
    api.node.annotations[ml.LAYOUT_ANNOTATION] = want(6, gpu=["7g.40gb@0"])
    assert agent.sync_mig_layout()


def test_a_malformed_layout_is_reported_and_changes_nothing(make_agent: AgentFactory) -> None:
    agent, _, api = make_agent("a100-mig", MIXED_CONFIG)
    before = units(agent)
    api.node.annotations[ml.LAYOUT_ANNOTATION] = '{"generation": 7, "gpus": {"GPU-x": ["7g.40gb"]}}'
    assert not agent.sync_mig_layout()
    state = written_state(agent, api)
    assert state["state"] == "failed" and "is not \"<profile>@<start>\"" in str(state["message"])
    assert units(agent) == before


def test_a_gpu_that_is_not_on_the_node_fails_and_the_others_apply(make_agent: AgentFactory) -> None:
    agent, _, api = make_agent("a100-mig", MIXED_CONFIG)
    api.node.annotations[ml.LAYOUT_ANNOTATION] = json.dumps(
        {"generation": 8, "gpus": {"GPU-elsewhere": ["7g.40gb@0"], ALL_1G: ["3g.20gb@0", "3g.20gb@4"]}})
    assert agent.sync_mig_layout()
    state = written_state(agent, api)
    assert state["state"] == "failed" and str(state["message"]) == "GPU GPU-elsewhere: not on this node"
    assert units(agent)["nvidia.com/mig-3g.20gb"] == 3
