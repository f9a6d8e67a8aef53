"""The health tracker on explicit times: classes, MIG resolution, the quiet period."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.agent import devices as dev
from gpufleet.agent import fake, inventory, xids
from gpufleet.agent.config import HealthSettings
from gpufleet.agent.backend import BackendError
from gpufleet.agent.health import HealthBoard, HealthMonitor, HealthTracker

A100 = [f"GPU-3f8a1b2c-7d4e-4c5f-9a6b-0e1d2c3b4a0{i}" for i in range(1, 5)]


def _tracker(**settings: object) -> HealthTracker:
    backend = fake.load_fixture("a100-mig")
    inv = inventory.inventory(backend.system(), backend.devices())
    return HealthTracker(HealthSettings(**settings), inv)  # type: ignore[arg-type]


def xid(gpu: str, code: int, gi: int = dev.WHOLE_GPU, ci: int = dev.WHOLE_GPU) -> dev.HealthEvent:
    return dev.HealthEvent(dev.EventKind.XID, gpu, code, gi, ci)


@pytest.mark.parametrize("event, fault_class, reason", [
    (xid(A100[3], 79), xids.FaultClass.NODE, "xid-79"),
    (xid(A100[3], 48), xids.FaultClass.RESET, "xid-48"),
    (xid(A100[3], 94), xids.FaultClass.RECOVERABLE, "xid-94"),
    (xid(A100[3], 1234), xids.FaultClass.RESET, "xid-1234"),
    (dev.HealthEvent(dev.EventKind.DOUBLE_BIT_ECC, A100[3]), xids.FaultClass.RESET, "double-bit-ecc"),
    (dev.HealthEvent(dev.EventKind.ROW_REMAP_FAILURE, A100[3]), xids.FaultClass.RESET, "row-remap-failure"),
], ids=["fallen off the bus needs the node", "a double-bit ECC XID needs a reset", "a contained ECC error recovers",
        "an unknown XID is treated as needing a reset", "a double-bit ECC event needs a reset",
        "a row-remapping failure needs a reset"])
def test_each_fault_gets_its_class(event: dev.HealthEvent, fault_class: xids.FaultClass, reason: str) -> None:
    t = _tracker()
    assert t.record(event, 0.0)
    fault = t.faults[A100[3]]
    assert (fault.fault_class, fault.reason) == (fault_class, reason)


@pytest.mark.parametrize("code", xids.APPLICATION_XIDS, ids=lambda code: f"xid {code} is an application fault")
def test_application_xids_are_ignored_by_default(code: int) -> None:
    t = _tracker()
    assert not t.record(xid(A100[3], code), 0.0) and not t.faults


def test_ignored_xids_are_configurable() -> None:
    t = _tracker(ignored_xids=frozenset({74}))
    assert not t.record(xid(A100[3], 74), 0.0)
    assert t.record(xid(A100[3], 13), 0.0), "13 is no longer ignored once the list is replaced"


def test_recoverable_fault_expires_only_after_a_quiet_period_since_the_last_event() -> None:
    t = _tracker(quiet_period_s=100.0)
    t.record(xid(A100[3], 94), 0.0)
    t.record(xid(A100[3], 94), 60.0)
    assert not t.expire(159.0)
    assert t.expire(160.0) and not t.faults


def test_reset_class_faults_never_expire() -> None:
    t = _tracker(quiet_period_s=1.0)
    t.record(xid(A100[3], 95), 0.0)
    assert not t.expire(1e9) and A100[3] in t.faults


def test_a_worse_fault_is_not_downgraded_by_a_recoverable_one() -> None:
    t = _tracker(quiet_period_s=1.0)
    t.record(xid(A100[3], 79), 0.0)
    t.record(xid(A100[3], 94), 5.0)
    assert t.faults[A100[3]].fault_class is xids.FaultClass.NODE
    assert not t.expire(100.0)


def test_a_mig_event_marks_the_mig_device_and_a_whole_gpu_event_the_gpu() -> None:
    t = _tracker()
    t.record(xid(A100[1], 48, gi=11, ci=0), 0.0)
    t.record(xid(A100[2], 48), 0.0)
    assert set(t.faults) == {"MIG-7b1d0f2a-3c4e-5f6a-9b8c-7d6e5f4a3b05", A100[2]}


def test_a_mig_event_for_an_unknown_instance_falls_back_to_the_gpu() -> None:
    t = _tracker()
    t.record(xid(A100[0], 48, gi=42, ci=0), 0.0)
    assert set(t.faults) == {A100[0]}


def test_losing_nvml_marks_every_gpu_and_unknown_gpus_are_ignored() -> None:
    t = _tracker()
    assert not t.record(xid("GPU-not-ours", 79), 0.0)
    assert t.record(dev.HealthEvent(dev.EventKind.LOST, None), 0.0)
    assert set(t.faults) == set(A100)


def test_disabled_health_checks_record_nothing() -> None:
    t = _tracker(enabled=False)
    assert not t.record(xid(A100[0], 79), 0.0)


def test_reconfigure_applies_new_settings_to_later_events() -> None:
    t = _tracker()
    t.reconfigure(HealthSettings(recoverable_xids=frozenset({74}), quiet_period_s=10.0))
    t.record(xid(A100[0], 74), 0.0)
    assert t.expire(10.0)


def test_the_board_wakes_waiters_on_publish() -> None:
    board = HealthBoard()
    assert board.wait_change(board.version, 0.01) == 0
    board.publish({})
    assert board.wait_change(0, 0.01) == 1


class _FlakyBackend:
    """Fails its first wait (as an NVML event set that cannot be created would), then reports an XID."""

    def __init__(self) -> None:
        self.calls = 0

    def wait_event(self, timeout_s: float) -> dev.HealthEvent | None:
        self.calls += 1
        if self.calls == 1:
            raise BackendError("nvmlEventSetCreate failed")
        return xid(A100[3], 79) if self.calls == 2 else None


def test_the_monitor_survives_a_failing_wait_and_publishes_later_faults() -> None:
    board = HealthBoard()
    monitor = HealthMonitor(_FlakyBackend(), _tracker(), board, lambda: 0.0, poll_s=0.01)  # type: ignore[arg-type]
    monitor.start()
    try:
        assert board.wait_change(0, 2.0) == 1
        assert set(board.faults()) == {A100[3]}
    finally:
        monitor.stop()


def test_the_default_xid_sets_are_nvidias_ignored_ones_and_the_recoverable_catalog_entries() -> None:
    assert xids.APPLICATION_XIDS == (13, 31, 43, 45, 68, 109)
    assert xids.RECOVERABLE_XIDS == (63, 92, 94)


def test_docs_health_table_lists_every_catalog_xid_with_its_class() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "health.md").read_text()
    for code, (meaning, cls) in xids.CATALOG.items():
        label = "application (ignored)" if cls is xids.FaultClass.APPLICATION else cls.value
        assert f"| {code} | {meaning} | {label} |" in doc, code
