"""The agent's DRA ResourceSlices (src/gpufleet/agent/resourceslices.py) as the real kube-apiserver
validates them: every shipped fixture, static and dynamic MIG, memory shares and taints, stored
as sent; and the per-slice device limit the builder packs for is the one the server enforces."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gpufleet.agent import fake, inventory
from gpufleet.agent import resourceslices as rs
from gpufleet.agent.resourceslices import MigMode, SliceOptions
from gpufleet.testing.cluster import ApiError, Cluster

RECORDED = Path(__file__).parent / "data"
"""What `gpufleet agent resourceslices` printed on a real H100 and a real H200 (docs/hardware.md, runs 5 and 6)."""
CASES = [(fixture, options) for fixture in fake.fixture_names()
         for options in (SliceOptions(), SliceOptions(mig=MigMode.DYNAMIC), SliceOptions(memory_shares=True))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(Path(tmp_path_factory.mktemp("resourceslices")) / "cluster") as c:
        yield c


def as_sent(spec: dict[str, Any]) -> dict[str, Any]:
    """The stored spec without what the server adds: a taint's `timeAdded`."""
    for d in spec.get("devices", []):
        for taint in d.get("taints", []):
            assert taint.pop("timeAdded")
    return spec


def slices_for(fixture: str, node: str, options: SliceOptions, **kw: Any) -> tuple[dict[str, Any], ...]:
    backend = fake.load_fixture(fixture)
    return rs.resource_slices(inventory.inventory(backend.system(), backend.devices()), node, 1, options, **kw)


@pytest.mark.parametrize("fixture,options", CASES,
                         ids=[f"{f}-{o.mig.value}{'-shares' if o.memory_shares else ''}" for f, o in CASES])
def test_kube_apiserver_accepts_and_stores_the_slices_as_sent(cluster: Cluster, fixture: str,
                                                              options: SliceOptions) -> None:
    node = f"{fixture}-{options.mig.value}{'-shares' if options.memory_shares else ''}"
    first_uuid = fake.load_fixture(fixture).devices()[0].uuid
    sent = slices_for(fixture, node, options, unhealthy=frozenset({first_uuid}))
    for s in sent:
        stored = cluster.admin.create(s)
        assert as_sent(stored["spec"]) == s["spec"], s["metadata"]["name"]
    listed = cluster.admin.list("resourceslices")
    assert sorted(o["metadata"]["name"] for o in listed if o["spec"]["pool"]["name"] == node) == \
        sorted(s["metadata"]["name"] for s in sent)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
@pytest.mark.parametrize("mode", ["static", "dynamic", "shares"])
def test_kube_apiserver_accepts_the_slices_recorded_on_a_real_gpu(cluster: Cluster, gpu: str, mode: str) -> None:
    sent = list(yaml.safe_load_all((RECORDED / f"{gpu}-resourceslices-{mode}.yaml").read_text()))
    for s in sent:
        s["metadata"]["name"] = f"{gpu}-{mode}-{s['metadata']['name']}"
        s["spec"]["nodeName"] = s["spec"]["pool"]["name"] = f"{gpu}-{mode}"
        assert as_sent(cluster.admin.create(s)["spec"]) == s["spec"]


def test_the_device_limit_the_builder_packs_for_is_the_servers(cluster: Cluster) -> None:
    """Two GPUs' worth of partitionable devices fill a slice; one more device is refused."""
    sent = slices_for("h100-sxm-8", "limit", SliceOptions(mig=MigMode.DYNAMIC))
    first, second = [s for s in sent if "devices" in s["spec"]][:2]
    assert len(first["spec"]["devices"]) == 52
    overfull = {**first, "metadata": {"name": "limit-overfull"},
                "spec": {**first["spec"], "devices": first["spec"]["devices"] + second["spec"]["devices"][:13]}}
    assert len(overfull["spec"]["devices"]) == rs.MAX_DEVICES_ADVANCED + 1
    with pytest.raises(ApiError) as refused:
        cluster.admin.create(overfull)
    assert refused.value.status == 422 and "64" in str(refused.value)
    full = {**overfull, "spec": {**overfull["spec"], "devices": overfull["spec"]["devices"][:rs.MAX_DEVICES_ADVANCED]}}
    cluster.admin.create(full)
