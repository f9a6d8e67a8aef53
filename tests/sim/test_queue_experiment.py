"""`gpufleet experiment queues` end to end on a small Philly-shaped trace, and its helpers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.sim import queue_experiment
from gpufleet.sim.traces import openb, philly


def test_the_experiment_writes_every_kpi_for_every_policy(small_philly: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = small_philly
    out = tmp_path / "q.json"
    code = main(["experiment", "queues", "--trace-dir", str(root), "--json", str(out), "--workers", "1",
                 "--out", str(tmp_path / "report")])
    assert code == 0
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == list(queue_experiment.QUEUE_POLICIES)
    for name, row in doc["policies"].items():
        for key in ("jct_mean_s", "jct_p99_s", "wait_max_s", "jain_fairness", "gpu_utilisation", "preemptions"):
            assert key in row, (name, key)
        assert row["finished"] == 18.0 and 0 < row["gpu_utilisation"] <= 1
    assert doc["meta"]["queues"] == 3
    assert "<img" in (tmp_path / "report" / "report.html").read_text()


def test_an_unknown_policy_is_a_one_line_error(small_philly: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = small_philly
    code = main(["experiment", "queues", "--trace-dir", str(root), "--json", str(tmp_path / "q.json"),
                 "--policies", "fifo,drr"])
    assert code == 2
    assert "unknown policy drr" in capsys.readouterr().err
    code = main(["experiment", "queues", "--trace-dir", str(root), "--json", str(tmp_path / "q.json"),
                 "--checkpoint-s", "-5"])
    assert code == 2
    assert "--checkpoint-s must be non-negative, got -5.0" in capsys.readouterr().err


def test_checkpoints_cut_the_work_preemption_throws_away(small_philly: Path, tmp_path: Path) -> None:
    lost = {}
    for every in ("0", "30"):
        out = tmp_path / f"q{every}.json"
        assert main(["experiment", "queues", "--trace-dir", str(small_philly), "--json", str(out), "--workers", "1",
                     "--policies", "las", "--checkpoint-s", every]) == 0
        doc = json.loads(out.read_text())
        assert doc["meta"]["checkpoint_s"] == float(every)
        lost[every] = doc["policies"]["las"]["gpu_hours_lost"]
    assert lost["0"] > 0, "las preempts on this trace"
    assert lost["30"] < lost["0"]


def test_dominated_names_the_policies_better_on_all_three_kpis() -> None:
    rows = {"a": {"jct_mean_s": 10.0, "wait_max_s": 10.0, "jain_fairness": 0.5},
            "b": {"jct_mean_s": 5.0, "wait_max_s": 5.0, "jain_fairness": 0.9},
            "c": {"jct_mean_s": 5.0, "wait_max_s": 50.0, "jain_fairness": 0.99}}
    assert queue_experiment.dominated(rows, "a") == ["b"]
    assert queue_experiment.dominated(rows, "c") == []


def test_the_philly_priority_mix_is_stable_and_close_to_its_shares() -> None:
    names = [f"vc-{i:04d}" for i in range(5000)]
    counts = Counter(philly.priority_of(n) for n in names)
    assert [philly.priority_of(n) for n in names[:50]] == [philly.priority_of(n) for n in names[:50]]
    assert abs(counts[1000] / 5000 - 0.1) < 0.02 and abs(counts[100] / 5000 - 0.6) < 0.03


def test_openb_qos_classes_map_to_priorities_in_order() -> None:
    order = sorted(openb.QOS_CLASSES, key=lambda q: -openb.QOS_PRIORITY[q])
    assert order[-1] == "BE" and openb.QOS_PRIORITY["LS"] > openb.QOS_PRIORITY["Burstable"] > 0
