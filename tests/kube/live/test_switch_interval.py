"""The scheduler process's GIL switch interval: the one asked for while the service runs, the one
before once it returns."""

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


def ran(settings: ServiceSettings) -> tuple[float, float]:
    """The interval while the service ran, and after."""
    service = SchedulerService(object(), builtin("default"), settings)  # type: ignore[arg-type]
    during: list[float] = []
    service.start = lambda: during.append(sys.getswitchinterval())  # type: ignore[method-assign]  # no informers
    service.stop_event.set()
    try:
        service.run()
    finally:
        service.binder.close()
        service.events.close()
    return during[0], sys.getswitchinterval()


def test_the_service_runs_with_the_interval_it_is_given_and_puts_the_old_one_back() -> None:
    sys.setswitchinterval(0.005)
    assert ran(ServiceSettings(switch_interval_s=0.002)) == (pytest.approx(0.002), pytest.approx(0.005))


def test_without_one_the_interval_is_left_as_it_was() -> None:
    sys.setswitchinterval(0.004)
    assert ran(ServiceSettings()) == (pytest.approx(0.004), pytest.approx(0.004))
