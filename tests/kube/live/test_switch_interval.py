"""The scheduler process's GIL switch interval: set when the service starts running, if asked."""

from __future__ import annotations

import sys
from typing import Iterator

import pytest

from gpufleet.framework.profiles import builtin
from gpufleet.kube.scheduler import SchedulerService, ServiceSettings


@pytest.fixture(autouse=True)
def _restore_the_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def ran(settings: ServiceSettings) -> float:
    service = SchedulerService(object(), builtin("default"), settings)  # type: ignore[arg-type]
    service.start = lambda: None  # type: ignore[method-assign]  # no informers: nothing to talk to
    service.stop_event.set()
    try:
        service.run()
    finally:
        service.binder.close()
        service.events.close()
    return sys.getswitchinterval()


def test_the_service_sets_the_interval_it_is_given_when_it_runs() -> None:
    sys.setswitchinterval(0.005)
    assert ran(ServiceSettings(switch_interval_s=0.002)) == pytest.approx(0.002)


def test_without_one_the_interval_is_left_as_it_was() -> None:
    sys.setswitchinterval(0.004)
    assert ran(ServiceSettings()) == pytest.approx(0.004)
