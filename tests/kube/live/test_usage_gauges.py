"""The GPU allocation gauge (and with it fragmentation and Queue status) while binds are in flight:
a cycle that took no snapshot of its own does not build one for them until the binder is done or
`usage_wait_s` has passed; a cycle that took one refreshes them as before."""

from __future__ import annotations

from typing import Iterator

import pytest

from gpufleet.framework.profiles import builtin
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings
from gpufleet.model import NodeName, Placement, PodUid

from .test_cache import bound, gpu_node
from .test_translate import pod


@pytest.fixture
def service() -> Iterator[SchedulerService]:
    s = SchedulerService(object(), builtin("default"), ServiceSettings(metrics_interval_s=0.0))  # type: ignore[arg-type]
    s.cache.upsert_node(gpu_node())
    try:
        yield s
    finally:
        s.binder.close()
        s.events.close()


def allocation(s: SchedulerService) -> float:
    value = s.metrics.registry.get_sample_value("gpufleet_gpu_allocation_ratio")
    assert value is not None
    return value


def bind_one(s: SchedulerService, name: str, gpu: int) -> None:
    """A pod of one whole GPU bound on n1 (two GPUs) (seen through the watch, as another replica's bind would be)."""
    placement = Placement(PodUid(f"uid-{name}"), NodeName("n1"), 0, 0, (gpu,), 1000, 81920)
    s.cache.upsert_pod(bound(pod(name, limits={"nvidia.com/gpu": 1}), placement, gpu_node()))


def busy(s: SchedulerService, value: bool) -> None:
    s.binder.busy = lambda: value  # type: ignore[method-assign]


def test_while_binds_are_in_flight_a_cycle_without_pending_pods_leaves_the_gauges(service: SchedulerService) -> None:
    service.cycle()
    assert allocation(service) == 0.0
    busy(service, True)
    bind_one(service, "a", 1)
    service.cycle()
    assert allocation(service) == 0.0  # still the value from before the binds
    busy(service, False)
    service.cycle()
    assert allocation(service) == pytest.approx(0.5)  # one of its two GPUs


def binding_after_a_cycle(s: SchedulerService) -> None:
    """A cycle (the gauges computed with nothing bound), then a pod bound while binds are in flight."""
    s.cycle()
    busy(s, True)
    bind_one(s, "a", 1)


def test_binds_in_flight_for_longer_than_the_wait_do_not_hold_the_gauges_back(service: SchedulerService) -> None:
    binding_after_a_cycle(service)
    service.settings = ServiceSettings(metrics_interval_s=0.0, usage_wait_s=0.0)
    service.cycle()
    assert allocation(service) == pytest.approx(0.5)  # one of its two GPUs


def test_a_cycle_that_took_a_snapshot_refreshes_the_gauges_while_binding(service: SchedulerService) -> None:
    binding_after_a_cycle(service)
    service.cache.upsert_pod(pod("waiting", limits={"nvidia.com/gpu": 4}))  # pending: fits nowhere
    service.cycle()
    assert allocation(service) == pytest.approx(0.5)  # one of its two GPUs
